// kimi-plan-sync-bench: times the runtime's weight sync (runtime/weight_sync.h)
// between N ranks started torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT; runtime/rendezvous.h), rank 0 the trainer. In one run:
//   1. raw: one c10d broadcast of a contiguous --raw-mib buffer, the peak;
//   2. synthetic: SendWeights / ReceiveWeights of a bf16 parameter list shaped
//      like a dense transformer (--synth-hidden, layers up to --synth-gb) for
//      each bucket size of --bucket-mib;
//   3. model: full and LoRA (rank --lora-rank) sync of the runtime model of
//      --shape (a preset JSON, scaled by --layers --hidden --heads --experts
//      --top-k --vocab), unless --shape is "".
// Each time is the slowest rank's (the sync's end on every rank), the median
// of --repeats after --warmup. Every section checks that the receivers hold
// the root's bytes (a float64 checksum). scripts/gpu_sync_bench.sh runs it on
// two GPUs; docs/weight-sync.md explains the protocol.
//
//   kimi-plan-sync-bench [--device cuda] [--backend auto|gloo|nccl] [--raw-mib 1024]
//       [--synth-gb 6] [--synth-hidden 4096] [--bucket-mib 4,16,64,256,1024]
//       [--shape bench/kimi-1b.json] [--lora-rank 16] [--model-bucket-mib 256]
//       [--warmup 2] [--repeats 5] [--timeout-s 600] [--json] [--json-file PATH]
//
// Output (rank 0): one table, or with --json one JSON object (schema
// kimi-plan.sync-bench/1) instead; --json-file writes that object to PATH too. Exit codes: 0 success, 2 bad arguments or model,
// 1 a failed sync or check.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bench/bench_util.h"
#include "common/file_system.h"
#include "common/status.h"
#include "common/table.h"
#include "runtime/comm/c10d_communicator.h"
#include "runtime/model/model.h"
#include "runtime/comm/rendezvous.h"
#include "runtime/model/runtime_config.h"
#include "runtime/sdpo/weight_sync.h"
#include "specs/presets.h"

namespace {

using kp::bench::Median;
using kp::bench::Synchronize;

using kp::Result;
using kp::Status;
using kp::runtime::Communicator;
using kp::runtime::NamedTensor;

struct Args {
  std::string device = "cuda", backend = "auto", shape = "bench/kimi-1b.json", json_file;
  double raw_mib = 1024, synth_gb = 6;
  std::int64_t synth_hidden = 4096;
  std::vector<double> bucket_mib = {4, 16, 64, 256, 1024};
  double model_bucket_mib = 256;
  int lora_rank = 16, warmup = 2, repeats = 5, timeout_s = 600;
  kp::runtime::ScaleFlags scale;
  bool json = false;
};

// A comma-separated list of positive sizes.
Result<std::vector<double>> ParseList(const std::string& name, const std::string& v) {
  std::vector<double> out;
  std::stringstream in(v);
  for (std::string item; std::getline(in, item, ',');) {
    KP_ASSIGN_OR_RETURN(const double size, kp::bench::NumberOption(name, item, 0, 1e12, /*min_open=*/true));
    out.push_back(size);
  }
  if (out.empty()) return Status::InvalidArgument("--" + name + ": give at least one size");
  return out;
}

Status SetOption(Args& a, const std::string& k, const std::string& v) {
  using kp::bench::IntOption;
  using kp::bench::NumberOption;
  static const std::map<std::string, std::optional<int> kp::runtime::ScaleFlags::*> kScale = {
      {"layers", &kp::runtime::ScaleFlags::layers}, {"hidden", &kp::runtime::ScaleFlags::hidden},
      {"heads", &kp::runtime::ScaleFlags::heads},   {"experts", &kp::runtime::ScaleFlags::experts},
      {"top-k", &kp::runtime::ScaleFlags::top_k},   {"vocab", &kp::runtime::ScaleFlags::vocab}};
  // Each integer option and its least value.
  const std::map<std::string, std::pair<int*, int>> ints = {{"lora-rank", {&a.lora_rank, 0}},
                                                            {"warmup", {&a.warmup, 0}},
                                                            {"repeats", {&a.repeats, 1}},
                                                            {"timeout-s", {&a.timeout_s, 1}}};
  const std::map<std::string, double*> sizes = {{"raw-mib", &a.raw_mib}, {"model-bucket-mib", &a.model_bucket_mib}};
  if (auto it = kScale.find(k); it != kScale.end()) {
    KP_ASSIGN_OR_RETURN(a.scale.*(it->second), IntOption(k, v, 1));
  } else if (auto i = ints.find(k); i != ints.end()) {
    KP_ASSIGN_OR_RETURN(*i->second.first, IntOption(k, v, i->second.second));
  } else if (auto s = sizes.find(k); s != sizes.end()) {
    KP_ASSIGN_OR_RETURN(*s->second, NumberOption(k, v, 0, 1e12, /*min_open=*/true));
  } else if (k == "synth-gb") {
    KP_ASSIGN_OR_RETURN(a.synth_gb, NumberOption(k, v, 0, 1e6));
  } else if (k == "synth-hidden") {
    KP_ASSIGN_OR_RETURN(a.synth_hidden, IntOption<std::int64_t>(k, v, 4));
  } else if (k == "bucket-mib") {
    KP_ASSIGN_OR_RETURN(a.bucket_mib, ParseList(k, v));
  } else if (k == "device") {
    a.device = v;
  } else if (k == "backend") {
    a.backend = v;
  } else if (k == "shape") {
    a.shape = v;
  } else if (k == "json-file") {
    a.json_file = v;
  } else {
    return Status::InvalidArgument("unknown option --" + k);
  }
  return Status::Ok();
}

Result<Args> ParseArgs(int argc, char** argv) {
  Args a;
  KP_ASSIGN_OR_RETURN(const auto kv, kp::bench::OptionPairs(argc, argv, "json", &a.json));
  for (const auto& [k, v] : kv) KP_RETURN_IF_ERROR(SetOption(a, k, v));
  return a;
}

std::int64_t Mib(double mib) { return static_cast<std::int64_t>(mib * (1 << 20)); }

// The slowest rank's value: each rank writes its own slot, the sum gathers them.
Result<double> MaxOverRanks(Communicator& c, double v, const torch::Device& device) {
  torch::Tensor all = torch::zeros({c.size()}, torch::TensorOptions().dtype(torch::kDouble).device(device));
  all[c.rank()] = v;
  KP_RETURN_IF_ERROR(c.AllReduceSum(all));
  return all.max().item<double>();
}

// One measured row of the table.
struct Row {
  std::string what;
  std::int64_t bytes = 0;
  int buckets = 0;
  double seconds = 0;
  double gbytes_per_s() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

// A dense transformer's bf16 weights, layer by layer until `bytes`: an
// embedding [32 H, H], then per layer q, o [H, H], k, v [H / 4, H], gate, up
// [3.5 H, H], down [H, 3.5 H] and two norms [H].
std::vector<NamedTensor> SyntheticModel(double bytes, std::int64_t h, const torch::Device& device) {
  const auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(device);
  const std::int64_t f = h * 7 / 2, kv = h / 4;
  std::vector<NamedTensor> out = {{"embed", torch::empty({32 * h, h}, opts)}};
  double total = 32.0 * h * h * 2;
  for (int l = 0; total < bytes; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (auto [name, rows, cols] : std::vector<std::tuple<const char*, std::int64_t, std::int64_t>>{
             {"q", h, h}, {"k", kv, h}, {"v", kv, h}, {"o", h, h}, {"gate", f, h}, {"up", f, h}, {"down", h, f}}) {
      out.push_back({p + name, torch::empty({rows, cols}, opts)});
      total += 2.0 * rows * cols;
    }
    out.push_back({p + "attn_norm", torch::ones({h}, opts)});
    out.push_back({p + "ffn_norm", torch::ones({h}, opts)});
  }
  return out;
}

// The sum of every element in float64: equal on every rank when the bytes are.
double Checksum(const std::vector<NamedTensor>& ts) {
  double sum = 0;
  for (const NamedTensor& t : ts) sum += t.tensor.to(torch::kDouble).sum().item<double>();
  return sum;
}

Status CheckSameAsRoot(Communicator& c, const std::vector<NamedTensor>& ts, const torch::Device& device,
                       const std::string& what) {
  const double mine = Checksum(ts);
  torch::Tensor root = torch::full({1}, mine, torch::TensorOptions().dtype(torch::kDouble).device(device));
  KP_RETURN_IF_ERROR(c.Broadcast(root, 0));
  if (root.item<double>() != mine)
    return Status::Internal(what + ": rank " + std::to_string(c.rank()) + " checksum " + std::to_string(mine) +
                            " differs from the root's " + std::to_string(root.item<double>()));
  return Status::Ok();
}

// Runs `once` warmup + repeats times between barriers; the row's seconds are
// the median of the slowest rank's times.
template <typename Once>
Result<Row> Measure(Communicator& c, const Args& a, const torch::Device& device, Row row, Once once) {
  std::vector<double> times;
  for (int i = 0; i < a.warmup + a.repeats; ++i) {
    KP_RETURN_IF_ERROR(c.Barrier());
    Synchronize(device);
    const auto t0 = std::chrono::steady_clock::now();
    KP_RETURN_IF_ERROR(once());
    Synchronize(device);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    KP_ASSIGN_OR_RETURN(double slowest, MaxOverRanks(c, s, device));
    if (i >= a.warmup) times.push_back(slowest);
  }
  row.seconds = Median(times);
  return row;
}

Result<Row> RawBroadcast(Communicator& c, const Args& a, const torch::Device& device) {
  torch::Tensor buf = torch::empty({Mib(a.raw_mib)}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
  if (c.rank() == 0) buf.fill_(7);
  Row row{"raw broadcast " + kp::FormatFixed(a.raw_mib, 0) + " MiB", buf.numel(), 1};
  return Measure(c, a, device, row, [&] { return c.Broadcast(buf, 0); });
}

// SendWeights on rank 0, ReceiveWeights elsewhere, version counting up.
Result<Row> SyncRows(Communicator& c, const Args& a, const torch::Device& device, const std::vector<NamedTensor>& ts,
                     const kp::runtime::WeightSyncOptions& o, const std::string& what) {
  static std::int64_t version = 0;
  Row row{what};
  auto once = [&]() -> Status {
    ++version;
    Result<kp::runtime::SyncStats> s = c.rank() == 0 ? kp::runtime::SendWeights(c, ts, version, o)
                                                     : kp::runtime::ReceiveWeights(c, ts, version, o);
    KP_RETURN_IF_ERROR(s.status());
    row.bytes = s->bytes;
    row.buckets = s->buckets;
    return Status::Ok();
  };
  KP_ASSIGN_OR_RETURN(Row measured, Measure(c, a, device, row, once));
  measured.bytes = row.bytes;
  measured.buckets = row.buckets;
  KP_RETURN_IF_ERROR(CheckSameAsRoot(c, ts, device, what));
  return measured;
}

Status SyntheticRows(Communicator& c, const Args& a, const torch::Device& device, std::vector<Row>& rows) {
  if (a.synth_gb <= 0) return Status::Ok();
  std::vector<NamedTensor> ts = SyntheticModel(a.synth_gb * 1e9, a.synth_hidden, device);
  for (NamedTensor& t : ts)
    if (c.rank() == 0) t.tensor.normal_(0, 0.02);
    else t.tensor.zero_();
  for (double mib : a.bucket_mib) {
    kp::runtime::WeightSyncOptions o;
    o.bucket_bytes = Mib(mib);
    KP_ASSIGN_OR_RETURN(Row r, SyncRows(c, a, device, ts, o,
                                        "synthetic " + std::to_string(ts.size()) + " tensors, bucket " +
                                            kp::FormatFixed(mib, 0) + " MiB"));
    rows.push_back(r);
  }
  return Status::Ok();
}

Result<std::shared_ptr<kp::runtime::StageModelImpl>> LoadModel(const Args& a) {
  kp::RealFileSystem fs;
  kp::PresetCatalog catalog(fs, kp::DefaultPresetDir());
  KP_ASSIGN_OR_RETURN(kp::ModelSpec preset, catalog.ModelFile(a.shape));
  KP_ASSIGN_OR_RETURN(kp::ModelSpec spec, kp::runtime::ScaleModel(preset, a.scale));
  return kp::runtime::BuildModel(spec, kp::runtime::ModelOptions{});
}

// The runtime model (null without --shape): the receivers' synced tensors are
// zeroed and the root's router biases made non-zero, so every byte must move.
Status ModelRows(Communicator& c, const Args& a, const torch::Device& device,
                 const std::shared_ptr<kp::runtime::StageModelImpl>& model, std::vector<Row>& rows) {
  if (model == nullptr) return Status::Ok();
  model->to(device);
  for (const kp::runtime::SyncMode mode : {kp::runtime::SyncMode::kFull, kp::runtime::SyncMode::kLora}) {
    if (mode == kp::runtime::SyncMode::kLora) {
      if (a.lora_rank == 0) break;
      model->EnableLora(kp::runtime::LoraOptions{a.lora_rank, 2.0 * a.lora_rank}, 1);
    }
    std::vector<NamedTensor> ts = kp::runtime::SyncedTensors(*model, mode);
    {
      torch::NoGradGuard no_grad;
      for (NamedTensor& t : ts)
        if (c.rank() != 0) t.tensor.zero_();
        else if (t.name.find("router.bias") != std::string::npos) t.tensor.normal_(0, 0.01);
    }
    kp::runtime::WeightSyncOptions o;
    o.mode = mode;
    o.bucket_bytes = Mib(a.model_bucket_mib);
    const std::string what = "model " + model->spec().name + " " + kp::runtime::SyncModeName(mode) +
                             (mode == kp::runtime::SyncMode::kLora ? " r=" + std::to_string(a.lora_rank) : "") +
                             ", bucket " + kp::FormatFixed(a.model_bucket_mib, 0) + " MiB";
    KP_ASSIGN_OR_RETURN(Row r, SyncRows(c, a, device, ts, o, what));
    rows.push_back(r);
  }
  return Status::Ok();
}

nlohmann::json ToJson(const Args& a, const Communicator& c, const std::vector<Row>& rows, double peak) {
  nlohmann::json j = {{"schema", "kimi-plan.sync-bench/1"}, {"backend", c.backend()}, {"device", a.device},
                      {"ranks", c.size()}, {"warmup", a.warmup}, {"repeats", a.repeats},
                      {"raw_peak_gbytes_per_s", peak}, {"rows", nlohmann::json::array()}};
  for (const Row& r : rows)
    j["rows"].push_back({{"what", r.what}, {"bytes", r.bytes}, {"buckets", r.buckets}, {"seconds", r.seconds},
                         {"gbytes_per_s", r.gbytes_per_s()}, {"ratio_to_raw", peak > 0 ? r.gbytes_per_s() / peak : 0}});
  return j;
}

Status Report(const Args& a, const Communicator& c, const std::vector<Row>& rows) {
  const double peak = rows.front().gbytes_per_s();
  const nlohmann::json j = ToJson(a, c, rows, peak);
  if (!a.json_file.empty()) {
    kp::RealFileSystem fs;
    KP_RETURN_IF_ERROR(fs.WriteFile(a.json_file, j.dump(2) + "\n"));
  }
  if (a.json) {
    std::cout << j.dump(2) << "\n";
    return Status::Ok();
  }
  kp::Table t({"what", "MB", "buckets", "seconds", "GB/s", "of raw"});
  for (const Row& r : rows)
    t.AddRow({r.what, kp::FormatFixed(r.bytes / 1e6, 2), std::to_string(r.buckets), kp::FormatFixed(r.seconds, 4),
              kp::FormatFixed(r.gbytes_per_s(), 2), kp::FormatFixed(peak > 0 ? r.gbytes_per_s() / peak : 0, 3)});
  std::printf("%d ranks over %s on %s; seconds: median of %d after %d warm-up, the slowest rank's\n%s", c.size(),
              c.backend().c_str(), a.device.c_str(), a.repeats, a.warmup, t.Render().c_str());
  return Status::Ok();
}

int Run(const Args& a) {
  Result<kp::runtime::Rendezvous> rv = kp::runtime::RendezvousFromEnvironment([](const char* n) { return std::getenv(n); });
  if (!rv.ok()) {
    std::cerr << rv.status().message() << "\n";
    return 2;
  }
  kp::runtime::C10dOptions co;
  co.backend = a.backend;
  co.device = a.device;
  co.timeout_s = a.timeout_s;
  const torch::Device device = a.device == "cuda" ? torch::Device(torch::kCUDA, rv->local_rank) : torch::Device(a.device);
  Result<std::unique_ptr<Communicator>> c = kp::runtime::ConnectC10d(*rv, co);
  if (!c.ok()) {
    std::cerr << c.status().message() << "\n";
    return 2;
  }
  std::shared_ptr<kp::runtime::StageModelImpl> model;
  if (!a.shape.empty()) {
    Result<std::shared_ptr<kp::runtime::StageModelImpl>> m = LoadModel(a);
    if (!m.ok()) {
      std::cerr << m.status().message() << "\n";
      return 2;
    }
    model = *m;
  }
  std::vector<Row> rows;
  Result<Row> raw = RawBroadcast(**c, a, device);
  Status s = raw.status();
  if (s.ok()) rows.push_back(*raw);
  if (s.ok()) s = SyntheticRows(**c, a, device, rows);
  if (s.ok()) s = ModelRows(**c, a, device, model, rows);
  if (s.ok() && (*c)->rank() == 0) s = Report(a, **c, rows);
  if (!s.ok()) {
    std::cerr << "rank " << rv->rank << ": " << s.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return kp::bench::BenchMain<Args>(ParseArgs(argc, argv), "", Run); }
