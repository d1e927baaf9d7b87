// Options shared by the runtime's commands (`train`, `run`): the model a
// runtime builds, a preset scaled by the shape flags. Built with LibTorch only.
#ifndef KIMI_PLAN_CLI_RUNTIME_OPTIONS_H_
#define KIMI_PLAN_CLI_RUNTIME_OPTIONS_H_

#include "cli/options.h"
#include "runtime/comm/rendezvous.h"
#include "runtime/train/trainer.h"
#include "specs/model_spec.h"

namespace kp {

/// --model, --model-file and the shape flags that scale it (--layers
/// --hidden --heads --experts --top-k --vocab --attn-res-block --dense-layers).
void AddScaledModelOptions(po::options_description& desc);

/// --model (default kimi-k3-debug) or --model-file, scaled by --layers
/// --hidden --heads --experts --top-k --vocab --attn-res-block
/// --dense-layers where given.
Result<ModelSpec> ResolveScaledModel(const po::variables_map& vm, const CliEnv& env);

/// The training flags `train`, `run` and `sdpo` share, declared once with
/// the defaults of `defaults` (each command's configuration: TrainConfig's
/// own for train and run, the loop's for sdpo), so a default lives in one
/// place: --steps (no default when `steps_required`), --lr, --warmup,
/// --min-lr-ratio, --grad-clip, --kda-chunk, --device, --seed, and
/// --log-every (default `log_every`, a progress line every so many steps).
void AddTrainOptions(po::options_description& desc, const runtime::TrainConfig& defaults, bool steps_required,
                     int log_every);
/// Reads the flags AddTrainOptions declared into `c`; InvalidArgument naming
/// --steps when it is required and missing.
Status ReadTrainOptions(const po::variables_map& vm, runtime::TrainConfig* c);

/// The c10d options of a multi-process run from --backend and --timeout-s,
/// on `device` (the run's --device), Gloo's interface from the
/// environment's GLOO_SOCKET_IFNAME.
runtime::C10dOptions C10dFromFlags(const po::variables_map& vm, const std::string& device, const CliEnv& env);

/// Refuses, before anything is allocated, a training whose model cannot fit
/// this machine's memory on CPU: the processes on this host together holding
/// `parameters` (every rank's share summed; the whole model for one process),
/// each and, without LoRA, its
/// gradient and AdamW's two moments in the same dtype (LibTorch keeps
/// optimizer state like its parameter). Activations are left out, so the
/// estimate is a lower bound and a refused model cannot fit. Compared with
/// MemAvailable of /proc/meminfo (read through env.fs); skipped on CUDA and
/// where that file cannot be read. InvalidArgument naming --model with both
/// numbers.
Status CheckTrainMemory(const runtime::TrainConfig& config, double parameters, const CliEnv& env);
/// CheckTrainMemory of one process holding the whole model.
Status CheckTrainMemory(const runtime::TrainConfig& config, const CliEnv& env);

/// Before anything touches the device: a deterministic run on CUDA has
/// cuBLAS's workspace fixed (kDeterministicCublas, through env.setenv); any
/// other run keeps cuBLAS's faster default. A CPU run counts its tensor
/// bytes from here on (InstallCpuMemoryCounter), so its steps' peak memory
/// is the bytes its tensors held, as on a GPU.
void PrepareDevice(const runtime::TrainConfig& config, const CliEnv& env);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_RUNTIME_OPTIONS_H_
