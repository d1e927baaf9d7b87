#include "specs/activation_profile.h"

#include <nlohmann/json.hpp>

#include "specs/json_fields.h"

namespace kp {

namespace {

constexpr char kSchema[] = "kimi-plan.activation-profile/1";
// A token's bytes in one layer: far above any layer's (a 1e6-wide hidden in fp32 x 1000 tensors).
constexpr double kMaxBytesPerToken = 4e12;
constexpr int kMaxLayers = 100000;

}  // namespace

Result<ActivationProfile> ParseActivationProfile(const std::string& text) {
  KP_ASSIGN_OR_RETURN(nlohmann::json j, ParseObject(text));
  Fields f(j, "");
  std::string schema;
  KP_RETURN_IF_ERROR(f.String("schema", &schema));
  if (schema != kSchema)
    return Status::InvalidArgument(std::string("schema: must be \"") + kSchema + "\", got \"" + schema + "\"");
  ActivationProfile p;
  KP_RETURN_IF_ERROR(f.String("model", &p.model));
  KP_RETURN_IF_ERROR(f.String("device", &p.device));
  KP_RETURN_IF_ERROR(f.String("dtype", &p.dtype));
  if (p.dtype != "fp32" && p.dtype != "bf16")
    return Status::InvalidArgument("dtype: must be \"fp32\" or \"bf16\", got \"" + p.dtype + "\"");
  KP_RETURN_IF_ERROR(f.Int("tokens", &p.tokens, 1, 1 << 30));
  KP_RETURN_IF_ERROR(f.Number("embedding", &p.embedding, 0, kMaxBytesPerToken));
  KP_RETURN_IF_ERROR(f.Number("head", &p.head, 0, kMaxBytesPerToken));
  KP_RETURN_IF_ERROR(f.Number("backward", &p.backward, 0, kMaxBytesPerToken));
  KP_RETURN_IF_ERROR(f.String("source", &p.source, /*required=*/false));
  KP_ASSIGN_OR_RETURN(const nlohmann::json* layers, f.Array("layers", /*required=*/true));
  if (layers->empty() || layers->size() > kMaxLayers)
    return Status::InvalidArgument("layers: must list 1 to " + std::to_string(kMaxLayers) + " layers");
  for (size_t i = 0; i < layers->size(); ++i) {
    const nlohmann::json& v = (*layers)[i];
    const std::string at = "layers[" + std::to_string(i) + "]";
    if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() <= kMaxBytesPerToken))
      return Status::InvalidArgument(at + ": must be a number of bytes per token from 0 to 4e12");
    p.layers.push_back(v.get<double>());
  }
  KP_RETURN_IF_ERROR(f.NoUnknownKeys());
  return p;
}

std::string ActivationProfileToJson(const ActivationProfile& p) {
  const nlohmann::json j = {{"schema", kSchema}, {"model", p.model},     {"device", p.device},
                            {"dtype", p.dtype},  {"tokens", p.tokens},   {"embedding", p.embedding},
                            {"layers", p.layers}, {"head", p.head},      {"backward", p.backward},
                            {"source", p.source}};
  return j.dump(1) + "\n";
}

}  // namespace kp
