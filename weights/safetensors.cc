#include "weights/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "common/strict_json.h"

namespace kp {

namespace {

using nlohmann::json;

// The format's bound on the header (the reference reader's).
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeRow {
  TensorDType dtype;
  std::string_view name;
  int bytes;
};
constexpr DTypeRow kDTypes[] = {
    {TensorDType::kF64, "F64", 8},  {TensorDType::kF32, "F32", 4}, {TensorDType::kF16, "F16", 2},
    {TensorDType::kBF16, "BF16", 2}, {TensorDType::kI64, "I64", 8}, {TensorDType::kI32, "I32", 4},
    {TensorDType::kI16, "I16", 2},  {TensorDType::kI8, "I8", 1},   {TensorDType::kU8, "U8", 1},
    {TensorDType::kBool, "BOOL", 1}};

const DTypeRow& RowOf(TensorDType t) {
  for (const DTypeRow& r : kDTypes)
    if (r.dtype == t) return r;
  return kDTypes[0];
}

std::uint64_t ReadU64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string U64Bytes(std::uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// Elements of `shape`, or -1 when a dimension is negative or the count
// passes 2^62 (no real tensor comes near).
std::int64_t Elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    if (d < 0 || (d > 0 && n > (std::int64_t{1} << 62) / d)) return -1;
    n *= d;
  }
  return n;
}

Result<TensorEntry> ParseEntry(const std::string& path, const std::string& name, const json& v) {
  const std::string where = path + ": tensor " + name + ": ";
  if (!v.is_object()) return Status::InvalidArgument(where + "its header entry is not an object");
  for (const auto& [key, value] : v.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      return Status::InvalidArgument(where + "unknown key \"" + key + "\" (allowed: dtype, shape, data_offsets)");
  if (!v.contains("dtype") || !v["dtype"].is_string())
    return Status::InvalidArgument(where + "dtype: missing or not a string");
  TensorEntry e;
  e.name = name;
  Result<TensorDType> dtype = ParseDType(v["dtype"].get<std::string>());
  if (!dtype.ok()) return Status::InvalidArgument(where + dtype.status().message());
  e.dtype = *dtype;
  if (!v.contains("shape") || !v["shape"].is_array())
    return Status::InvalidArgument(where + "shape: missing or not an array");
  for (const json& d : v["shape"]) {
    if (!d.is_number_unsigned()) return Status::InvalidArgument(where + "shape: " + d.dump() + " is not a size");
    e.shape.push_back(d.get<std::int64_t>());
  }
  const json* offsets = v.contains("data_offsets") ? &v["data_offsets"] : nullptr;
  if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    return Status::InvalidArgument(where + "data_offsets: must be [begin, end], two byte offsets");
  e.begin = (*offsets)[0].get<std::uint64_t>();
  e.end = (*offsets)[1].get<std::uint64_t>();
  const std::int64_t n = Elements(e.shape);
  if (e.end < e.begin || n < 0 || e.end - e.begin != static_cast<std::uint64_t>(n) * DTypeBytes(e.dtype))
    return Status::InvalidArgument(where + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                                   "] do not hold its " + std::string(DTypeName(e.dtype)) + " shape " +
                                   v["shape"].dump() + " (" + std::to_string(n < 0 ? 0 : n * DTypeBytes(e.dtype)) +
                                   " bytes)");
  return e;
}

// The buffer indexed entirely, without holes or overlaps.
Status CheckCoverage(const std::string& path, std::vector<TensorEntry>& tensors, std::uint64_t buffer) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t at = 0;
  for (const TensorEntry& e : tensors) {
    if (e.begin != at)
      return Status::InvalidArgument(path + ": tensor " + e.name + ": data_offsets begin at " +
                                     std::to_string(e.begin) + ", where " + std::to_string(at) +
                                     (e.begin < at ? " (overlapping the tensor before)" : " (leaving a hole)") +
                                     " was expected");
    at = e.end;
  }
  if (at > buffer)
    return Status::InvalidArgument(path + ": truncated: the header indexes " + std::to_string(at) +
                                   " bytes of tensors, the file holds " + std::to_string(buffer) +
                                   (tensors.empty() ? "" : " (last tensor: " + tensors.back().name + ")"));
  if (at < buffer)
    return Status::InvalidArgument(path + ": " + std::to_string(buffer - at) +
                                   " bytes after the last tensor that no header entry indexes");
  return Status::Ok();
}

}  // namespace

std::string_view DTypeName(TensorDType t) { return RowOf(t).name; }
int DTypeBytes(TensorDType t) { return RowOf(t).bytes; }

Result<TensorDType> ParseDType(std::string_view name) {
  for (const DTypeRow& r : kDTypes)
    if (r.name == name) return r.dtype;
  return Status::InvalidArgument("dtype \"" + std::string(name) +
                                 "\" is not one of F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL");
}

std::string ShapeText(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::int64_t TensorEntry::numel() const { return Elements(shape); }

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  KP_ASSIGN_OR_RETURN(std::shared_ptr<const ByteSource> bytes, MapFile(path));
  return FromBytes(std::move(bytes), path);
}

Result<SafetensorsFile> SafetensorsFile::FromBytes(std::shared_ptr<const ByteSource> bytes, const std::string& path) {
  const std::uint64_t size = bytes->size();
  if (size < 8)
    return Status::InvalidArgument(path + ": " + std::to_string(size) +
                                   " bytes, too short for a safetensors file (an 8-byte header length first)");
  const std::uint64_t n = ReadU64(bytes->data());
  if (n > kMaxHeaderBytes)
    return Status::InvalidArgument(path + ": a header of " + std::to_string(n) + " bytes, more than the format's " +
                                   std::to_string(kMaxHeaderBytes));
  if (n > size - 8)
    return Status::InvalidArgument(path + ": truncated: the header says " + std::to_string(n) + " bytes, the file has " +
                                   std::to_string(size - 8) + " after its length");
  Result<json> header = ParseStrictJson(std::string_view(bytes->data() + 8, n), /*allow_comments=*/false);
  if (!header.ok()) return Status::InvalidArgument(path + ": header: " + header.status().message());
  if (!header->is_object()) return Status::InvalidArgument(path + ": header: not a JSON object");
  SafetensorsFile f;
  f.bytes_ = std::move(bytes);
  f.path_ = path;
  f.data_start_ = 8 + n;
  for (const auto& [name, value] : header->items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return Status::InvalidArgument(path + ": __metadata__: not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) return Status::InvalidArgument(path + ": __metadata__." + k + ": not a string");
        f.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    KP_ASSIGN_OR_RETURN(TensorEntry e, ParseEntry(path, name, value));
    f.tensors_.push_back(std::move(e));
  }
  KP_RETURN_IF_ERROR(CheckCoverage(path, f.tensors_, size - f.data_start_));
  return f;
}

Result<const TensorEntry*> SafetensorsFile::Find(const std::string& name) const {
  for (const TensorEntry& e : tensors_)
    if (e.name == name) return &e;
  return Status::NotFound(path_ + ": no tensor " + name);
}

std::string_view SafetensorsFile::Bytes(const TensorEntry& e) const {
  return std::string_view(bytes_->data() + data_start_ + e.begin, e.end - e.begin);
}

Result<std::string> EncodeSafetensors(const std::vector<TensorToWrite>& tensors,
                                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t at = 0;
  std::set<std::string> names;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second)
      return Status::InvalidArgument("tensor " + t.name + ": named twice (or the reserved __metadata__)");
    const std::int64_t n = Elements(t.shape);
    if (n < 0 || t.bytes.size() != static_cast<std::uint64_t>(n) * DTypeBytes(t.dtype))
      return Status::InvalidArgument("tensor " + t.name + ": " + std::to_string(t.bytes.size()) +
                                     " bytes do not match its " + std::string(DTypeName(t.dtype)) + " shape");
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes.size()}}};
    at += t.bytes.size();
  }
  std::string text = header.dump();
  // Padded with spaces to 8 bytes, as the reference writer aligns the buffer.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out = U64Bytes(text.size()) + text;
  out.reserve(out.size() + at);
  for (const TensorToWrite& t : tensors) out.append(t.bytes.data(), t.bytes.size());
  return out;
}

Status WriteSafetensors(const FileSystem& fs, const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  Result<std::string> bytes = EncodeSafetensors(tensors, metadata);
  if (!bytes.ok()) return Status::InvalidArgument(path + ": " + bytes.status().message());
  return fs.WriteFile(path, *bytes);
}

}  // namespace kp
