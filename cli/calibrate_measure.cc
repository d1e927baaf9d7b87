// `kimi-plan calibrate`'s measurement (kimi-plan-runtime): LibTorch times the
// GPU's products; the flags were read and checked by calibrate_command.cc.
#include <sstream>

#include "cli/calibrate_command.h"
#include "cli/dispatch.h"
#include "cli/log.h"
#include "common/range.h"
#include "runtime/train/calibrate.h"
#include "store/store.h"

namespace kp {

namespace {

// Comma-separated sizes, each read by the shared range check and a multiple
// of 16 (fp8 products need it).
Result<std::vector<std::int64_t>> Sizes(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    KP_ASSIGN_OR_RETURN(const std::int64_t v, ParseIntInRange(flag, item, 16, 1 << 20));
    if (v % 16 != 0) return Status::InvalidArgument(flag + ": must be a multiple of 16, got " + item);
    out.push_back(v);
  }
  if (out.empty()) return Status::InvalidArgument(flag + ": give at least one size");
  return out;
}

Status MeasureCalibrationCommand(const po::variables_map& vm, const std::string& out, CliEnv& env) {
  CalibrateOptions o;
  o.gpu = vm["gpu-name"].as<std::string>();
  if (vm.count("m")) {
    KP_ASSIGN_OR_RETURN(o.ms, Sizes(vm["m"].as<std::string>(), "--m"));
  }
  if (vm.count("n")) {
    KP_ASSIGN_OR_RETURN(o.ns, Sizes(vm["n"].as<std::string>(), "--n"));
  }
  if (vm.count("k")) {
    KP_ASSIGN_OR_RETURN(o.ks, Sizes(vm["k"].as<std::string>(), "--k"));
  }
  o.fp8 = !vm.count("no-fp8");
  // Refused before anything is opened or written: no GPU, or a store that
  // cannot be opened.
  KP_RETURN_IF_ERROR(CheckCalibrationDevice());
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(vm["db"].as<std::string>(), env.clock));
  Result<CalibrationTable> t = MeasureCalibration(o, [&](const std::string& line) { Progress(env, line); });
  if (!t.ok()) return t.status();
  const std::string text = CalibrationToJson(*t) + "\n";
  KP_RETURN_IF_ERROR(env.fs.WriteFile(out, text).WithContext("--out"));
  // Recorded only if it is reported (the table is in its file either way).
  return store->InTransaction([&]() -> Status {
    KP_ASSIGN_OR_RETURN(const std::int64_t id, store->InsertCalibration({0, "", t->gpu, out, text}));
    env.out << "calibration table for " << t->gpu << ": " << t->Gemm(GemmDtype::kBf16)->points().size()
            << " bf16 shapes" << (t->Gemm(GemmDtype::kFp8) ? " and fp8" : "") << ", copy "
            << t->memory_copy.value() / 1e9 << " GB/s -> " << out << " (calibration #" << id << ")\n";
    return CheckOutput(env.out);
  });
}

}  // namespace

Status RuntimeCalibrateCommand(const std::vector<std::string>& args, CliEnv& env) {
  return CalibrateCommandWith(args, env, MeasureCalibrationCommand);
}

}  // namespace kp
