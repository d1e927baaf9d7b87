#include "specs/activation_profile.h"

#include <nlohmann/json.hpp>

#include "specs/json_fields.h"

namespace kp {

namespace {

constexpr char kSchema[] = "kimi-plan.activation-profile/3";
constexpr char kSchemaWithoutRecompute[] = "kimi-plan.activation-profile/2";
constexpr char kSchemaWithoutTime[] = "kimi-plan.activation-profile/1";
// A piece's time: an hour a micro-batch, or a second a token, is no measurement.
constexpr double kMaxFixedSeconds = 3600;
constexpr double kMaxSecondsPerToken = 1;
// A token's bytes in one layer: far above any layer's (a 1e6-wide hidden in fp32 x 1000 tensors).
constexpr double kMaxBytesPerToken = 4e12;
constexpr int kMaxLayers = 100000;

// One figure per layer, each a number of bytes within the bound.
// `prefix` names the object the list is in ("" at the top).
Result<std::vector<double>> Figures(Fields& f, const char* key, const std::string& prefix = "") {
  KP_ASSIGN_OR_RETURN(const nlohmann::json* list, f.Array(key, /*required=*/true));
  const std::string name = prefix + key;
  if (list->empty() || list->size() > kMaxLayers)
    return Status::InvalidArgument(name + ": must list 1 to " + std::to_string(kMaxLayers) + " layers");
  std::vector<double> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& v = (*list)[i];
    if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() <= kMaxBytesPerToken))
      return Status::InvalidArgument(name + "[" + std::to_string(i) + "]: must be a number of bytes from 0 to 4e12");
    out.push_back(v.get<double>());
  }
  return out;
}

// [fixed seconds, seconds per token], each within its bound.
Result<TimeLine> ParseTimeLine(const nlohmann::json& v, const std::string& field) {
  auto bad = [&] {
    return Status::InvalidArgument(field + ": must be [seconds a micro-batch from 0 to 3600, seconds a token from 0 to 1]");
  };
  if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number()) return bad();
  TimeLine t{v[0].get<double>(), v[1].get<double>()};
  if (!(t.fixed_s >= 0 && t.fixed_s <= kMaxFixedSeconds && t.per_token_s >= 0 && t.per_token_s <= kMaxSecondsPerToken))
    return bad();
  return t;
}

Result<PieceTimes> ParsePieceTimes(const nlohmann::json& j, size_t layers) {
  if (!j.is_object()) return Status::InvalidArgument("time: must be an object");
  PieceTimes t;
  for (const auto& [key, value] : j.items()) {
    const std::string field = "time." + key;
    if (key == "embedding") { KP_ASSIGN_OR_RETURN(t.embedding, ParseTimeLine(value, field)); }
    else if (key == "head") { KP_ASSIGN_OR_RETURN(t.head, ParseTimeLine(value, field)); }
    else if (key == "backward") { KP_ASSIGN_OR_RETURN(t.backward, ParseTimeLine(value, field)); }
    else if (key == "layers") {
      if (!value.is_array() || value.size() != layers)
        return Status::InvalidArgument(field + ": must list " + std::to_string(layers) + " layers, as layers does");
      for (size_t i = 0; i < value.size(); ++i) {
        KP_ASSIGN_OR_RETURN(TimeLine l, ParseTimeLine(value[i], field + "[" + std::to_string(i) + "]"));
        t.layers.push_back(l);
      }
    } else {
      return Status::InvalidArgument(field + ": unknown field");
    }
  }
  if (t.layers.size() != layers)
    return Status::InvalidArgument("time.layers: must list " + std::to_string(layers) + " layers, as layers does");
  return t;
}

nlohmann::json TimeLineJson(const TimeLine& t) { return nlohmann::json::array({t.fixed_s, t.per_token_s}); }

}  // namespace

double PieceTimes::BackwardShare(int l, double tokens) const {
  double forward = embedding.At(tokens) + head.At(tokens);
  for (const TimeLine& t : layers) forward += t.At(tokens);
  if (forward <= 0) return 0;
  const double piece = l < 0 ? embedding.At(tokens) + head.At(tokens) : layers[l].At(tokens);
  return backward.At(tokens) * piece / forward;
}

// "ffn_recomputed": {"layers": [...], "backward": B}, one figure per layer.
Status ParseFfnRecomputed(const nlohmann::json& j, ActivationProfile* p) {
  if (!j.is_object()) return Status::InvalidArgument("ffn_recomputed: must be an object");
  Fields f(j, "ffn_recomputed.");
  KP_ASSIGN_OR_RETURN(p->layers_ffn_recomputed, Figures(f, "layers", "ffn_recomputed."));
  if (p->layers_ffn_recomputed.size() != p->layers.size())
    return Status::InvalidArgument("ffn_recomputed.layers: " + std::to_string(p->layers_ffn_recomputed.size()) +
                                   " figures, but layers has " + std::to_string(p->layers.size()));
  KP_RETURN_IF_ERROR(f.Number("backward", &p->backward_ffn_recomputed, 0, kMaxBytesPerToken));
  return f.NoUnknownKeys();
}

Result<ActivationProfile> ParseActivationProfile(const std::string& text) {
  KP_ASSIGN_OR_RETURN(nlohmann::json j, ParseObject(text));
  Fields f(j, "");
  std::string schema;
  KP_RETURN_IF_ERROR(f.String("schema", &schema));
  if (schema != kSchema && schema != kSchemaWithoutRecompute && schema != kSchemaWithoutTime)
    return Status::InvalidArgument(std::string("schema: must be \"") + kSchema + "\" (or \"" +
                                   kSchemaWithoutRecompute + "\" or \"" + kSchemaWithoutTime + "\"), got \"" + schema +
                                   "\"");
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
  KP_RETURN_IF_ERROR(f.Int("lora_rank", &p.lora_rank, 0, 1 << 20, /*required=*/false));
  KP_ASSIGN_OR_RETURN(p.layers, Figures(f, "layers"));
  KP_ASSIGN_OR_RETURN(p.layers_fixed, Figures(f, "layers_fixed"));
  if (p.layers_fixed.size() != p.layers.size())
    return Status::InvalidArgument("layers_fixed: " + std::to_string(p.layers_fixed.size()) +
                                   " figures, but layers has " + std::to_string(p.layers.size()));
  if (schema == kSchema && j.contains("ffn_recomputed")) {
    KP_RETURN_IF_ERROR(ParseFfnRecomputed(j.at("ffn_recomputed"), &p));
    j.erase("ffn_recomputed");  // read here, not by Fields
  }
  if (schema != kSchemaWithoutTime && j.contains("time")) {
    KP_ASSIGN_OR_RETURN(p.time, ParsePieceTimes(j.at("time"), p.layers.size()));
    j.erase("time");  // read here, not by Fields
  }
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
  nlohmann::json out = j;
  if (p.lora_rank > 0) out["lora_rank"] = p.lora_rank;
  if (!p.layers_ffn_recomputed.empty())
    out["ffn_recomputed"] = {{"layers", p.layers_ffn_recomputed}, {"backward", p.backward_ffn_recomputed}};
  if (p.time) {
    nlohmann::json layers = nlohmann::json::array();
    for (const TimeLine& t : p.time->layers) layers.push_back(TimeLineJson(t));
    out["time"] = {{"embedding", TimeLineJson(p.time->embedding)}, {"layers", layers},
                   {"head", TimeLineJson(p.time->head)}, {"backward", TimeLineJson(p.time->backward)}};
  }
  return out.dump(1) + "\n";
}

}  // namespace kp
