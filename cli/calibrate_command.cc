// `kimi-plan calibrate`: measures this machine's GPU into a calibration table
// (specs/calibration.h, docs/presets.md) and writes it as a preset file. Needs
// LibTorch with CUDA and a GPU; anywhere else it refuses before any work.
#include <sstream>

#include "cli/commands.h"
#include "cli/log.h"
#include "cli/output_paths.h"
#include "cli/options.h"
#include "common/range.h"
#include "store/store.h"
#ifdef KIMI_PLAN_HAS_TORCH
#include "runtime/train/calibrate.h"
#endif

namespace kp {

#ifdef KIMI_PLAN_HAS_TORCH
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

}  // namespace
#endif

Status CalibrateCommand(const std::vector<std::string>& args, CliEnv& env) {
  po::options_description desc(
      "kimi-plan calibrate --out FILE [--gpu-name NAME] [--m LIST] [--n LIST] [--k LIST] [--no-fp8]\n\n"
      "Times bf16 (and fp8) matrix products over every combination of the given sizes and the\n"
      "device-to-device copy on cuda:0, and writes the calibration table the planner prices plans\n"
      "from (docs/presets.md, \"Calibration tables\"), and records it in the store. Needs a CUDA GPU. Options");
  desc.add_options()("help,h", "this text")
      ("out", po::value<std::string>(), "the table to write (e.g. presets/calibration/h200.json)")
      ("gpu-name", po::value<std::string>()->default_value("h200"), "the GPU preset the table is for")
      ("m", po::value<std::string>(), "rows (tokens) to measure, comma separated (default 128..16384, powers of 2)")
      ("n", po::value<std::string>(), "output widths (default 128..32768)")
      ("k", po::value<std::string>(), "inner sizes (default 128..32768)")
      ("no-fp8", "bf16 only");
  AddOutputOptions(desc);
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  if (!vm.count("out")) return Status::InvalidArgument("--out: name the table file to write");
  const std::string out = vm["out"].as<std::string>();
  KP_RETURN_IF_ERROR(CheckOutputFile(vm, env, "out", /*create_parent=*/true));
#ifdef KIMI_PLAN_HAS_TORCH
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
  KP_ASSIGN_OR_RETURN(const std::int64_t id, store->InsertCalibration({0, "", t->gpu, out, text}));
  env.out << "calibration table for " << t->gpu << ": " << t->Gemm(GemmDtype::kBf16)->points().size()
          << " bf16 shapes" << (t->Gemm(GemmDtype::kFp8) ? " and fp8" : "") << ", copy "
          << t->memory_copy.value() / 1e9 << " GB/s -> " << out << " (calibration #" << id << ")\n";
  return Status::Ok();
#else
  (void)out;
  return Status::InvalidArgument(
      "this build has no LibTorch; calibrate needs LibTorch with CUDA and a GPU (scripts/gpu_build.sh "
      "builds kimi-plan-calibrate on a GPU machine)");
#endif
}

}  // namespace kp
