// The largest cluster, model and simulation kimi-plan accepts. Every integer
// and number read from a flag or a preset file is checked against one of
// these before it is used, so that no count overflows and no single flag asks
// for unbounded work; docs/limits.md states them for users.
#ifndef KIMI_PLAN_COMMON_LIMITS_H_
#define KIMI_PLAN_COMMON_LIMITS_H_

#include <cstdint>

namespace kp::limits {

// --- Clusters -------------------------------------------------------------
/// GPUs in one cluster: 2^20, about ten times the largest training clusters
/// built so far (~100k GPUs). Every parallel size is at most this, and
/// nodes x GPUs per node is checked against it in 64-bit arithmetic.
inline constexpr std::int64_t kMaxClusterGpus = 1'048'576;
/// Nodes: 2^17, the cluster limit over 8-GPU nodes.
inline constexpr std::int64_t kMaxNodes = 131'072;
/// GPUs sharing one NVLink domain: 72 is NVL72, the largest shipped; 576 is
/// NVIDIA's announced NVL576, so a hypothetical node still fits.
inline constexpr std::int64_t kMaxGpusPerNode = 576;

// --- Models ---------------------------------------------------------------
/// Decoder layers: 100,000 (the deepest published models have ~200).
inline constexpr std::int64_t kMaxLayers = 100'000;
/// Hidden size and every per-head or low-rank width: 2^20 (GPT-3 is 12,288).
inline constexpr std::int64_t kMaxHidden = 1'048'576;
/// FFN widths (dense, expert, shared): 4 x kMaxHidden.
inline constexpr std::int64_t kMaxFfn = 4 * kMaxHidden;
/// Attention heads (query or key/value): 2^16.
inline constexpr std::int64_t kMaxHeads = 65'536;
/// Vocabulary: 2^24 tokens (the largest published vocabularies are ~256k).
inline constexpr std::int64_t kMaxVocab = 16'777'216;
/// Routed or shared experts: 2^16 (DeepSeek-V3 and Kimi K2 have 256 and 384).
inline constexpr std::int64_t kMaxExperts = 65'536;

// --- Workloads ------------------------------------------------------------
/// Tokens in one prompt or one response: 2^24 (16M; today's longest
/// contexts are 1-10M).
inline constexpr std::int64_t kMaxSequence = 16'777'216;
/// Prompts per step, sequences per micro-batch and samples per prompt: 2^24.
inline constexpr std::int64_t kMaxBatch = 16'777'216;

// --- Physical rates in GPU files (decimal units, per GPU or per node) -----
/// Memory per GPU in GB: 1e6 (1 PB; a B300 has 288 GB).
inline constexpr double kMaxGpuMemoryGb = 1e6;
/// Peak tensor throughput in TFLOPS: 1e6 (a B300 is ~15,000 fp8 sparse).
inline constexpr double kMaxTflops = 1e6;
/// Any bandwidth in GB/s or Gbit/s: 1e7 (HBM and NVLink are ~10^4 GB/s).
inline constexpr double kMaxBandwidth = 1e7;

// --- Simulations: the work one command may ask for, checked before it starts
/// Actions one simulated pipeline step holds (pp x stages per rank x
/// micro-batches x 3 for F, B and W, before SEND/RECV are added). Measured
/// on one core: 2M actions take 15 s and 300 MB; 500,000 take about 4 s.
inline constexpr std::int64_t kMaxPipelineActions = 500'000;
/// Micro-batches of one pipeline step, and pipeline ranks.
inline constexpr std::int64_t kMaxMicrobatches = 1'000'000;
inline constexpr std::int64_t kMaxPipelineRanks = 16'384;
/// Cells of one attention-residual transport table: (stages + pp) x
/// (layers / block size + 2). Measured: 2M cells take 9 s and 330 MB (and
/// the result is recorded in the store); 1M take about 4 s.
inline constexpr std::int64_t kMaxAttnResCells = 1'000'000;
/// Rollout nodes of one simulated weight broadcast (`--receivers`), and the
/// work of one sync: buckets x receivers^2, as every bucket's hop shares
/// links with the others in flight. Measured on one core: 37 buckets to 256
/// receivers (2.4M) take 7 s; 3M is about 9 s.
inline constexpr std::int64_t kMaxSyncReceivers = 256;
inline constexpr std::int64_t kMaxSyncWork = 3'000'000;
/// Steps of one simulated SDPO loop: the loop reaches its steady state in a
/// few steps; 100,000 steps take 3 s but draw a 61 MB timeline (--out), so
/// 10,000 (6 MB).
inline constexpr std::int64_t kMaxLoopSteps = 10'000;

// The runtime (train, run, sdpo): optimizer steps a run may be asked for,
// and processes one host starts (ranks of `run --nproc`, `sdpo` rollout
// ranks).
inline constexpr std::int64_t kMaxTrainSteps = 100'000'000;
inline constexpr std::int64_t kMaxLocalRanks = 4'096;
// --- Input files: read whole through FileSystem::ReadFile, which refuses
// anything but a regular file and stops one byte past its bound, so a link
// to /dev/zero or a file still growing cannot take the machine's memory.
/// A preset-format file (model, GPU, topology, calibration, activation
/// profile), a validation case file, a schedule CSV, a bench configuration:
/// 16 MiB. The largest shipped (presets/calibration/h200.json) is ~40 kB.
inline constexpr std::uint64_t kMaxSpecFileBytes = 16ull << 20;
/// A metrics file `kimi-plan ingest` reads (Verl's file logger): about 10 kB
/// a step, so 4 GiB holds some 400,000 steps.
inline constexpr std::uint64_t kMaxMetricsFileBytes = 4ull << 30;
/// An SDPO task file (JSON Lines): 256 MiB.
inline constexpr std::uint64_t kMaxTaskFileBytes = 256ull << 20;
/// A training token file (`train --data`): 2 GiB, which the runtime holds
/// as 64-bit tokens (8 GiB for 2-byte tokens).
inline constexpr std::uint64_t kMaxTokenFileBytes = 2ull << 30;
/// A checkpoint `--resume` reads: 64 GiB.
inline constexpr std::uint64_t kMaxCheckpointFileBytes = 64ull << 30;
/// A kernel file under /proc (meminfo, status): 1 MiB.
inline constexpr std::uint64_t kMaxProcFileBytes = 1ull << 20;

/// The longest time a simulation's clock (integer nanoseconds, 292 years at
/// most) is asked to hold: 100 years. A simulation is refused before it
/// starts when the sum of all its work (a bound on its makespan) exceeds it.
inline constexpr double kMaxSimulatedSeconds = 100.0 * 365 * 24 * 3600;
/// Seconds or microseconds given as an explicit cost: one year.
inline constexpr double kMaxSeconds = 365.0 * 24 * 3600;
inline constexpr double kMaxMicroseconds = kMaxSeconds * 1e6;

}  // namespace kp::limits

#endif  // KIMI_PLAN_COMMON_LIMITS_H_
