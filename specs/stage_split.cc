#include "specs/stage_split.h"

#include <sstream>

namespace kp {

int StageSplit::StageOfLayer(int layer) const {
  for (int s = 0; s < num_stages(); ++s)
    if (layer >= stages[s].first_layer && layer < stages[s].end_layer) return s;
  return -1;
}

std::string StageSplit::ToString() const {
  std::ostringstream out;
  for (int s = 0; s < num_stages(); ++s) {
    const StageLayers& st = stages[s];
    if (s) out << " | ";
    std::vector<std::string> parts;
    if (st.embedding) parts.push_back("emb");
    if (st.layer_count() == 1) parts.push_back(std::to_string(st.first_layer));
    if (st.layer_count() > 1)
      parts.push_back(std::to_string(st.first_layer) + "-" + std::to_string(st.end_layer - 1));
    if (st.head) parts.push_back("head");
    for (size_t i = 0; i < parts.size(); ++i) out << (i ? "," : "") << parts[i];
  }
  return out.str();
}

namespace {

StageSplit FromCounts(const std::vector<int>& counts) {
  StageSplit split;
  int layer = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    StageLayers st;
    st.first_layer = layer;
    st.end_layer = layer + counts[s];
    st.embedding = s == 0;
    st.head = s + 1 == counts.size();
    layer = st.end_layer;
    split.stages.push_back(st);
  }
  return split;
}

}  // namespace

Result<StageSplit> EvenSplit(int layers, int stages) {
  if (stages < 1) return Status::InvalidArgument("--pp: the number of stages must be at least 1");
  if (stages == 1) return FromCounts({layers});
  const int units = layers + 2;
  if (stages > units)
    return Status::InvalidArgument("--pp/--vp: " + std::to_string(stages) + " stages exceed the " +
                                   std::to_string(units) + " units (embedding + " +
                                   std::to_string(layers) + " layers + head)");
  const int per = units / stages, extra = units % stages;
  std::vector<int> counts;
  int remaining = layers;
  for (int s = 0; s < stages; ++s) {
    int take = per + (s < extra ? 1 : 0);
    if (s == 0 || s == stages - 1) take -= 1;
    take = std::min(take, remaining);
    remaining -= take;
    counts.push_back(take);
  }
  for (int s = 1; s + 1 < stages; ++s)
    if (counts[s] == 0)
      return Status::InvalidArgument("--pp/--vp: the even split of " + std::to_string(layers) +
                                     " layers into " + std::to_string(stages) + " stages leaves stage " +
                                     std::to_string(s) + " empty; give --split explicitly");
  return FromCounts(counts);
}

Result<StageSplit> ParseSplit(const std::string& text, int layers, const std::string& field) {
  std::vector<int> counts;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t pos = 0;
    int v = -1;
    try {
      v = std::stoi(item, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos != item.size() || v < 0)
      return Status::InvalidArgument(field + ": \"" + item + "\" is not a layer count (a non-negative integer)");
    counts.push_back(v);
  }
  if (counts.empty()) return Status::InvalidArgument(field + ": give one layer count per stage");
  int sum = 0;
  for (int c : counts) sum += c;
  if (sum != layers)
    return Status::InvalidArgument(field + ": the counts sum to " + std::to_string(sum) +
                                   " layers, the model has " + std::to_string(layers));
  for (size_t s = 1; s + 1 < counts.size(); ++s)
    if (counts[s] == 0)
      return Status::InvalidArgument(field + ": stage " + std::to_string(s) +
                                     " holds nothing (only the first and last stage may have no layer)");
  return FromCounts(counts);
}

}  // namespace kp
