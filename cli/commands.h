// One function per subcommand; cli.cc dispatches to them.
#ifndef KIMI_PLAN_CLI_COMMANDS_H_
#define KIMI_PLAN_CLI_COMMANDS_H_

#include <string>
#include <vector>

#include "cli/cli.h"
#include "common/status.h"

namespace kp {

/// Each returns Ok after printing its result, or the Status that main maps
/// to an exit code. Printing the error is the dispatcher's job.
Status PlanCommand(const std::vector<std::string>& args, CliEnv& env);
Status SimulateCommand(const std::vector<std::string>& args, CliEnv& env);
Status LaunchCommand(const std::vector<std::string>& args, CliEnv& env);
Status ReportCommand(const std::vector<std::string>& args, CliEnv& env);
/// `kimi-plan ingest`: another engine's metrics file (Verl's) into the store.
Status IngestCommand(const std::vector<std::string>& args, CliEnv& env);
/// `kimi-plan checkpoint inspect PATH`: a safetensors file's or checkpoint folder's tensors;
/// `kimi-plan checkpoint export SAVE --out DIR`: a layout-free save as a Hugging Face folder.
Status CheckpointCommand(const std::vector<std::string>& args, CliEnv& env);
/// `kimi-plan validate`: the planner against published measurements.
Status ValidateCommand(const std::vector<std::string>& args, CliEnv& env);
/// `kimi-plan calibrate`: a GPU's calibration table (needs CUDA and LibTorch).
Status CalibrateCommand(const std::vector<std::string>& args, CliEnv& env);

/// The commands kimi-plan-runtime runs, the ones that link LibTorch; the
/// light `kimi-plan` hands them over when kimi-plan-runtime is beside it.
struct RuntimeCommandInfo {
  const char* name;
  const char* summary;
};
inline constexpr RuntimeCommandInfo kRuntimeCommands[] = {
    {"train", "train the model in this process (LibTorch): AdamW, LoRA, checkpoints"},
    {"run", "train over several processes (c10d Gloo/NCCL): data and expert parallelism"},
    {"sdpo", "run the SDPO loop: rollout, feedback, self-teacher, training, weight sync"},
    {"calibrate", "measure this GPU's matrix products and copy bandwidth into a calibration table"},
    {"profile", "measure what the runtime's layers keep for the backward: an activation profile for plan"},
    {"logits", "load a Hugging Face checkpoint and print the logits of given tokens (checks against transformers)"},
};

/// Defined only in kp_cli_runtime (a build with LibTorch).
Status TrainCommand(const std::vector<std::string>& args, CliEnv& env);
/// `kimi-plan run`: the distributed runtime (docs/runtime.md, "Distributed").
Status RunCommand(const std::vector<std::string>& args, CliEnv& env);
/// `kimi-plan sdpo`: the SDPO loop (docs/sdpo.md, "The loop").
Status SdpoCommand(const std::vector<std::string>& args, CliEnv& env);
/// `kimi-plan profile`: the runtime's activation profile (docs/planner.md).
Status ProfileCommand(const std::vector<std::string>& args, CliEnv& env);
/// `kimi-plan logits`: a Hugging Face checkpoint's logits through the runtime.
Status LogitsCommand(const std::vector<std::string>& args, CliEnv& env);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_COMMANDS_H_
