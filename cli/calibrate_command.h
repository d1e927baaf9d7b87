// `kimi-plan calibrate` in two halves: the flags (checked in every build)
// and the measurement (kimi-plan-runtime only, with LibTorch).
#ifndef KIMI_PLAN_CLI_CALIBRATE_COMMAND_H_
#define KIMI_PLAN_CLI_CALIBRATE_COMMAND_H_

#include <string>
#include <vector>

#include "cli/options.h"

namespace kp {

/// Measures and writes the table once the flags passed; `out` is --out.
using CalibrationMeasurer = Status (*)(const po::variables_map& vm, const std::string& out, CliEnv& env);

/// Parses and checks calibrate's flags, then calls `measure`; null: refuses
/// (InvalidArgument) as a build without LibTorch must.
Status CalibrateCommandWith(const std::vector<std::string>& args, CliEnv& env, CalibrationMeasurer measure);

/// The measuring calibrate (cli/calibrate_measure.cc, LibTorch builds only).
Status RuntimeCalibrateCommand(const std::vector<std::string>& args, CliEnv& env);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_CALIBRATE_COMMAND_H_
