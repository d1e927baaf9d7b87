// The environment variables LibTorch reads once, at a library's first use,
// that the runtime relies on. Libraries never set the environment: each
// `main` (the CLI's, the benchmarks', the runtime tests') applies
// kEnvironmentDefaults before any other work, and the CLI's commands set
// kDeterministicCublas through CliEnv::setenv for a deterministic run on
// CUDA, before it builds anything; a value the user already set is kept.
// No LibTorch here: the CLI's main includes it in every build.
#ifndef KIMI_PLAN_RUNTIME_COMM_ENVIRONMENT_H_
#define KIMI_PLAN_RUNTIME_COMM_ENVIRONMENT_H_

namespace kp::runtime {

struct EnvironmentDefault {
  const char* name;
  const char* value;
};

/// TORCH_NCCL_BLOCKING_WAIT: without it NCCL's watchdog tears the process
/// down on a timeout; with it, wait() throws and the communicator turns the
/// failure into one line.
inline constexpr EnvironmentDefault kEnvironmentDefaults[] = {
    {"TORCH_NCCL_BLOCKING_WAIT", "1"},
};

/// Deterministic cuBLAS needs a fixed workspace (read at cuBLAS's first
/// call). Only for deterministic runs: on an H200 under PyTorch 2.11 it
/// takes the kimi-1b training step from 1.14 s to 2.13 s
/// (docs/benchmarks.md, "Runtime training on GPU").
inline constexpr EnvironmentDefault kDeterministicCublas = {"CUBLAS_WORKSPACE_CONFIG", ":4096:8"};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_COMM_ENVIRONMENT_H_
