// `kimi-plan calibrate`: measures this machine's GPU into a calibration table
// (specs/calibration.h, docs/presets.md) and writes it as a preset file. Needs
// LibTorch with CUDA and a GPU; anywhere else it refuses before any work.
#include "cli/calibrate_command.h"
#include "cli/commands.h"
#include "cli/output_paths.h"
#include "cli/options.h"

namespace kp {

Status CalibrateCommandWith(const std::vector<std::string>& args, CliEnv& env, CalibrationMeasurer measure) {
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
  KP_RETURN_IF_ERROR(CheckDistinctPaths(vm, env, {"db", "out"}));
  if (measure) return measure(vm, out, env);
  return Status::InvalidArgument(
      "this build has no LibTorch; calibrate needs LibTorch with CUDA and a GPU (scripts/gpu_build.sh "
      "builds kimi-plan-calibrate on a GPU machine)");
}

Status CalibrateCommand(const std::vector<std::string>& args, CliEnv& env) {
  return CalibrateCommandWith(args, env, nullptr);
}

}  // namespace kp
