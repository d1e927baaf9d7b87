// kimi-plan-decode-bench: the SDPO rollout's decoding (runtime/sdpo/rollout.h)
// alone, for a model in the preset file format on one device: --prompts
// prompts of --prompt-len random ids, --samples rows each decoded together
// with the KV cache (one prefill per prompt), --new-tokens per row with no
// stop id, sampled at --temperature / --top-p and then greedily (temperature
// 0); each the median of --reps Generate calls after --warmup, the device
// synchronised around each. Prints generated tokens/s and the wall time of
// one decode step (a forward of every row and its sampling); docs/
// benchmarks.md has the H200's.
//
//   kimi-plan-decode-bench --shape bench/kimi-1b.json [--device cuda] [--dtype bf16] [--prompts 8]
//       [--samples 8] [--prompt-len 128] [--new-tokens 128] [--temperature 1] [--top-p 1]
//       [--reps 3] [--warmup 1] [--decode growing|fixed|graphs]
//
// --decode: how the steps run (rollout.h DecodeSteps; default the engine's:
// graphs on a GPU, growing elsewhere).
//
// Exit codes: 0 success, 2 bad arguments or a shape the runtime cannot run.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "bench/bench_options.h"
#include "bench/bench_util.h"
#include "runtime/comm/device.h"
#include "runtime/model/model.h"
#include "runtime/model/runtime_config.h"
#include "runtime/sdpo/rollout.h"
#include "specs/presets.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Timed {
  double seconds = 0;
  kp::runtime::GenerationStats stats;
};

kp::Result<Timed> TimeGenerate(kp::runtime::RolloutEngine& engine, const torch::Device& device,
                               const std::vector<std::vector<std::int64_t>>& prompts,
                               const kp::runtime::SamplingOptions& sampling, int warmup, int reps) {
  std::vector<double> t;
  Timed out;
  for (int i = 0; i < warmup + reps; ++i) {
    kp::bench::Synchronize(device);
    const auto start = Clock::now();
    KP_ASSIGN_OR_RETURN(const auto samples, engine.Generate(prompts, sampling, /*seed=*/1000 + i));
    kp::bench::Synchronize(device);
    if (i >= warmup) t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    out.stats = engine.last_stats();
  }
  out.seconds = kp::bench::Median(t);
  return out;
}

kp::Status Run(int argc, char** argv) {
  bool unused = false;
  KP_ASSIGN_OR_RETURN(auto kv, kp::bench::OptionPairs(argc, argv, "", &unused));
  auto get = [&](const char* name, const char* fallback) { return kv.count(name) ? kv[name] : std::string(fallback); };
  if (!kv.count("shape")) return kp::Status::InvalidArgument("--shape FILE is required");
  KP_ASSIGN_OR_RETURN(const torch::Device device, kp::runtime::ParseDevice(get("device", "cuda")));
  KP_ASSIGN_OR_RETURN(const int prompts_n, kp::bench::IntOption("prompts", get("prompts", "8"), 1, 4096));
  KP_ASSIGN_OR_RETURN(const int samples, kp::bench::IntOption("samples", get("samples", "8"), 1, 4096));
  KP_ASSIGN_OR_RETURN(const int prompt_len, kp::bench::IntOption("prompt-len", get("prompt-len", "128"), 1, 1 << 20));
  KP_ASSIGN_OR_RETURN(const int new_tokens, kp::bench::IntOption("new-tokens", get("new-tokens", "128"), 1, 1 << 20));
  KP_ASSIGN_OR_RETURN(const double temperature, kp::bench::NumberOption("temperature", get("temperature", "1"), 0, 100));
  KP_ASSIGN_OR_RETURN(const double top_p, kp::bench::NumberOption("top-p", get("top-p", "1"), 0, 1, /*min_open=*/true));
  KP_ASSIGN_OR_RETURN(const int reps, kp::bench::IntOption("reps", get("reps", "3"), 1, 1000));
  KP_ASSIGN_OR_RETURN(const int warmup, kp::bench::IntOption("warmup", get("warmup", "1"), 0, 1000));
  const std::string dtype = get("dtype", "bf16");
  if (dtype != "bf16" && dtype != "fp32") return kp::Status::InvalidArgument("--dtype: bf16 or fp32, got " + dtype);

  kp::RealFileSystem fs;
  const kp::PresetCatalog catalog(fs, kp::DefaultPresetDir());
  KP_ASSIGN_OR_RETURN(const kp::ModelSpec spec, catalog.ModelFile(kv["shape"]));
  KP_RETURN_IF_ERROR(kp::runtime::ValidateForRuntime(spec));
  kp::runtime::ModelOptions options;
  if (dtype == "bf16") options.dtype = options.weight_dtype = kp::runtime::DType::kBf16;
  KP_ASSIGN_OR_RETURN(std::shared_ptr<kp::runtime::StageModelImpl> model, kp::runtime::BuildModel(spec, options));
  model->to(device);
  kp::runtime::RolloutEngine engine(model);
  // --decode's words, one per way of running the steps.
  const std::map<std::string, kp::runtime::DecodeSteps> step_names = {{"growing", kp::runtime::DecodeSteps::kGrowing},
                                                                      {"fixed", kp::runtime::DecodeSteps::kFixed},
                                                                      {"graphs", kp::runtime::DecodeSteps::kGraphs}};
  if (kv.count("decode")) {
    const auto it = step_names.find(kv["decode"]);
    if (it == step_names.end())
      return kp::Status::InvalidArgument("--decode: growing, fixed or graphs, got " + kv["decode"]);
    KP_RETURN_IF_ERROR(engine.set_decode_steps(it->second));
  }
  const char* decode_name = "";
  for (const auto& [name, steps] : step_names)
    if (steps == engine.decode_steps()) decode_name = name.c_str();

  torch::manual_seed(7);
  const torch::Tensor ids = torch::randint(1, spec.vocab, {prompts_n, prompt_len}, torch::kLong);
  std::vector<std::vector<std::int64_t>> prompts;
  for (int p = 0; p < prompts_n; ++p)
    prompts.emplace_back(ids[p].data_ptr<std::int64_t>(), ids[p].data_ptr<std::int64_t>() + prompt_len);
  kp::runtime::SamplingOptions sampling;
  sampling.samples = samples;
  sampling.max_new_tokens = new_tokens;
  sampling.stop_ids.clear();
  sampling.temperature = temperature;
  sampling.top_p = top_p;

  std::printf("model %s: %d layers, hidden %d, vocab %d; %d prompts x %d samples = %d rows, prompt %d, %d new tokens, "
              "%s on %s, decode steps %s\n",
              spec.name.c_str(), spec.layers, spec.hidden, spec.vocab, prompts_n, samples, prompts_n * samples,
              prompt_len, new_tokens, dtype.c_str(), device.str().c_str(), decode_name);
  std::printf("%-22s %10s %12s %12s %14s\n", "sampling", "seconds", "tokens", "tokens/s", "ms per step");
  for (const bool greedy : {false, true}) {
    kp::runtime::SamplingOptions s = sampling;
    if (greedy) s.temperature = 0;
    KP_ASSIGN_OR_RETURN(const Timed t, TimeGenerate(engine, device, prompts, s, warmup, reps));
    const double tokens = static_cast<double>(t.stats.generated_tokens);
    char label[64];
    std::snprintf(label, sizeof label, greedy ? "greedy" : "T %.2g top-p %.2g", temperature, top_p);
    std::printf("%-22s %10.4f %12.0f %12.1f %14.3f\n", label, t.seconds, tokens, tokens / t.seconds,
                1e3 * t.seconds / new_tokens);
    std::printf("RESULT sampling=%s decode=%s tokens_per_s=%.1f step_ms=%.4f rows=%d forward_calls=%lld "
                "host_reads=%lld graph_captures=%lld graph_replays=%lld\n",
                greedy ? "greedy" : "sampled", decode_name, tokens / t.seconds, 1e3 * t.seconds / new_tokens,
                prompts_n * samples, static_cast<long long>(t.stats.forward_calls),
                static_cast<long long>(t.stats.host_reads), static_cast<long long>(t.stats.graph_captures),
                static_cast<long long>(t.stats.graph_replays));
    if (!t.stats.graph_error.empty()) std::printf("graphs not used: %s\n", t.stats.graph_error.c_str());
  }
  return kp::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  const kp::Status s = Run(argc, argv);
  if (s.ok()) return 0;
  std::cerr << "kimi-plan-decode-bench: " << s.message() << "\n";
  return 2;
}
