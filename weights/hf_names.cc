#include "weights/hf_names.h"

#include <cctype>
#include <optional>
#include <string_view>

namespace kp {

namespace {

// Each row: a Hugging Face name and the runtime's, with {L} a layer and {E}
// an expert. A runtime name ending in "[{E}]" is a bank sliced by expert.
struct NameRow {
  std::string_view hf;
  std::string_view runtime;
};
constexpr NameRow kNameTable[] = {
    {"model.embed_tokens.weight", "embedding.weight"},
    {"model.norm.weight", "head.norm.weight"},
    {"lm_head.weight", "head.lm_head.weight"},
    {"model.layers.{L}.input_layernorm.weight", "layers.{L}.attn_norm.weight"},
    {"model.layers.{L}.post_attention_layernorm.weight", "layers.{L}.ffn_norm.weight"},
    {"model.layers.{L}.self_attn.q_proj.weight", "layers.{L}.attention.q.weight"},
    {"model.layers.{L}.self_attn.q_a_proj.weight", "layers.{L}.attention.q_a.weight"},
    {"model.layers.{L}.self_attn.q_a_layernorm.weight", "layers.{L}.attention.q_norm.weight"},
    {"model.layers.{L}.self_attn.q_b_proj.weight", "layers.{L}.attention.q_b.weight"},
    {"model.layers.{L}.self_attn.kv_a_proj_with_mqa.weight", "layers.{L}.attention.kv_a.weight"},
    {"model.layers.{L}.self_attn.kv_a_layernorm.weight", "layers.{L}.attention.kv_norm.weight"},
    {"model.layers.{L}.self_attn.kv_b_proj.weight", "layers.{L}.attention.kv_b.weight"},
    {"model.layers.{L}.self_attn.o_proj.weight", "layers.{L}.attention.o_proj.weight"},
    {"model.layers.{L}.mlp.gate_proj.weight", "layers.{L}.ffn.gate.weight"},
    {"model.layers.{L}.mlp.up_proj.weight", "layers.{L}.ffn.up.weight"},
    {"model.layers.{L}.mlp.down_proj.weight", "layers.{L}.ffn.down.weight"},
    {"model.layers.{L}.mlp.gate.weight", "layers.{L}.moe.router.weight"},
    {"model.layers.{L}.mlp.gate.e_score_correction_bias", "layers.{L}.moe.router.bias"},
    {"model.layers.{L}.mlp.shared_experts.gate_proj.weight", "layers.{L}.moe.shared.gate.weight"},
    {"model.layers.{L}.mlp.shared_experts.up_proj.weight", "layers.{L}.moe.shared.up.weight"},
    {"model.layers.{L}.mlp.shared_experts.down_proj.weight", "layers.{L}.moe.shared.down.weight"},
    {"model.layers.{L}.mlp.experts.{E}.gate_proj.weight", "layers.{L}.moe.experts.gate[{E}]"},
    {"model.layers.{L}.mlp.experts.{E}.up_proj.weight", "layers.{L}.moe.experts.up[{E}]"},
    {"model.layers.{L}.mlp.experts.{E}.down_proj.weight", "layers.{L}.moe.experts.down[{E}]"},
};

constexpr std::string_view kInt4Suffixes[] = {"_packed", "_scale", "_shape"};

// `name` against `pattern` with {L} and {E} standing for decimal numbers.
std::optional<std::pair<int, int>> Match(std::string_view pattern, std::string_view name) {
  int values[2] = {-1, -1};
  std::size_t p = 0, n = 0;
  while (p < pattern.size()) {
    if (pattern.compare(p, 3, "{L}") == 0 || pattern.compare(p, 3, "{E}") == 0) {
      const int slot = pattern[p + 1] == 'L' ? 0 : 1;
      std::size_t end = n;
      while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
      if (end == n || end - n > 6 || (name[n] == '0' && end - n > 1)) return std::nullopt;
      values[slot] = std::stoi(std::string(name.substr(n, end - n)));
      n = end, p += 3;
    } else {
      if (n >= name.size() || name[n] != pattern[p]) return std::nullopt;
      ++n, ++p;
    }
  }
  if (n != name.size()) return std::nullopt;
  return std::make_pair(values[0], values[1]);
}

std::string Fill(std::string_view pattern, int layer, int expert) {
  std::string out(pattern);
  for (const auto& [key, v] : {std::pair{"{L}", layer}, std::pair{"{E}", expert}})
    for (std::size_t at; (at = out.find(key)) != std::string::npos;) out.replace(at, 3, std::to_string(v));
  return out;
}

}  // namespace

Result<RuntimeTarget> RuntimeTargetOf(const std::string& hf_name) {
  std::string_view name = hf_name;
  HfForm form = HfForm::kWhole;
  for (int i = 0; i < 3; ++i) {
    const std::string suffix = std::string("weight") + std::string(kInt4Suffixes[i]);
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
      form = static_cast<HfForm>(i + 1);
      name = name.substr(0, name.size() - suffix.size() + 6);  // back to "...weight"
    }
  }
  for (const NameRow& row : kNameTable) {
    const auto m = Match(row.hf, name);
    if (!m) continue;
    const bool bank = row.runtime.size() > 5 && row.runtime.substr(row.runtime.size() - 5) == "[{E}]";
    if (form != HfForm::kWhole && !bank) break;  // only routed experts ship as INT4
    RuntimeTarget t;
    t.name = Fill(bank ? row.runtime.substr(0, row.runtime.size() - 5) : row.runtime, m->first, m->second);
    t.expert = bank ? m->second : -1;
    t.form = form;
    return t;
  }
  return Status::NotFound(hf_name + ": not a tensor of a Kimi K2 / DeepSeek-V3 checkpoint");
}

Result<std::vector<std::string>> HfNamesOf(const std::string& runtime_name, int experts, bool int4) {
  for (const NameRow& row : kNameTable) {
    const bool bank = row.runtime.size() > 5 && row.runtime.substr(row.runtime.size() - 5) == "[{E}]";
    const std::string_view pattern = bank ? row.runtime.substr(0, row.runtime.size() - 5) : row.runtime;
    const auto m = Match(pattern, runtime_name);
    if (!m) continue;
    if (!bank) return std::vector<std::string>{Fill(row.hf, m->first, -1)};
    std::vector<std::string> out;
    for (int e = 0; e < experts; ++e) {
      const std::string base = Fill(row.hf, m->first, e);
      if (!int4) {
        out.push_back(base);
        continue;
      }
      for (const std::string_view suffix : kInt4Suffixes) out.push_back(base + std::string(suffix));
    }
    return out;
  }
  return Status::NotFound(runtime_name + ": no Hugging Face name for this runtime tensor");
}

}  // namespace kp
