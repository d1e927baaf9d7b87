#include "weights/checkpoint_dir.h"

#include <set>

#include "common/limits.h"
#include "common/strict_json.h"

namespace kp {

namespace {

constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kSingle = "model.safetensors";

// The index's weight_map, checked: every value a plain file name in `dir`.
Result<std::map<std::string, std::string>> ReadIndex(const FileSystem& fs, const std::string& path) {
  KP_ASSIGN_OR_RETURN(const std::string text, fs.ReadFile(path, limits::kMaxSpecFileBytes));
  Result<nlohmann::json> j = ParseStrictJson(text, /*allow_comments=*/false);
  if (!j.ok()) return Status::InvalidArgument(path + ": " + j.status().message());
  if (!j->is_object() || !j->contains("weight_map") || !(*j)["weight_map"].is_object())
    return Status::InvalidArgument(path + ": weight_map: missing or not an object");
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : (*j)["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos || file.get<std::string>().empty())
      return Status::InvalidArgument(path + ": weight_map." + name + ": must name a file in the folder");
    map[name] = file.get<std::string>();
  }
  return map;
}

}  // namespace

Result<CheckpointDir> CheckpointDir::Open(const FileSystem& fs, const std::string& dir) {
  CheckpointDir c;
  c.dir_ = dir;
  const std::string index_path = dir + "/" + kIndex;
  std::map<std::string, std::string> weight_map;
  std::vector<std::string> names;
  if (fs.Exists(index_path)) {
    KP_ASSIGN_OR_RETURN(weight_map, ReadIndex(fs, index_path));
    std::set<std::string> unique;
    for (const auto& [tensor, file] : weight_map)
      if (unique.insert(file).second) names.push_back(file);
  } else if (fs.Exists(dir + "/" + kSingle)) {
    names.push_back(kSingle);
  } else {
    return Status::NotFound(dir + ": neither " + kIndex + " nor " + kSingle + " is there");
  }
  c.files_.reserve(names.size());  // tensors_ points into files_
  for (const std::string& name : names) {
    Result<SafetensorsFile> f = SafetensorsFile::Open(dir + "/" + name);
    if (!f.ok() && f.status().code() == Status::Code::kNotFound && !weight_map.empty())
      return Status::NotFound(f.status().message() + " (a shard " + kIndex + " names)");
    if (!f.ok()) return f.status();
    c.files_.push_back(std::move(*f));
  }
  for (const SafetensorsFile& f : c.files_)
    for (const TensorEntry& e : f.tensors())
      if (!c.tensors_.emplace(e.name, std::make_pair(&f, &e)).second)
        return Status::InvalidArgument(f.path() + ": tensor " + e.name + ": another shard holds it too");
  for (const auto& [tensor, file] : weight_map) {
    const auto it = c.tensors_.find(tensor);
    if (it == c.tensors_.end() || it->second.first->path() != dir + "/" + file)
      return Status::InvalidArgument(index_path + ": " + tensor + ": " + file + " holds no such tensor");
  }
  if (!weight_map.empty() && weight_map.size() != c.tensors_.size())
    for (const auto& [tensor, where] : c.tensors_)
      if (!weight_map.count(tensor))
        return Status::InvalidArgument(where.first->path() + ": tensor " + tensor + ": not in " + kIndex);
  return c;
}

Result<std::pair<const SafetensorsFile*, const TensorEntry*>> CheckpointDir::Find(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) return Status::NotFound(dir_ + ": no tensor " + name);
  return it->second;
}

}  // namespace kp
