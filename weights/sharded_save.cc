#include "weights/sharded_save.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "common/limits.h"
#include "common/strict_json.h"

namespace kp {

namespace {

using nlohmann::json;

constexpr const char* kPiecesKey = "kimi-plan-pieces";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kLatest = "latest";

std::int64_t Elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

json BoxJson(const PieceBox& b) {
  return json{{"whole", b.whole}, {"offset", b.offset}, {"shape", b.shape},
              {"begin", b.begin}, {"end", b.end},       {"step", b.step}};
}

Result<std::vector<std::int64_t>> Sizes(const json& v, const std::string& where, const char* field) {
  if (!v.contains(field) || !v[field].is_array())
    return Status::InvalidArgument(where + ": " + field + ": missing or not an array");
  std::vector<std::int64_t> out;
  for (const json& d : v[field]) {
    if (!d.is_number_unsigned()) return Status::InvalidArgument(where + ": " + field + ": " + d.dump() + " is not a size");
    out.push_back(d.get<std::int64_t>());
  }
  return out;
}

Result<std::int64_t> Count(const json& v, const std::string& where, const char* field) {
  if (!v.contains(field) || !v[field].is_number_unsigned())
    return Status::InvalidArgument(where + ": " + field + ": missing or not a count");
  return v[field].get<std::int64_t>();
}

// A box inside its tensor and a flat range inside its box: what every
// reader below relies on.
Status CheckBox(const PieceBox& b, const std::string& where) {
  if (b.offset.size() != b.whole.size() || b.shape.size() != b.whole.size())
    return Status::InvalidArgument(where + ": offset, shape and whole differ in rank");
  for (std::size_t d = 0; d < b.whole.size(); ++d)
    if (b.shape[d] < 0 || b.offset[d] < 0 || b.offset[d] + b.shape[d] > b.whole[d])
      return Status::InvalidArgument(where + ": the box at " + ShapeText(b.offset) + " of shape " + ShapeText(b.shape) +
                                     " is not inside " + ShapeText(b.whole));
  if (b.begin < 0 || b.begin > b.end || b.end > Elements(b.shape))
    return Status::InvalidArgument(where + ": the range [" + std::to_string(b.begin) + ", " + std::to_string(b.end) +
                                   ") is not inside the box's " + std::to_string(Elements(b.shape)) + " elements");
  return Status::Ok();
}

Result<PieceBox> ParseBox(const json& v, const std::string& where) {
  if (!v.is_object()) return Status::InvalidArgument(where + ": not an object");
  PieceBox b;
  KP_ASSIGN_OR_RETURN(b.whole, Sizes(v, where, "whole"));
  KP_ASSIGN_OR_RETURN(b.offset, Sizes(v, where, "offset"));
  KP_ASSIGN_OR_RETURN(b.shape, Sizes(v, where, "shape"));
  KP_ASSIGN_OR_RETURN(b.begin, Count(v, where, "begin"));
  KP_ASSIGN_OR_RETURN(b.end, Count(v, where, "end"));
  KP_ASSIGN_OR_RETURN(b.step, Count(v, where, "step"));
  KP_RETURN_IF_ERROR(CheckBox(b, where));
  return b;
}

// The row-major flat index of `index` in `shape`.
std::int64_t Ravel(const std::vector<std::int64_t>& index, const std::vector<std::int64_t>& shape) {
  std::int64_t f = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + index[d];
  return f;
}

bool Overlaps(const PieceBox& b, const std::vector<std::int64_t>& offset, const std::vector<std::int64_t>& shape) {
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (b.offset[d] >= offset[d] + shape[d] || offset[d] >= b.offset[d] + b.shape[d]) return false;
  return true;
}

// Copies the stored elements of `b` (bytes `src`, its flat range) that fall
// inside the target box into `out` (the target's row-major bytes) and counts
// each in `covered`. A row of the box's last dimension at a time: the
// stored range cuts at most its first and last row.
void CopyOverlap(const PieceBox& b, const char* src, int elem, const std::vector<std::int64_t>& offset,
                 const std::vector<std::int64_t>& shape, char* out, std::vector<std::uint8_t>& covered) {
  const std::size_t rank = shape.size();
  const std::int64_t row = rank == 0 ? 1 : b.shape.back();
  if (row == 0) return;
  const std::int64_t last_off = rank == 0 ? 0 : b.offset.back();
  const std::int64_t t_lo = rank == 0 ? 0 : offset.back(), t_hi = rank == 0 ? 1 : offset.back() + shape.back();
  std::vector<std::int64_t> index(rank, 0), target(rank, 0);
  for (std::int64_t r = b.begin / row; r * row < b.end; ++r) {
    // The row's place in the box, then in the target.
    std::int64_t rest = r;
    bool inside = true;
    for (std::size_t k = rank; k-- > 1;) {
      const std::size_t d = k - 1;
      index[d] = rest % b.shape[d];
      rest /= b.shape[d];
      target[d] = b.offset[d] + index[d] - offset[d];
      inside = inside && target[d] >= 0 && target[d] < shape[d];
    }
    if (!inside) continue;
    const std::int64_t c0 = std::max(b.begin - r * row, std::int64_t{0}), c1 = std::min(b.end - r * row, row);
    const std::int64_t g0 = std::max(last_off + c0, t_lo), g1 = std::min(last_off + c1, t_hi);
    if (g0 >= g1) continue;
    if (rank > 0) target[rank - 1] = g0 - t_lo;
    const std::int64_t at = Ravel(target, shape);
    const std::int64_t from = r * row + (g0 - last_off) - b.begin;
    std::memcpy(out + at * elem, src + from * elem, static_cast<std::size_t>((g1 - g0) * elem));
    for (std::int64_t i = 0; i < g1 - g0; ++i)
      if (covered[at + i] < 2) ++covered[at + i];
  }
}

// The first element of `shape` covered other than once, as "[i, j]".
std::string IndexText(std::int64_t flat, const std::vector<std::int64_t>& offset,
                      const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = offset[d] + flat % shape[d];
    flat /= shape[d];
  }
  return ShapeText(index);
}

Result<std::string> ReadSmall(const FileSystem& fs, const std::string& path) {
  return fs.ReadFile(path, limits::kMaxSpecFileBytes);
}

}  // namespace

std::string StepFolder(const std::string& dir, int step) { return dir + "/step-" + std::to_string(step); }

Status WriteRankFile(const FileSystem& fs, const std::string& path, const std::vector<PieceToWrite>& pieces) {
  json meta = json::object();
  std::vector<TensorToWrite> tensors;
  tensors.reserve(pieces.size());
  for (const PieceToWrite& p : pieces) {
    KP_RETURN_IF_ERROR(CheckBox(p.box, path + ": piece " + p.key));
    meta[p.key] = BoxJson(p.box);
    tensors.push_back({p.key, p.dtype, {p.box.end - p.box.begin}, p.bytes});
  }
  return WriteSafetensors(fs, path, tensors, {{"format", "pt"}, {kPiecesKey, meta.dump()}});
}

Status CommitSave(const FileSystem& fs, const std::string& dir, const SaveManifest& m) {
  json files = json::array();
  for (int r = 0; r < m.world; ++r) files.push_back("rank-" + std::to_string(r) + ".safetensors");
  json manifest{{"format", kShardedSaveFormat}, {"step", m.step},   {"world", m.world},
                {"layout", m.layout},           {"shape", m.shape}, {"files", files}};
  if (!m.model.empty()) manifest["model"] = m.model;
  const std::string folder = StepFolder(dir, m.step);
  KP_RETURN_IF_ERROR(fs.WriteFile(folder + "/" + kManifest, manifest.dump(2) + "\n"));
  return fs.WriteFile(dir + "/" + kLatest, "step-" + std::to_string(m.step) + "\n");
}

Result<ShardedSave> ShardedSave::Open(const FileSystem& fs, const std::string& dir) {
  ShardedSave s;
  s.folder_ = dir;
  if (!fs.Exists(dir + "/" + kManifest)) {
    if (!fs.Exists(dir + "/" + kLatest))
      return Status::NotFound(dir + ": neither " + kManifest + " nor " + kLatest +
                              " is there (not a save, or a save that never completed)");
    KP_ASSIGN_OR_RETURN(std::string latest, ReadSmall(fs, dir + "/" + kLatest));
    while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ')) latest.pop_back();
    if (latest.empty() || latest.find('/') != std::string::npos || latest == "." || latest == "..")
      return Status::InvalidArgument(dir + "/" + kLatest + ": \"" + latest + "\" is not a step folder's name");
    s.folder_ = dir + "/" + latest;
    if (!fs.Exists(s.folder_ + "/" + kManifest))
      return Status::NotFound(s.folder_ + ": no " + kManifest + " (the save never completed)");
  }
  const std::string manifest_path = s.folder_ + "/" + kManifest;
  KP_ASSIGN_OR_RETURN(const std::string text, ReadSmall(fs, manifest_path));
  Result<json> parsed = ParseStrictJson(text, false);
  if (!parsed.ok()) return Status::InvalidArgument(manifest_path + ": " + parsed.status().message());
  const json& m = *parsed;
  if (!m.is_object() || !m.contains("format") || m["format"] != kShardedSaveFormat)
    return Status::InvalidArgument(manifest_path + ": format: must be " + std::to_string(kShardedSaveFormat) +
                                   " (a kimi-plan save of this version)");
  if (!m.contains("step") || !m["step"].is_number_unsigned() || !m.contains("world") ||
      !m["world"].is_number_unsigned() || m["world"].get<std::int64_t>() < 1 ||
      m["world"].get<std::int64_t>() > limits::kMaxClusterGpus || !m.contains("files") || !m["files"].is_array() ||
      m["files"].size() != m["world"].get<std::size_t>() || !m.contains("shape") || !m["shape"].is_string() ||
      !m.contains("layout") || !m["layout"].is_string())
    return Status::InvalidArgument(manifest_path +
                                   ": needs step, world (1.." + std::to_string(limits::kMaxClusterGpus) +
                                   "), layout, shape and one file per rank");
  s.manifest_ = {m["step"].get<int>(), m["world"].get<int>(), m["layout"].get<std::string>(),
                 m["shape"].get<std::string>(),
                 m.contains("model") && m["model"].is_string() ? m["model"].get<std::string>() : ""};
  s.files_.reserve(m["files"].size());  // pieces_ points into files_
  for (const json& f : m["files"]) {
    if (!f.is_string() || f.get<std::string>().find('/') != std::string::npos)
      return Status::InvalidArgument(manifest_path + ": files: " + f.dump() + " is not a file name of the folder");
    KP_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(s.folder_ + "/" + f.get<std::string>()));
    s.files_.push_back(std::move(file));
  }
  for (const SafetensorsFile& f : s.files_) {
    const auto meta = f.metadata().find(kPiecesKey);
    if (meta == f.metadata().end())
      return Status::InvalidArgument(f.path() + ": no " + std::string(kPiecesKey) + " in its metadata");
    Result<json> boxes = ParseStrictJson(meta->second, false);
    if (!boxes.ok() || !boxes->is_object())
      return Status::InvalidArgument(f.path() + ": " + kPiecesKey + " is not a JSON object");
    for (const TensorEntry& e : f.tensors()) {
      const std::string where = f.path() + ": piece " + e.name;
      if (!boxes->contains(e.name)) return Status::InvalidArgument(where + ": not in " + kPiecesKey);
      KP_ASSIGN_OR_RETURN(PieceBox box, ParseBox((*boxes)[e.name], where));
      if (e.numel() != box.end - box.begin)
        return Status::InvalidArgument(where + ": " + std::to_string(e.numel()) + " elements stored, its range holds " +
                                       std::to_string(box.end - box.begin));
      std::vector<Piece>& same = s.pieces_[e.name];
      if (!same.empty() && (same.front().box.whole != box.whole || same.front().entry->dtype != e.dtype))
        return Status::InvalidArgument(where + ": " + std::string(DTypeName(e.dtype)) + " " + ShapeText(box.whole) +
                                       ", where " + same.front().file->path() + " has " +
                                       std::string(DTypeName(same.front().entry->dtype)) + " " +
                                       ShapeText(same.front().box.whole));
      same.push_back({&f, &e, std::move(box)});
    }
  }
  return s;
}

Result<ShardedSave::Filled> ShardedSave::Fill(const std::string& key, const std::vector<std::int64_t>& offset,
                                              const std::vector<std::int64_t>& shape) const {
  const auto found = pieces_.find(key);
  if (found == pieces_.end()) return Status::NotFound(folder_ + ": no piece of " + key);
  const std::vector<std::int64_t>& whole = found->second.front().box.whole;
  PieceBox want{whole, offset, shape, 0, Elements(shape), 0};
  Status fits = CheckBox(want, folder_ + ": " + key);
  if (!fits.ok())
    return Status::InvalidArgument(folder_ + ": " + key + ": the model wants " + ShapeText(shape) + " at " +
                                   ShapeText(offset) + " of a tensor saved as " + ShapeText(whole));
  Filled out;
  out.dtype = found->second.front().entry->dtype;
  const int elem = DTypeBytes(out.dtype);
  const std::int64_t n = Elements(shape);
  out.bytes.assign(static_cast<std::size_t>(n * elem), '\0');
  std::vector<std::uint8_t> covered(static_cast<std::size_t>(n), 0);
  for (const Piece& p : found->second) {
    if (!Overlaps(p.box, offset, shape)) continue;
    CopyOverlap(p.box, p.file->Bytes(*p.entry).data(), elem, offset, shape, out.bytes.data(), covered);
    out.step = std::max(out.step, p.box.step);
  }
  for (std::int64_t i = 0; i < n; ++i)
    if (covered[i] != 1)
      return Status::InvalidArgument(folder_ + ": " + key + ": element " + IndexText(i, offset, shape) +
                                     (covered[i] == 0 ? " is in no piece" : " is in two pieces"));
  return out;
}

}  // namespace kp
