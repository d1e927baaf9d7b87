// kimi-plan-train-bench: times the runtime's training step (TrainSession::Step:
// forward, backward, gradient clipping, AdamW, router-bias update) of a model
// in the preset file format on one device, and reports tokens/s and MFU against
// a bf16 matmul peak measured in the same process. bench/eager_reference.py is
// the same model in PyTorch eager Python; docs/benchmarks.md has the commands
// and the numbers.
//
//   kimi-plan-train-bench --shape bench/kimi-1b.json [--batch 16] [--seq-len 1024]
//       [--warmup 3] [--steps 10] [--device cuda] [--dtype bf16] [--kda-chunk 16]
//       [--peak-tflops X] [--fused 0|1] [--profile STEPS] [--memory-trace 1|2] [--dry-run]
//       [--recompute none|full|block:N|uniform:N|MODULE[,MODULE...]] [--states fp32|mixed]
//       [--fp8 none|experts] [--kda-math tensor-cores|fp32]
//       [--dump-dir DIR] [--profile-out FILE (with --memory-trace 1)]
//
// --fused 0 keeps the torch forms where CUDA kernels apply (KDA's intra-chunk
// products and decode, the grouped expert GEMM): the A/B switch. --profile N
// runs N more steps under LibTorch's Kineto profiler and prints the top GPU
// kernels and each kernel family's share of the kernel time. --kda-math fp32
// runs KDA's chunk scan on CUDA cores, its reference form, instead of TF32
// tensor cores.
//
// --dry-run builds the model on the CPU and prints its shape, parameter counts
// and FLOPs per token only. --dump-dir writes the fp32 initial weights, a fixed
// batch of tokens and its forward loss (fp32, CPU) for
// `eager_reference.py --check-dir DIR`, which loads the same weights into the
// Python model and compares the loss.
//
// Output: human-readable lines, then one `RESULT key=value ...` line.
// Exit codes: 0 on success, 2 on bad arguments or a shape the runtime cannot
// build, 1 when a step fails.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <limits>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "bench/bench_util.h"
#include "bench/kernel_profile.h"
#include "common/file_system.h"
#include "common/status.h"
#include "planner/step_time.h"
#include "runtime/train/activation_profile_measure.h"
#include "runtime/comm/device.h"
#include "runtime/kernels/kernels.h"
#include "runtime/model/model.h"
#include "runtime/model/runtime_config.h"
#include "runtime/train/train_session.h"
#include "specs/param_count.h"
#include "specs/presets.h"

namespace {

using kp::bench::Median;
using kp::bench::Synchronize;

using kp::Result;
using kp::Status;

struct Args {
  std::string shape;
  int batch = 16, seq_len = 1024, warmup = 3, steps = 10, kda_chunk = 16, fused = 1, profile = 0;
  std::string device = "cuda", dtype = "bf16", dump_dir;
  std::string profile_out;  // with --memory-trace: the activation profile `kimi-plan plan` reads
  double peak_tflops = 0;  // 0: measure
  bool dry_run = false;
  int memory_trace = 0;  // 1: after the timed steps; 2: alone, no training (a model too large to train here)
  // none | full | block:N | uniform:N (kimi-plan run's --recompute full
  // [--recompute-method block|uniform --recompute-num-layers N]) | MODULES
  // (--recompute selective --recompute-modules MODULES): ApplyRecompute
  std::string recompute = "none";
  std::string states = "fp32";     // fp32 | mixed (kimi-plan run's --state-precision)
  std::string fp8 = "none";        // none | experts (kimi-plan run's --fp8)
  std::string kda_math = "tensor-cores";  // tensor-cores | fp32 (ModelOptions::kda_tensor_cores)
};

// Sets `o`'s recomputation from --recompute's value (Args::recompute).
Status ApplyRecompute(const std::string& s, kp::runtime::ModelOptions* o) {
  const Status bad = Status::InvalidArgument(
      "--recompute: must be none, full, block:N or uniform:N (N > 0), or modules of moe, mlp, shared_experts, "
      "layernorm, moe_act, mla_up_proj joined by commas; got \"" + s + "\"");
  if (s == "none") return Status::Ok();
  if (s == "full") {
    o->activation_checkpointing = true;
    return Status::Ok();
  }
  for (const std::string method : {"block:", "uniform:"}) {
    if (s.rfind(method, 0) != 0) continue;
    const std::string n = s.substr(method.size());
    const Result<std::int64_t> layers = kp::ParseIntInRange("--recompute", n, 1, 9999);
    if (!layers.ok()) return bad;
    o->activation_checkpointing = true;
    (method == "block:" ? o->checkpoint_first_layers : o->checkpoint_group_layers) = static_cast<int>(*layers);
    return Status::Ok();
  }
  const std::pair<const char*, bool kp::runtime::ModelOptions::*> modules[] = {
      {"moe", &kp::runtime::ModelOptions::recompute_moe},
      {"mlp", &kp::runtime::ModelOptions::recompute_mlp},
      {"shared_experts", &kp::runtime::ModelOptions::recompute_shared_experts},
      {"layernorm", &kp::runtime::ModelOptions::recompute_layernorm},
      {"moe_act", &kp::runtime::ModelOptions::recompute_moe_act},
      {"mla_up_proj", &kp::runtime::ModelOptions::recompute_mla_up_proj}};
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t end = std::min(s.find(',', start), s.size());
    const std::string name = s.substr(start, end - start);
    auto it = std::find_if(std::begin(modules), std::end(modules), [&](const auto& m) { return name == m.first; });
    if (it == std::end(modules)) return bad;
    o->*(it->second) = true;
    start = end + 1;
  }
  return Status::Ok();
}

Result<Args> ParseArgs(int argc, char** argv) {
  Args a;
  KP_ASSIGN_OR_RETURN(const auto kv, kp::bench::OptionPairs(argc, argv, "dry-run", &a.dry_run));
  // Each integer option and its range.
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  const std::map<std::string, std::tuple<int*, int, int>> ints = {
      {"batch", {&a.batch, 1, kMaxInt}},         {"seq-len", {&a.seq_len, 1, kMaxInt}},
      {"warmup", {&a.warmup, 0, kMaxInt}},       {"steps", {&a.steps, 1, kMaxInt}},
      {"kda-chunk", {&a.kda_chunk, 1, kMaxInt}}, {"fused", {&a.fused, 0, 1}},
      {"profile", {&a.profile, 0, kMaxInt}},     {"memory-trace", {&a.memory_trace, 0, 2}}};
  const std::map<std::string, std::string*> strings = {
      {"shape", &a.shape},          {"device", &a.device},       {"dtype", &a.dtype}, {"dump-dir", &a.dump_dir},
      {"profile-out", &a.profile_out}, {"recompute", &a.recompute}, {"states", &a.states}, {"fp8", &a.fp8},
      {"kda-math", &a.kda_math}};
  for (const auto& [k, v] : kv) {
    if (auto it = ints.find(k); it != ints.end()) {
      const auto [field, min, max] = it->second;
      KP_ASSIGN_OR_RETURN(*field, kp::bench::IntOption(k, v, min, max));
    } else if (auto s = strings.find(k); s != strings.end()) {
      *s->second = v;
    } else if (k == "peak-tflops") {
      KP_ASSIGN_OR_RETURN(a.peak_tflops, kp::bench::NumberOption(k, v, 0, 1e6));
    } else {
      return Status::InvalidArgument("unknown option --" + k);
    }
  }
  if (a.shape.empty()) return Status::InvalidArgument("--shape FILE is required");
  kp::runtime::ModelOptions checked;
  KP_RETURN_IF_ERROR(ApplyRecompute(a.recompute, &checked));
  if (a.states != "fp32" && a.states != "mixed") return Status::InvalidArgument("--states: must be fp32 or mixed");
  if (a.fp8 != "none" && a.fp8 != "experts") return Status::InvalidArgument("--fp8: must be none or experts");
  if (a.kda_math != "tensor-cores" && a.kda_math != "fp32")
    return Status::InvalidArgument("--kda-math: must be tensor-cores or fp32");
  return a;
}

// TFLOP/s of an 8192^3 bf16 matmul on random data: 3 warm-ups, then the median
// of 5 timings of 10 back-to-back products each.
double MeasureMatmulPeak(const torch::Device& d) {
  const std::int64_t n = 8192;
  const auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(d);
  const torch::Tensor a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts);
  torch::Tensor c;
  for (int i = 0; i < 3; ++i) c = torch::matmul(a, b);
  Synchronize(d);
  std::vector<double> tflops;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) c = torch::matmul(a, b);
    Synchronize(d);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tflops.push_back(10 * 2.0 * n * n * n / s / 1e12);
  }
  return Median(tflops);
}

// Raw little-endian fp32 per parameter plus a manifest "name dims..." per line.
Status DumpForCheck(const kp::FileSystem& fs, const kp::ModelSpec& spec, const kp::runtime::ModelOptions& options,
                    const std::string& dir) {
  KP_RETURN_IF_ERROR(fs.CreateDirectories(dir));
  KP_ASSIGN_OR_RETURN(auto model, kp::runtime::BuildModel(spec, options));
  std::ofstream manifest(dir + "/manifest.txt");
  for (const auto& p : model->named_parameters()) {
    const torch::Tensor t = p.value().detach().to(torch::kFloat).contiguous();
    manifest << p.key();
    for (auto s : t.sizes()) manifest << ' ' << s;
    manifest << '\n';
    std::ofstream out(dir + "/" + p.key() + ".bin", std::ios::binary);
    out.write(static_cast<const char*>(t.data_ptr()), t.numel() * sizeof(float));
  }
  const std::int64_t b = 2, t = 40;
  const torch::Tensor tokens =
      torch::randint(spec.vocab, {b, t + 1}, torch::TensorOptions().dtype(torch::kLong));
  {
    std::ofstream out(dir + "/tokens.bin", std::ios::binary);
    out.write(static_cast<const char*>(tokens.data_ptr()), tokens.numel() * sizeof(std::int64_t));
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor loss = kp::runtime::LanguageModelLoss(model->forward(tokens.narrow(1, 0, t)),
                                                            tokens.narrow(1, 1, t));
  std::ofstream(dir + "/loss.txt") << std::setprecision(10) << loss.item<double>() << ' ' << b << ' ' << t << '\n';
  std::cout << "dumped " << model->named_parameters().size() << " parameter tensors and loss " << loss.item<double>()
            << " to " << dir << "\n";
  return Status::Ok();
}

// `steps` more steps under the profiler: the top kernels, then the share of
// the kernel time of each family.
int PrintProfile(kp::runtime::TrainSession& session, const torch::Device& device, int steps) {
  Status failed = Status::Ok();
  Result<std::vector<kp::bench::KernelTime>> kernels = kp::bench::ProfileKernels([&] {
    for (int i = 0; i < steps && failed.ok(); ++i)
      if (Result<kp::runtime::SessionStepMetrics> m = session.Step(); !m.ok()) failed = m.status();
    Synchronize(device);
  });
  if (!kernels.ok() || !failed.ok()) {
    std::cerr << (kernels.ok() ? failed : kernels.status()).message() << "\n";
    return kernels.ok() ? 1 : 2;
  }
  kp::bench::PrintKernelProfile(*kernels, steps);
  return 0;
}

// One forward and backward of a fresh model (fp32 weights, their gradients,
// no optimizer state) piece by piece on `device`: the bytes each piece
// leaves allocated are what it keeps for the backward (the tensors it
// returns are a small part: one residual stream). The measurement is
// `kimi-plan profile`'s (activation_profile_measure.h).
int PrintMemoryTrace(const kp::ModelSpec& spec, const kp::runtime::ModelOptions& options, const Args& args,
                     const torch::Device& device) {
  Result<kp::runtime::ActivationTrace> t =
      kp::runtime::MeasureActivationProfile(spec, options, args.batch, args.seq_len, device.str());
  if (!t.ok()) {
    std::cerr << t.status().message() << "\n";
    return 2;
  }
  const kp::ActivationProfile& p = t->profile;
  if (!args.profile_out.empty()) std::ofstream(args.profile_out) << kp::ActivationProfileToJson(p);
  const double tokens = p.tokens;
  std::printf("memory trace (GB allocated; fp32 weights and gradients, no optimizer state): weights %.2f, gradients %.2f\n",
              t->weights_bytes / 1e9, t->gradients_bytes / 1e9);
  std::printf("  %-22s +%.3f\n", "embedding", p.embedding * tokens / 1e9);
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const std::string what =
        std::string(kp::AttentionKindName(spec.attention[l])) + (spec.is_moe_layer(static_cast<int>(l)) ? " + moe" : " + ffn");
    std::printf("  layer %-2zu %-13s +%.3f (fixed %.3f)\n", l, what.c_str(),
                (p.layers_fixed[l] + p.layers[l] * tokens) / 1e9, p.layers_fixed[l] / 1e9);
  }
  std::printf("  %-22s +%.3f (fixed %.3f)\n", "head and loss", (p.head_fixed + p.head * tokens) / 1e9,
              p.head_fixed / 1e9);
  std::printf("  forward end %.2f, peak %.2f (backward +%.2f over the forward's end), activations %.2f\n",
              t->forward_end_bytes / 1e9, t->peak_bytes / 1e9, p.backward * tokens / 1e9,
              (t->forward_end_bytes - t->weights_bytes - t->gradients_bytes) / 1e9);
  return 0;
}

int Run(const Args& args) {
  kp::RealFileSystem fs;
  kp::PresetCatalog catalog(fs, kp::DefaultPresetDir());
  Result<kp::ModelSpec> spec_r = catalog.ModelFile(args.shape);
  if (!spec_r.ok()) {
    std::cerr << spec_r.status().message() << "\n";
    return 2;
  }
  const kp::ModelSpec spec = *spec_r;
  if (Status s = kp::runtime::ValidateForRuntime(spec); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  const kp::ParamCount pc = kp::CountParams(spec);
  const double flops_per_token = kp::ModelTrainFlopsPerToken(spec, pc, args.seq_len);
  std::printf("model %s: %d layers (%d KDA, %d MLA), hidden %d, heads %d, vocab %d, %d experts top-%d "
              "(expert ffn %d, latent %d), %d shared (ffn %d), dense ffn %d, attn-res block %d\n",
              spec.name.c_str(), spec.layers, spec.count(kp::AttentionKind::kKda),
              spec.count(kp::AttentionKind::kMla), spec.hidden, spec.heads, spec.vocab, spec.moe.num_experts,
              spec.moe.top_k, spec.moe.expert_ffn, spec.moe.latent_dim, spec.moe.shared_experts,
              spec.moe.shared_ffn, spec.dense_ffn, spec.attn_res_block);
  std::printf("planner count (specs/param_count.h): %.4fB total, %.4fB active per token\n", pc.total / 1e9,
              pc.active / 1e9);
  std::printf("model FLOPs per token (ModelTrainFlopsPerToken, seq %d): %.4e\n", args.seq_len, flops_per_token);

  kp::runtime::ModelOptions options;
  options.kda_chunk = args.kda_chunk;
  options.fused_kernels = args.fused == 1;
  options.kda_tensor_cores = args.kda_math == "tensor-cores";
  if (Status s = ApplyRecompute(args.recompute, &options); !s.ok()) {  // checked by ParseArgs
    std::cerr << s.message() << "\n";
    return 2;
  }
  // Megatron's mixed precision: bf16 weights, fp32 main gradients and masters.
  if (args.states == "mixed") options.weight_dtype = kp::runtime::DType::kBf16;
  options.fp8_experts = args.fp8 == "experts";
  if (!args.dump_dir.empty()) {
    if (Status s = DumpForCheck(fs, spec, options, args.dump_dir); !s.ok()) {
      std::cerr << s.message() << "\n";
      return 1;
    }
    return 0;
  }
  if (args.dry_run) {
    Result<std::shared_ptr<kp::runtime::StageModelImpl>> model = kp::runtime::BuildModel(spec, options);
    if (!model.ok()) {
      std::cerr << model.status().message() << "\n";
      return 2;
    }
    std::printf("runtime parameters: %lld\n",
                static_cast<long long>(kp::runtime::CountElements((*model)->parameters())));
    return 0;
  }

  kp::runtime::TrainConfig config;
  config.model = spec;
  config.options = options;
  Result<kp::runtime::DType> dtype = kp::runtime::ParseDType(args.dtype);
  if (!dtype.ok()) {
    std::cerr << dtype.status().message() << "\n";
    return 2;
  }
  config.options.dtype = *dtype;
  config.batch = args.batch;
  config.seq_len = args.seq_len;
  config.steps = args.warmup + args.steps;
  config.lr = 3e-4;
  config.warmup = 2;
  config.deterministic = false;  // the Python reference runs with PyTorch's defaults too
  config.device = args.device;
  const torch::Device device(args.device);
  if (args.memory_trace == 2) return PrintMemoryTrace(spec, config.options, args, device);

  double peak = args.peak_tflops;
  if (peak <= 0 && device.is_cuda()) peak = MeasureMatmulPeak(device);
  if (peak > 0) std::printf("bf16 matmul peak (8192^3, random data, measured): %.1f TFLOP/s\n", peak);

  Result<std::unique_ptr<kp::runtime::TrainSession>> session = kp::runtime::TrainSession::Create(config, fs);
  if (!session.ok()) {
    std::cerr << session.status().message() << "\n";
    return 2;
  }
  std::printf("runtime parameters: %lld (all trainable, %s states), dtype %s, %d x %d tokens per step, "
              "KDA chunk %d (%s), fused kernels %s (built: %s)\n",
              static_cast<long long>((*session)->parameter_count()), args.states.c_str(), args.dtype.c_str(), args.batch,
              args.seq_len,
              args.kda_chunk, args.kda_math.c_str(), args.fused ? "on" : "off",
              kp::runtime::CudaKernelsBuilt() ? "yes" : "no");
  std::vector<double> seconds;
  double last_loss = 0, peak_mem = 0;
  for (int i = 0; i < args.warmup + args.steps; ++i) {
    Synchronize(device);
    const auto t0 = std::chrono::steady_clock::now();
    Result<kp::runtime::SessionStepMetrics> m = (*session)->Step();
    Synchronize(device);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!m.ok()) {
      std::cerr << m.status().message() << "\n";
      return 1;
    }
    std::printf("step %2d%s  loss %.4f  %.1f ms\n", i + 1, i < args.warmup ? " (warm-up)" : "", m->step.loss, s * 1e3);
    if (i >= args.warmup) seconds.push_back(s);
    last_loss = m->step.loss;
    peak_mem = m->step.peak_memory_bytes;
  }
  const double median = Median(seconds);
  const double tokens_per_s = double(args.batch) * args.seq_len / median;
  const double mfu = peak > 0 ? flops_per_token * tokens_per_s / (peak * 1e12) : 0;
  std::printf("C++ runtime: median step %.2f ms (min %.2f, max %.2f over %d steps), %.0f tokens/s, "
              "%.1f TFLOP/s model FLOPs, MFU %.1f%% of the measured peak, peak memory %.1f GB\n",
              median * 1e3, *std::min_element(seconds.begin(), seconds.end()) * 1e3,
              *std::max_element(seconds.begin(), seconds.end()) * 1e3, args.steps, tokens_per_s,
              flops_per_token * tokens_per_s / 1e12, mfu * 100, peak_mem / 1e9);
  std::printf("RESULT impl=cpp median_step_ms=%.3f tokens_per_s=%.1f mfu=%.4f flops_per_token=%.6e "
              "peak_tflops=%.2f params=%lld last_loss=%.4f peak_gb=%.2f fused=%d fp8=%s\n",
              median * 1e3, tokens_per_s, mfu, flops_per_token, peak,
              static_cast<long long>((*session)->parameter_count()), last_loss, peak_mem / 1e9, args.fused,
              args.fp8.c_str());
  if (args.profile > 0)
    if (const int rc = PrintProfile(**session, device, args.profile); rc != 0) return rc;
  if (!args.memory_trace) return 0;
  session.value().reset();  // its weights and optimizer state
  return PrintMemoryTrace(spec, config.options, args, device);
}

}  // namespace

int main(int argc, char** argv) { return kp::bench::BenchMain<Args>(ParseArgs(argc, argv), "", Run); }
