// The environment variables LibTorch reads once, at a library's first use,
// that the runtime relies on. Libraries never set the environment: each
// `main` (the CLI's, the benchmarks', the runtime tests') applies these
// before any other work, keeping a value the user already set.
// No LibTorch here: the CLI's main includes it in every build.
#ifndef KIMI_PLAN_RUNTIME_COMM_ENVIRONMENT_H_
#define KIMI_PLAN_RUNTIME_COMM_ENVIRONMENT_H_

namespace kp::runtime {

struct EnvironmentDefault {
  const char* name;
  const char* value;
};

/// CUBLAS_WORKSPACE_CONFIG: deterministic cuBLAS needs a fixed workspace
/// (read at cuBLAS's first call). TORCH_NCCL_BLOCKING_WAIT: without it
/// NCCL's watchdog tears the process down on a timeout; with it, wait()
/// throws and the communicator turns the failure into one line.
inline constexpr EnvironmentDefault kEnvironmentDefaults[] = {
    {"CUBLAS_WORKSPACE_CONFIG", ":4096:8"},
    {"TORCH_NCCL_BLOCKING_WAIT", "1"},
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_COMM_ENVIRONMENT_H_
