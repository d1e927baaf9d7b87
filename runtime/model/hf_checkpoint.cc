#include "runtime/model/hf_checkpoint.h"

#include <cstring>
#include <map>

#include "weights/hf_names.h"
#include "weights/int4.h"
#include "weights/safetensors.h"

namespace kp::runtime {

namespace {

// The stage's tensors by runtime name: parameters, then the routers' bias
// buffers (the e_score_correction_bias a checkpoint carries).
std::map<std::string, torch::Tensor> NamedTensors(StageModelImpl& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model.named_parameters()) out[p.key()] = p.value();
  for (const auto& b : model.named_buffers())
    if (b.key().size() > 12 && b.key().compare(b.key().size() - 12, 12, ".router.bias") == 0) out[b.key()] = b.value();
  return out;
}

bool IsLora(const std::string& name) {
  return name.find("lora_a") != std::string::npos || name.find("lora_b") != std::string::npos;
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

// A checkpoint tensor as a CPU torch tensor of its own dtype.
torch::Tensor FromEntry(const SafetensorsFile& file, const TensorEntry& e) {
  const std::string_view bytes = file.Bytes(e);
  const auto dtype = e.dtype == TensorDType::kBF16 ? torch::kBFloat16
                     : e.dtype == TensorDType::kI32 ? torch::kInt : torch::kFloat;
  torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(dtype));
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

Result<torch::Tensor> ReadWhole(const CheckpointDir& c, const std::string& hf, const torch::Tensor& like) {
  KP_ASSIGN_OR_RETURN(const auto found, c.Find(hf));
  const auto& [file, entry] = found;
  if (entry->dtype != TensorDType::kF32 && entry->dtype != TensorDType::kBF16)
    return Status::InvalidArgument(file->path() + ": tensor " + hf + ": " + std::string(DTypeName(entry->dtype)) +
                                   ", where F32 or BF16 is read");
  if (entry->shape != like.sizes().vec())
    return Status::InvalidArgument(file->path() + ": tensor " + hf + ": shape " + ShapeText(entry->shape) +
                                   ", the model's is " + ShapeText(like.sizes().vec()));
  return FromEntry(*file, *entry);
}

Result<torch::Tensor> ReadInt4(const CheckpointDir& c, const std::vector<std::string>& hf, const torch::Tensor& like) {
  std::vector<torch::Tensor> parts;
  const TensorDType want[3] = {TensorDType::kI32, TensorDType::kBF16, TensorDType::kI32};
  for (int i = 0; i < 3; ++i) {
    KP_ASSIGN_OR_RETURN(const auto found, c.Find(hf[i]));
    if (found.second->dtype != want[i])
      return Status::InvalidArgument(found.first->path() + ": tensor " + hf[i] + ": " +
                                     std::string(DTypeName(found.second->dtype)) + ", where " +
                                     std::string(DTypeName(want[i])) + " is read");
    parts.push_back(FromEntry(*found.first, *found.second));
  }
  PackedInt4 p;
  p.rows = static_cast<int>(like.size(0)), p.cols = static_cast<int>(like.size(1));
  if (parts[2].numel() != 2 || parts[2][0].item<int>() != p.rows || parts[2][1].item<int>() != p.cols)
    return Status::InvalidArgument(hf[2] + ": weight_shape does not match the model's " + ShapeText(like.sizes().vec()));
  p.packed.assign(parts[0].data_ptr<std::int32_t>(), parts[0].data_ptr<std::int32_t>() + parts[0].numel());
  const auto* s = reinterpret_cast<const std::uint16_t*>(parts[1].data_ptr());
  p.scales.assign(s, s + parts[1].numel());
  KP_ASSIGN_OR_RETURN(const std::vector<float> w, DequantizeInt4(p, hf[0]));
  return torch::tensor(w).reshape({p.rows, p.cols});
}

}  // namespace

Status SaveHfCheckpoint(StageModelImpl& model, const FileSystem& fs, const std::string& dir, bool int4_experts) {
  std::vector<std::string> owned_names;
  std::vector<std::string> owned_bytes;
  std::vector<std::pair<TensorDType, std::vector<std::int64_t>>> meta;
  for (const auto& [name, t] : NamedTensors(model)) {
    if (IsLora(name)) continue;
    const bool bank = name.find(".moe.experts.") != std::string::npos;
    KP_ASSIGN_OR_RETURN(const std::vector<std::string> hf, HfNamesOf(name, bank ? t.size(0) : 1, bank && int4_experts));
    for (std::size_t i = 0; i < hf.size(); ++i) {
      if (bank && int4_experts) {
        if (i % 3 != 0) continue;
        KP_ASSIGN_OR_RETURN(const auto parts, Int4Parts(t[static_cast<std::int64_t>(i / 3)], hf[i]));
        for (int k = 0; k < 3; ++k) {
          owned_names.push_back(hf[i + k]);
          meta.push_back({parts[k].first, parts[k].second.first});
          owned_bytes.push_back(parts[k].second.second);
        }
        continue;
      }
      const torch::Tensor one = bank ? t[static_cast<std::int64_t>(i)] : t;
      KP_ASSIGN_OR_RETURN(const TensorDType dtype, FileDType(one, name));
      owned_names.push_back(hf[i]);
      meta.push_back({dtype, Shape(one)});
      owned_bytes.push_back(Bytes(one));
    }
  }
  std::vector<TensorToWrite> tensors;
  for (std::size_t i = 0; i < owned_names.size(); ++i)
    tensors.push_back({owned_names[i], meta[i].first, meta[i].second, owned_bytes[i]});
  KP_RETURN_IF_ERROR(fs.CreateDirectories(dir));
  return WriteSafetensors(fs, dir + "/model.safetensors", tensors, {{"format", "pt"}});
}

Status LoadHfCheckpoint(StageModelImpl& model, const CheckpointDir& checkpoint) {
  // Every tensor read and checked first; the model changes only after.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (destination, source)
  for (const auto& [name, t] : NamedTensors(model)) {
    if (IsLora(name)) continue;
    const bool bank = name.find(".moe.experts.") != std::string::npos;
    const int experts = bank ? static_cast<int>(t.size(0)) : 1;
    KP_ASSIGN_OR_RETURN(const std::vector<std::string> hf, HfNamesOf(name, experts, false));
    for (int e = 0; e < experts; ++e) {
      const torch::Tensor dst = bank ? t[e] : t;
      Result<torch::Tensor> src = ReadWhole(checkpoint, hf[e], dst);
      if (bank && !src.ok() && src.status().code() == Status::Code::kNotFound) {
        KP_ASSIGN_OR_RETURN(const std::vector<std::string> int4, HfNamesOf(name, experts, true));
        src = ReadInt4(checkpoint, {int4[3 * e], int4[3 * e + 1], int4[3 * e + 2]}, dst);
      }
      if (!src.ok()) return src.status();
      copies.push_back({dst, *src});
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(src.to(dst.scalar_type()));
  return Status::Ok();
}

}  // namespace kp::runtime
