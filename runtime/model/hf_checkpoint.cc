#include "runtime/model/hf_checkpoint.h"

#include <algorithm>
#include <initializer_list>
#include <map>

#include "common/limits.h"
#include "runtime/model/int4_linear.h"
#include "runtime/model/runtime_config.h"
#include "specs/hf_config.h"
#include "weights/hf_names.h"
#include "weights/int4.h"
#include "weights/safetensors.h"

namespace kp::runtime {

namespace {

bool IsBank(const std::string& name) { return name.find(".moe.experts.") != std::string::npos; }

bool IsLora(const std::string& name) {
  return name.find("lora_a") != std::string::npos || name.find("lora_b") != std::string::npos;
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// An INT4 base's buffers (ExpertBankImpl::QuantizeBase): BANK.gate_packed
// and BANK.gate_scale beside the emptied BANK.gate; the released names add
// the same suffixes to the expert's weight.
HfForm Int4FormOf(const std::string& name) {
  if (!IsBank(name)) return HfForm::kWhole;
  if (EndsWith(name, "_packed")) return HfForm::kInt4Packed;
  if (EndsWith(name, "_scale")) return HfForm::kInt4Scale;
  return HfForm::kWhole;
}

const char* SuffixOf(HfForm form) {
  return form == HfForm::kInt4Packed ? "_packed" : form == HfForm::kInt4Scale ? "_scale" : "";
}

// The weight an INT4 buffer holds ("...experts.gate" of "...experts.gate_packed").
std::string BaseOf(const std::string& name, HfForm form) {
  return name.substr(0, name.size() - std::string(SuffixOf(form)).size());
}

// Columns of the weight per column of an INT4 buffer.
std::int64_t ColumnsPer(HfForm form) {
  return form == HfForm::kInt4Packed ? 8 : form == HfForm::kInt4Scale ? kInt4Group : 1;
}

// The stage's tensors by runtime name: parameters (an INT4 base's emptied
// weights left out), its INT4 buffers, and the routers' bias buffers (the
// e_score_correction_bias a checkpoint carries).
std::map<std::string, torch::Tensor> NamedTensors(StageModelImpl& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model.named_parameters())
    if (!(IsBank(p.key()) && p.value().numel() == 0)) out[p.key()] = p.value();
  for (const auto& b : model.named_buffers())
    if (EndsWith(b.key(), ".router.bias") || Int4FormOf(b.key()) != HfForm::kWhole) out[b.key()] = b.value();
  return out;
}

Result<TensorDType> FileDType(const torch::Tensor& t, const std::string& name) {
  if (t.scalar_type() == torch::kFloat) return TensorDType::kF32;
  if (t.scalar_type() == torch::kBFloat16) return TensorDType::kBF16;
  return Status::InvalidArgument(name + ": only fp32 and bf16 tensors are written");
}

std::string Bytes(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().cpu().contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

std::string Words(const std::vector<std::int32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::vector<std::int64_t> Shape(const torch::Tensor& t) { return t.sizes().vec(); }

// The expert's INT4 tensors, in the order HfNamesOf gives their names.
Result<std::vector<std::pair<TensorDType, std::pair<std::vector<std::int64_t>, std::string>>>> Int4Parts(
    const torch::Tensor& slice, const std::string& name) {
  const torch::Tensor w = slice.detach().to(torch::kFloat).cpu().contiguous();
  const int rows = static_cast<int>(w.size(0)), cols = static_cast<int>(w.size(1));
  KP_ASSIGN_OR_RETURN(const PackedInt4 p,
                      QuantizeInt4(std::vector<float>(w.data_ptr<float>(), w.data_ptr<float>() + w.numel()), rows, cols,
                                   name));
  const std::string scales(reinterpret_cast<const char*>(p.scales.data()), p.scales.size() * 2);
  return std::vector<std::pair<TensorDType, std::pair<std::vector<std::int64_t>, std::string>>>{
      {TensorDType::kI32, {{rows, cols / 8}, Words(p.packed)}},
      {TensorDType::kBF16, {{rows, cols / kInt4Group}, scales}},
      {TensorDType::kI32, {{2}, Words({rows, cols})}}};
}

torch::ScalarType TorchDType(TensorDType t) {
  return t == TensorDType::kBF16 ? torch::kBFloat16 : t == TensorDType::kI32 ? torch::kInt : torch::kFloat;
}

// A checkpoint tensor viewed in place over the mapped file: nothing is read
// until a slice of it is copied. Read-only; valid while the checkpoint is open.
torch::Tensor ViewOf(const SafetensorsFile& file, const TensorEntry& e) {
  const std::string_view bytes = file.Bytes(e);
  return torch::from_blob(const_cast<char*>(bytes.data()), e.shape, torch::TensorOptions().dtype(TorchDType(e.dtype)));
}

// The released tensor's shape: `local`'s with each sliced dimension whole.
std::vector<std::int64_t> WholeShape(std::vector<std::int64_t> local, const std::vector<ParameterShard>& slices,
                                     std::int64_t dim_offset) {
  for (const ParameterShard& s : slices)
    if (s.dim >= dim_offset) local[s.dim - dim_offset] = s.whole;
  return local;
}

// The released tensor `hf`, of `shape` and one of `dtypes`, in place.
Result<torch::Tensor> ReadTensor(const CheckpointDir& c, const std::string& hf, const std::vector<std::int64_t>& shape,
                                 std::initializer_list<TensorDType> dtypes) {
  KP_ASSIGN_OR_RETURN(const auto found, c.Find(hf));
  const auto& [file, entry] = found;
  if (std::find(dtypes.begin(), dtypes.end(), entry->dtype) == dtypes.end()) {
    std::string allowed;
    for (const TensorDType d : dtypes) allowed += (allowed.empty() ? "" : " or ") + std::string(DTypeName(d));
    return Status::InvalidArgument(file->path() + ": tensor " + hf + ": " + std::string(DTypeName(entry->dtype)) +
                                   ", where " + allowed + " is read");
  }
  if (entry->shape != shape)
    return Status::InvalidArgument(file->path() + ": tensor " + hf + ": shape " + ShapeText(entry->shape) +
                                   ", the model's is " + ShapeText(shape));
  return ViewOf(*file, *entry);
}

Result<torch::Tensor> ReadWhole(const CheckpointDir& c, const std::string& hf, const std::vector<std::int64_t>& shape) {
  return ReadTensor(c, hf, shape, {TensorDType::kF32, TensorDType::kBF16});
}

Result<torch::Tensor> ReadInt4(const CheckpointDir& c, const std::vector<std::string>& hf,
                               const std::vector<std::int64_t>& shape) {
  std::vector<torch::Tensor> parts;
  std::string path;
  const TensorDType want[3] = {TensorDType::kI32, TensorDType::kBF16, TensorDType::kI32};
  for (int i = 0; i < 3; ++i) {
    KP_ASSIGN_OR_RETURN(const auto found, c.Find(hf[i]));
    if (found.second->dtype != want[i])
      return Status::InvalidArgument(found.first->path() + ": tensor " + hf[i] + ": " +
                                     std::string(DTypeName(found.second->dtype)) + ", where " +
                                     std::string(DTypeName(want[i])) + " is read");
    parts.push_back(ViewOf(*found.first, *found.second).contiguous());
    path = found.first->path();
  }
  PackedInt4 p;
  p.rows = static_cast<int>(shape[0]), p.cols = static_cast<int>(shape[1]);
  if (parts[2].numel() != 2 || parts[2][0].item<int>() != p.rows || parts[2][1].item<int>() != p.cols)
    return Status::InvalidArgument(path + ": tensor " + hf[2] + ": weight_shape does not match the model's " +
                                   ShapeText(shape));
  if (parts[0].numel() * 8 != std::int64_t(p.rows) * p.cols || parts[1].numel() * kInt4Group != parts[0].numel() * 8)
    return Status::InvalidArgument(path + ": tensor " + hf[0] + ": shape " + ShapeText(parts[0].sizes().vec()) +
                                   " does not pack " + ShapeText(shape) + " in groups of 32");
  p.packed.assign(parts[0].data_ptr<std::int32_t>(), parts[0].data_ptr<std::int32_t>() + parts[0].numel());
  const auto* s = reinterpret_cast<const std::uint16_t*>(parts[1].data_ptr());
  p.scales.assign(s, s + parts[1].numel());
  KP_ASSIGN_OR_RETURN(const std::vector<float> w, DequantizeInt4(p, hf[0]));
  return torch::tensor(w).reshape({p.rows, p.cols});
}

// A routed expert called `name` (bf16 form): its bf16/fp32 tensor, else its
// three INT4 tensors (`name` with _packed, _scale, _shape).
Result<torch::Tensor> ReadExpert(const CheckpointDir& c, const std::string& name,
                                 const std::vector<std::int64_t>& shape) {
  Result<torch::Tensor> src = ReadWhole(c, name, shape);
  if (src.ok() || src.status().code() != Status::Code::kNotFound) return src;
  return ReadInt4(c, {name + "_packed", name + "_scale", name + "_shape"}, shape);
}

// The box [offset, offset + shape) of `whole`.
torch::Tensor NarrowTo(torch::Tensor whole, const std::vector<std::int64_t>& offset, c10::IntArrayRef shape) {
  for (std::size_t d = 0; d < offset.size(); ++d)
    whole = whole.narrow(static_cast<std::int64_t>(d), offset[d], shape[d]);
  return whole;
}

// An INT4 base's box (ReleasedPiece::form): the released INT4 tensor's box
// as stored, its bytes copied, never re-quantised; or, from a checkpoint of
// bf16 / fp32 experts, the weight's box quantised as QuantizeBase would.
Result<torch::Tensor> ReadInt4Box(const CheckpointDir& c, const ReleasedPiece& p) {
  const bool packed = p.form == HfForm::kInt4Packed;
  const std::string weight = BaseOf(p.name, p.form);
  const std::int64_t per = ColumnsPer(p.form);
  std::vector<std::int64_t> float_whole = p.whole, float_offset = p.offset, float_box = p.local.sizes().vec();
  float_whole.back() *= per, float_offset.back() *= per, float_box.back() *= per;
  Result<torch::Tensor> stored = ReadTensor(c, p.name, p.whole, {packed ? TensorDType::kI32 : TensorDType::kBF16});
  if (stored.ok()) {
    if (packed && c.Find(weight + "_shape").ok()) {
      KP_ASSIGN_OR_RETURN(const torch::Tensor shape, ReadTensor(c, weight + "_shape", {2}, {TensorDType::kI32}));
      if (shape[0].item<std::int64_t>() != float_whole[0] || shape[1].item<std::int64_t>() != float_whole[1])
        return Status::InvalidArgument(c.Find(weight + "_shape")->first->path() + ": tensor " + weight +
                                       "_shape: weight_shape does not match the model's " + ShapeText(float_whole));
    }
    return NarrowTo(*stored, p.offset, p.local.sizes());
  }
  if (stored.status().code() != Status::Code::kNotFound || !c.Find(weight).ok()) return stored.status();
  KP_ASSIGN_OR_RETURN(const torch::Tensor w, ReadWhole(c, weight, float_whole));
  const Int4Weight q = QuantizeInt4Weight(NarrowTo(w, float_offset, float_box).to(torch::kFloat));
  return packed ? q.packed : q.scales;
}

}  // namespace

namespace {

// The tensors of the model.safetensors SaveHfCheckpoint writes, their bytes
// owned here until written.
struct FileTensors {
  std::vector<std::string> names, bytes;
  std::vector<std::pair<TensorDType, std::vector<std::int64_t>>> meta;
  void Add(const std::string& name, TensorDType dtype, std::vector<std::int64_t> shape, std::string data) {
    names.push_back(name);
    meta.push_back({dtype, std::move(shape)});
    bytes.push_back(std::move(data));
  }
  std::vector<TensorToWrite> ToWrite() const {
    std::vector<TensorToWrite> out;
    for (std::size_t i = 0; i < names.size(); ++i) out.push_back({names[i], meta[i].first, meta[i].second, bytes[i]});
    return out;
  }
};

// An INT4 base's buffer, expert by expert, with weight_shape beside each
// expert's packed words: the bytes as they are, never re-quantised.
Status AddInt4Base(const std::string& name, const torch::Tensor& t, HfForm form, FileTensors& out) {
  KP_ASSIGN_OR_RETURN(const std::vector<std::string> hf, HfNamesOf(BaseOf(name, form), t.size(0), false));
  for (std::int64_t e = 0; e < t.size(0); ++e) {
    const torch::Tensor one = t[e];
    out.Add(hf[e] + SuffixOf(form), form == HfForm::kInt4Packed ? TensorDType::kI32 : TensorDType::kBF16, Shape(one),
            Bytes(one));
    if (form == HfForm::kInt4Packed)
      out.Add(hf[e] + "_shape", TensorDType::kI32, {2},
              Words({static_cast<std::int32_t>(one.size(0)), static_cast<std::int32_t>(one.size(1) * 8)}));
  }
  return Status::Ok();
}

}  // namespace

Status SaveHfCheckpoint(StageModelImpl& model, const FileSystem& fs, const std::string& dir, bool int4_experts) {
  FileTensors out;
  bool int4_base = false, bf16 = false;
  for (const auto& [name, t] : NamedTensors(model)) {
    if (IsLora(name)) continue;
    const HfForm form = Int4FormOf(name);
    if (form != HfForm::kWhole) {
      int4_base = true;
      KP_RETURN_IF_ERROR(AddInt4Base(name, t, form, out));
      continue;
    }
    bf16 = bf16 || t.scalar_type() == torch::kBFloat16;
    const bool bank = IsBank(name);
    KP_ASSIGN_OR_RETURN(const std::vector<std::string> hf, HfNamesOf(name, bank ? t.size(0) : 1, bank && int4_experts));
    for (std::size_t i = 0; i < hf.size(); ++i) {
      if (bank && int4_experts) {
        if (i % 3 != 0) continue;
        KP_ASSIGN_OR_RETURN(const auto parts, Int4Parts(t[static_cast<std::int64_t>(i / 3)], hf[i]));
        for (int k = 0; k < 3; ++k) out.Add(hf[i + k], parts[k].first, parts[k].second.first, parts[k].second.second);
        continue;
      }
      const torch::Tensor one = bank ? t[static_cast<std::int64_t>(i)] : t;
      KP_ASSIGN_OR_RETURN(const TensorDType dtype, FileDType(one, name));
      out.Add(hf[i], dtype, Shape(one), Bytes(one));
    }
  }
  KP_RETURN_IF_ERROR(fs.CreateDirectories(dir));
  KP_RETURN_IF_ERROR(WriteSafetensors(fs, dir + "/model.safetensors", out.ToWrite(), {{"format", "pt"}}));
  // K3 (KDA, AttnRes) has no released config format: only the weights.
  const Result<std::string> config =
      HfConfigFromModelSpec(model.spec(), bf16 ? "bfloat16" : "float32", int4_experts || int4_base);
  if (!config.ok()) return Status::Ok();
  return fs.WriteFile(dir + "/config.json", *config);
}

Status CheckCheckpointArchitecture(const FileSystem& fs, const std::string& dir, const ModelSpec& model) {
  const std::string path = dir + "/config.json";
  if (!fs.Exists(path)) return Status::Ok();
  KP_ASSIGN_OR_RETURN(const std::string text, fs.ReadFile(path, limits::kMaxSpecFileBytes));
  if (!IsHfConfig(text)) return Status::Ok();
  Result<ModelSpec> released = ModelSpecFromHfConfig(text, model.name);
  if (!released.ok()) return released.status().WithContext(path);
  const std::string diff = FirstShapeDifference(ModelShapeJson(*released, {}), ModelShapeJson(model, {}));
  if (diff.empty()) return Status::Ok();
  return Status::InvalidArgument(path + ": the checkpoint's architecture is not the model's (" + diff +
                                 "; checkpoint vs model)");
}

StageSlices SlicesOfStage(StageModelImpl& model, const TensorParallelSplit* tp, int ep_rank, int ep, int etp_rank,
                          int etp) {
  StageSlices out;
  if (tp != nullptr)
    for (const auto& [name, shard] : tp->shards) out[name].push_back(shard);
  for (const auto& [name, t] : NamedTensors(model)) {
    if (!IsBank(name) || IsLora(name)) continue;
    const std::int64_t experts = t.size(0) * ep;
    if (ep > 1) out[name].push_back(ParameterShard{0, ep_rank * t.size(0), t.size(0), experts});
    // gate and up are [E, F, D], down [E, D, F]: the FFN columns ETP splits
    // (an INT4 base's buffers in their own columns: a slice of whole groups).
    const std::int64_t ffn_dim = EndsWith(BaseOf(name, Int4FormOf(name)), ".down") ? 2 : 1;
    if (etp > 1)
      out[name].push_back(ParameterShard{ffn_dim, etp_rank * t.size(ffn_dim), t.size(ffn_dim), t.size(ffn_dim) * etp});
  }
  return out;
}

Result<std::vector<ReleasedPiece>> ReleasedPieces(StageModelImpl& model, const StageSlices& slices, bool own_names,
                                                  bool adapters) {
  std::vector<ReleasedPiece> out;
  static const std::vector<ParameterShard> kWhole;
  for (const auto& [name, t] : NamedTensors(model)) {
    if (IsLora(name)) {
      // Adapters train whole on every rank of their stage (no split takes
      // LoRA yet) and have no released name.
      if (adapters) out.push_back({name, t.sizes().vec(), std::vector<std::int64_t>(t.dim(), 0), t, t});
      if (adapters) out.back().adapter = true;
      continue;
    }
    const auto found = slices.find(name);
    const std::vector<ParameterShard>& sliced = found == slices.end() ? kWhole : found->second;
    if (!IsBank(name)) {
      // A tensor the released names lack (K3's KDA and AttnRes) keeps its own.
      const Result<std::vector<std::string>> hf = HfNamesOf(name, 1, false);
      if (!hf.ok() && (!own_names || hf.status().code() != Status::Code::kNotFound)) return hf.status();
      ReleasedPiece p{hf.ok() ? (*hf)[0] : name, WholeShape(t.sizes().vec(), sliced, 0),
                      std::vector<std::int64_t>(t.dim(), 0), t, t};
      for (const ParameterShard& s : sliced) p.offset[s.dim] = s.first;
      p.sliced = !sliced.empty();
      out.push_back(std::move(p));
      continue;
    }
    std::int64_t first = 0, experts = t.size(0);
    for (const ParameterShard& s : sliced)
      if (s.dim == 0) first = s.first, experts = s.whole;
    const HfForm form = Int4FormOf(name);
    KP_ASSIGN_OR_RETURN(const std::vector<std::string> hf,
                        HfNamesOf(BaseOf(name, form), static_cast<int>(experts), false));
    const std::vector<std::int64_t> whole = WholeShape(t[0].sizes().vec(), sliced, 1);
    for (std::int64_t e = 0; e < t.size(0); ++e) {
      ReleasedPiece p{hf[first + e] + SuffixOf(form), whole, std::vector<std::int64_t>(t.dim() - 1, 0), t[e], t,
                      e * t[0].numel(), true};
      p.form = form;
      for (const ParameterShard& s : sliced)
        if (s.dim >= 1) p.offset[s.dim - 1] = s.first;
      out.push_back(std::move(p));
    }
  }
  return out;
}

Status LoadHfCheckpoint(StageModelImpl& model, const CheckpointDir& checkpoint, const StageSlices& slices) {
  // Every tensor read and checked first; the model changes only after.
  KP_ASSIGN_OR_RETURN(const std::vector<ReleasedPiece> pieces, ReleasedPieces(model, slices, /*own_names=*/false));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (destination, source box)
  for (const ReleasedPiece& p : pieces) {
    if (p.form != HfForm::kWhole) {
      KP_ASSIGN_OR_RETURN(const torch::Tensor box, ReadInt4Box(checkpoint, p));
      copies.push_back({p.local, box});
      continue;
    }
    KP_ASSIGN_OR_RETURN(const torch::Tensor src, p.expert ? ReadExpert(checkpoint, p.name, p.whole)
                                                          : ReadWhole(checkpoint, p.name, p.whole));
    copies.push_back({p.local, NarrowTo(src, p.offset, p.local.sizes())});
  }
  torch::NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(src.to(dst.scalar_type()));
  return Status::Ok();
}

}  // namespace kp::runtime
