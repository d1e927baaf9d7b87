#include "specs/activation_profile.h"

#include <nlohmann/json.hpp>

#include "specs/json_fields.h"

namespace kp {

namespace {

constexpr char kSchema[] = "kimi-plan.activation-profile/1";
// A token's bytes in one layer: far above any layer's (a 1e6-wide hidden in fp32 x 1000 tensors).
constexpr double kMaxBytesPerToken = 4e12;
constexpr int kMaxLayers = 100000;

// One figure per layer, each a number of bytes within the bound.
Result<std::vector<double>> Figures(Fields& f, const char* key) {
  KP_ASSIGN_OR_RETURN(const nlohmann::json* list, f.Array(key, /*required=*/true));
  if (list->empty() || list->size() > kMaxLayers)
    return Status::InvalidArgument(std::string(key) + ": must list 1 to " + std::to_string(kMaxLayers) + " layers");
  std::vector<double> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& v = (*list)[i];
    if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() <= kMaxBytesPerToken))
      return Status::InvalidArgument(std::string(key) + "[" + std::to_string(i) +
                                     "]: must be a number of bytes from 0 to 4e12");
    out.push_back(v.get<double>());
  }
  return out;
}

}  // namespace

Result<ActivationProfile> ParseActivationProfile(const std::string& text) {
  KP_ASSIGN_OR_RETURN(nlohmann::json j, ParseObject(text));
  Fields f(j, "");
  std::string schema;
  KP_RETURN_IF_ERROR(f.String("schema", &schema));
  if (schema != kSchema)
    return Status::InvalidArgument(std::string("schema: must be \"") + kSchema + "\", got \"" + schema + "\"");
  ActivationProfile p;
  KP_RETURN_IF_ERROR(f.Name("model", &p.model));
  KP_RETURN_IF_ERROR(f.Name("device", &p.device));
  KP_RETURN_IF_ERROR(f.Name("dtype", &p.dtype));
  if (p.dtype != "fp32" && p.dtype != "bf16")
    return Status::InvalidArgument("dtype: must be \"fp32\" or \"bf16\", got \"" + p.dtype + "\"");
  KP_RETURN_IF_ERROR(f.Int("seq_len", &p.seq_len, 1, 1 << 30));
  KP_RETURN_IF_ERROR(f.Int("tokens", &p.tokens, 1, 1 << 30));
  if (p.tokens % p.seq_len != 0)
    return Status::InvalidArgument("tokens: " + std::to_string(p.tokens) + " is not a whole number of " +
                                   std::to_string(p.seq_len) + "-token sequences");
  KP_RETURN_IF_ERROR(f.Number("embedding", &p.embedding, 0, kMaxBytesPerToken));
  KP_RETURN_IF_ERROR(f.Number("head", &p.head, 0, kMaxBytesPerToken));
  KP_RETURN_IF_ERROR(f.Number("head_fixed", &p.head_fixed, 0, kMaxBytesPerToken));
  KP_RETURN_IF_ERROR(f.Number("backward", &p.backward, 0, kMaxBytesPerToken));
  KP_RETURN_IF_ERROR(f.Text("source", &p.source, /*required=*/false));
  KP_ASSIGN_OR_RETURN(p.layers, Figures(f, "layers"));
  KP_ASSIGN_OR_RETURN(p.layers_fixed, Figures(f, "layers_fixed"));
  if (p.layers_fixed.size() != p.layers.size())
    return Status::InvalidArgument("layers_fixed: " + std::to_string(p.layers_fixed.size()) +
                                   " figures, but layers has " + std::to_string(p.layers.size()));
  KP_RETURN_IF_ERROR(f.NoUnknownKeys());
  return p;
}

std::string ActivationProfileToJson(const ActivationProfile& p) {
  const nlohmann::json j = {{"schema", kSchema},
                            {"model", p.model},
                            {"device", p.device},
                            {"dtype", p.dtype},
                            {"seq_len", p.seq_len},
                            {"tokens", p.tokens},
                            {"embedding", p.embedding},
                            {"layers", p.layers},
                            {"layers_fixed", p.layers_fixed},
                            {"head", p.head},
                            {"head_fixed", p.head_fixed},
                            {"backward", p.backward},
                            {"source", p.source}};
  return j.dump(1) + "\n";
}

}  // namespace kp
