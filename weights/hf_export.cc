#include "weights/hf_export.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "weights/hf_names.h"
#include "weights/int4.h"

namespace kp {

namespace {

using nlohmann::json;

constexpr const char* kModel = "model/";

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::int64_t Elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

bool IsAdapter(const std::string& name) { return EndsWith(name, "lora_a") || EndsWith(name, "lora_b"); }

// The runtime weight an adapter adapts: P.weight of a projection's P.lora_a,
// BANK.gate of an expert bank's BANK.gate_lora_a.
std::string AdaptedWeight(const std::string& adapter) {
  const std::string stem = adapter.substr(0, adapter.size() - 7);  // less ".lora_a" / "_lora_a"
  return adapter[adapter.size() - 7] == '.' ? stem + ".weight" : stem;
}

bool IsBank(const std::string& runtime) { return runtime.find(".moe.experts.") != std::string::npos; }

// alpha / rank as the save's recorded shape (runtime_config.h's ModelShapeJson) holds them.
Result<double> LoraScale(const ShardedSave& save) {
  const json shape = json::parse(save.manifest().shape, nullptr, /*allow_exceptions=*/false);
  if (shape.is_discarded() || !shape.contains("lora") || !shape["lora"].is_object())
    return Status::InvalidArgument(save.folder() + ": the save holds adapters but records no LoRA rank and alpha");
  const json& lora = shape["lora"];
  const double rank = lora.value("rank", 0.0), alpha = lora.value("alpha", 0.0);
  if (!(rank > 0) || !(alpha > 0))
    return Status::InvalidArgument(save.folder() + ": the save holds adapters but its lora.rank / lora.alpha are " +
                                   lora.dump());
  return alpha / rank;
}

// A stored F32 or BF16 box as fp32 values.
Result<std::vector<float>> Floats(const ShardedSave::Filled& f, const std::string& key) {
  const std::size_t n = f.bytes.size() / DTypeBytes(f.dtype);
  std::vector<float> out(n);
  if (f.dtype == TensorDType::kF32) {
    std::memcpy(out.data(), f.bytes.data(), n * 4);
  } else if (f.dtype == TensorDType::kBF16) {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t b;
      std::memcpy(&b, f.bytes.data() + 2 * i, 2);
      out[i] = FromBf16(b);
    }
  } else {
    return Status::InvalidArgument(key + ": " + std::string(DTypeName(f.dtype)) + ", where F32 or BF16 is read");
  }
  return out;
}

Result<ShardedSave::Filled> FillWhole(const ShardedSave& save, const std::string& key) {
  const auto found = save.pieces().find(key);
  if (found == save.pieces().end()) return Status::NotFound(save.folder() + ": no piece of " + key);
  const std::vector<std::int64_t>& whole = found->second.front().box.whole;
  return save.Fill(key, std::vector<std::int64_t>(whole.size(), 0), whole);
}

const std::vector<std::int64_t>& WholeOf(const ShardedSave& save, const std::string& key) {
  return save.pieces().at(key).front().box.whole;
}

// The released weight `name` as fp32 [rows, cols]: stored, or an INT4 base
// dequantized (weights/int4.h).
Result<std::vector<float>> WeightValues(const ShardedSave& save, const std::string& name) {
  const std::string key = kModel + name;
  if (save.Has(key)) {
    KP_ASSIGN_OR_RETURN(const ShardedSave::Filled f, FillWhole(save, key));
    return Floats(f, key);
  }
  KP_ASSIGN_OR_RETURN(const ShardedSave::Filled packed, FillWhole(save, key + "_packed"));
  KP_ASSIGN_OR_RETURN(const ShardedSave::Filled scales, FillWhole(save, key + "_scale"));
  const std::vector<std::int64_t>& whole = WholeOf(save, key + "_packed");
  PackedInt4 p;
  p.rows = static_cast<int>(whole[0]);
  p.cols = static_cast<int>(whole[1] * 8);
  p.packed.resize(packed.bytes.size() / 4);
  std::memcpy(p.packed.data(), packed.bytes.data(), packed.bytes.size());
  p.scales.resize(scales.bytes.size() / 2);
  std::memcpy(p.scales.data(), scales.bytes.data(), scales.bytes.size());
  return DequantizeInt4(p, key);
}

// An adapter's matrix: the whole 2-D tensor, or `slice` of a 3-D one.
Result<std::vector<float>> AdapterMatrix(const ShardedSave& save, const std::string& key, std::int64_t slice,
                                         std::vector<std::int64_t>* shape) {
  KP_ASSIGN_OR_RETURN(const ShardedSave::Filled f, FillWhole(save, key));
  KP_ASSIGN_OR_RETURN(std::vector<float> all, Floats(f, key));
  const std::vector<std::int64_t>& whole = WholeOf(save, key);
  if (slice < 0) {
    *shape = whole;
    return all;
  }
  *shape = {whole[1], whole[2]};
  const std::int64_t n = whole[1] * whole[2];
  return std::vector<float>(all.begin() + slice * n, all.begin() + (slice + 1) * n);
}

// W + scale B A over fp32 [out, in], B [out, r], A [r, in].
Result<std::vector<float>> Merged(const ShardedSave& save, const std::string& name, const std::vector<std::int64_t>& shape,
                                  const LowRankUpdate& u, double scale) {
  KP_ASSIGN_OR_RETURN(std::vector<float> w, WeightValues(save, name));
  std::vector<std::int64_t> a_shape, b_shape;
  KP_ASSIGN_OR_RETURN(const std::vector<float> a, AdapterMatrix(save, u.a_key, u.a_slice, &a_shape));
  KP_ASSIGN_OR_RETURN(const std::vector<float> b, AdapterMatrix(save, u.b_key, u.b_slice, &b_shape));
  const std::int64_t out = shape[0], in = shape[1];
  if (a_shape.size() != 2 || b_shape.size() != 2 || b_shape[0] != out || a_shape[1] != in || b_shape[1] != a_shape[0])
    return Status::InvalidArgument(u.a_key + ": the adapters " + ShapeText(b_shape) + " x " + ShapeText(a_shape) +
                                   " do not update " + name + " " + ShapeText(shape));
  const std::int64_t r = a_shape[0];
  const float s = static_cast<float>(scale);
  for (std::int64_t o = 0; o < out; ++o)
    for (std::int64_t k = 0; k < r; ++k) {
      const float bk = s * b[o * r + k];
      for (std::int64_t i = 0; i < in; ++i) w[o * in + i] += bk * a[k * in + i];
    }
  return w;
}

std::string Bf16Bytes(const std::vector<float>& v) {
  std::string out(v.size() * 2, '\0');
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint16_t b = ToBf16(v[i]);
    std::memcpy(out.data() + 2 * i, &b, 2);
  }
  return out;
}

std::string F32Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string ShardName(int k, int n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k, n);
  return name;
}

// One tensor of the folder: how its bytes are made.
struct Planned {
  enum class Source { kStored, kInt4Shape, kMerged };
  std::string name;
  TensorDType dtype;
  std::vector<std::int64_t> shape;
  Source source = Source::kStored;
  std::string key;  // the stored key (kStored, kInt4Shape: the packed words')
};

struct Plan {
  std::vector<std::vector<Planned>> shards{1};
  std::int64_t total_bytes = 0;
  ExportSummary summary;
};

Result<Plan> PlanFolder(const ShardedSave& save, const ExportOptions& o,
                        const std::map<std::string, LowRankUpdate>& updates) {
  Plan plan;
  std::int64_t in_shard = 0;
  auto add = [&](Planned p) {
    const std::int64_t bytes = Elements(p.shape) * DTypeBytes(p.dtype);
    if (in_shard > 0 && in_shard + bytes > o.max_shard_bytes) {
      plan.shards.emplace_back();
      in_shard = 0;
    }
    plan.shards.back().push_back(std::move(p));
    in_shard += bytes;
    plan.total_bytes += bytes;
  };
  const std::string prefix = kModel;
  for (const auto& [key, pieces] : save.pieces()) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string name = key.substr(prefix.size());
    if (IsAdapter(name)) {
      ++plan.summary.adapters;
      continue;
    }
    const bool packed = EndsWith(name, "_packed"), scale = EndsWith(name, "_scale");
    const bool int4 = (packed || scale) && save.Has(key.substr(0, key.rfind('_')) + "_packed");
    const std::string weight = int4 ? name.substr(0, name.rfind('_')) : name;
    const std::vector<std::int64_t>& whole = pieces.front().box.whole;
    const TensorDType stored = pieces.front().entry->dtype;
    if (o.merge_lora && updates.count(weight)) {
      if (scale && int4) continue;  // folded with its packed words
      std::vector<std::int64_t> shape = whole;
      if (int4) shape.back() *= 8;
      ++plan.summary.merged;
      add({weight, o.bf16 || stored != TensorDType::kF32 ? TensorDType::kBF16 : TensorDType::kF32, shape,
           Planned::Source::kMerged, weight});
      continue;
    }
    add({name, o.bf16 && stored == TensorDType::kF32 ? TensorDType::kBF16 : stored, whole, Planned::Source::kStored,
         key});
    if (int4 && packed) {
      plan.summary.int4_experts = true;
      add({weight + "_shape", TensorDType::kI32, {2}, Planned::Source::kInt4Shape, key});
    }
  }
  if (plan.shards.front().empty()) return Status::InvalidArgument(save.folder() + ": holds no model/ piece to export");
  if (o.merge_lora)
    for (const auto& [weight, u] : updates)
      if (!save.Has(prefix + weight) && !save.Has(prefix + weight + "_packed"))
        return Status::InvalidArgument(u.a_key + ": the weight it adapts, " + weight + ", is not in " + save.folder());
  return plan;
}

Result<std::string> BytesOf(const ShardedSave& save, const Planned& p, const std::map<std::string, LowRankUpdate>& updates,
                            double scale) {
  switch (p.source) {
    case Planned::Source::kStored: {
      KP_ASSIGN_OR_RETURN(ShardedSave::Filled f, FillWhole(save, p.key));
      if (p.dtype == f.dtype) return std::move(f.bytes);
      KP_ASSIGN_OR_RETURN(const std::vector<float> v, Floats(f, p.key));
      return Bf16Bytes(v);
    }
    case Planned::Source::kInt4Shape: {
      const std::vector<std::int64_t>& packed = WholeOf(save, p.key);
      const std::int32_t shape[2] = {static_cast<std::int32_t>(packed[0]), static_cast<std::int32_t>(packed[1] * 8)};
      return std::string(reinterpret_cast<const char*>(shape), sizeof shape);
    }
    case Planned::Source::kMerged: {
      KP_ASSIGN_OR_RETURN(const std::vector<float> w, Merged(save, p.name, p.shape, updates.at(p.name), scale));
      return p.dtype == TensorDType::kBF16 ? Bf16Bytes(w) : F32Bytes(w);
    }
  }
  return Status::Internal(p.name + ": no source");
}

}  // namespace

Result<std::map<std::string, LowRankUpdate>> AdapterUpdates(const ShardedSave& save) {
  // The pairs by the runtime weight they adapt.
  std::map<std::string, std::pair<std::string, std::string>> pairs;
  for (const auto& [key, pieces] : save.pieces()) {
    if (key.compare(0, 6, kModel) != 0 || !IsAdapter(key)) continue;
    auto& pair = pairs[AdaptedWeight(key.substr(6))];
    (EndsWith(key, "lora_a") ? pair.first : pair.second) = key;
  }
  std::map<std::string, LowRankUpdate> out;
  for (const auto& [runtime, pair] : pairs) {
    if (pair.first.empty() || pair.second.empty())
      return Status::InvalidArgument((pair.first.empty() ? pair.second : pair.first) + ": its " +
                                     (pair.first.empty() ? "lora_a" : "lora_b") + " is not in " + save.folder());
    const bool a3 = WholeOf(save, pair.first).size() == 3, b3 = WholeOf(save, pair.second).size() == 3;
    if (!IsBank(runtime)) {
      const Result<std::vector<std::string>> hf = HfNamesOf(runtime, 1, false);
      if (!hf.ok() && hf.status().code() != Status::Code::kNotFound) return hf.status();
      out[hf.ok() ? (*hf)[0] : runtime] = LowRankUpdate{pair.first, pair.second};
      continue;
    }
    if (!a3 && !b3)
      return Status::InvalidArgument(pair.first + ": an expert bank's adapters need one side per expert");
    const std::int64_t experts = a3 ? WholeOf(save, pair.first)[0] : WholeOf(save, pair.second)[0];
    KP_ASSIGN_OR_RETURN(const std::vector<std::string> hf, HfNamesOf(runtime, static_cast<int>(experts), false));
    for (std::int64_t e = 0; e < experts; ++e)
      out[hf[e]] = LowRankUpdate{pair.first, pair.second, a3 ? e : -1, b3 ? e : -1};
  }
  return out;
}

Result<ExportSummary> ExportHfFolder(const ShardedSave& save, const FileSystem& fs, const std::string& out,
                                     const ExportOptions& o) {
  // Planned from the stored shapes first, so each file's name can say how
  // many there are; then filled one shard at a time.
  std::map<std::string, LowRankUpdate> updates;
  double scale = 0;
  if (o.merge_lora) {
    KP_ASSIGN_OR_RETURN(updates, AdapterUpdates(save));
    if (!updates.empty()) {
      KP_ASSIGN_OR_RETURN(scale, LoraScale(save));
    }
  }
  KP_ASSIGN_OR_RETURN(Plan plan, PlanFolder(save, o, updates));
  KP_RETURN_IF_ERROR(fs.CreateDirectories(out));
  const int n = static_cast<int>(plan.shards.size());
  json weight_map = json::object();
  for (int k = 0; k < n; ++k) {
    const std::string file = n == 1 ? "model.safetensors" : ShardName(k + 1, n);
    std::vector<std::string> bytes;
    bytes.reserve(plan.shards[k].size());
    std::vector<TensorToWrite> tensors;
    for (const Planned& p : plan.shards[k]) {
      KP_ASSIGN_OR_RETURN(std::string b, BytesOf(save, p, updates, scale));
      bytes.push_back(std::move(b));
      tensors.push_back({p.name, p.dtype, p.shape, bytes.back()});
      weight_map[p.name] = file;
      ++plan.summary.tensors;
    }
    KP_RETURN_IF_ERROR(WriteSafetensors(fs, out + "/" + file, tensors, {{"format", "pt"}}));
  }
  if (n > 1) {
    const json index{{"metadata", {{"total_size", plan.total_bytes}}}, {"weight_map", weight_map}};
    KP_RETURN_IF_ERROR(fs.WriteFile(out + "/model.safetensors.index.json", index.dump(2) + "\n"));
  }
  return plan.summary;
}

}  // namespace kp
