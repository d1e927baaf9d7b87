#include "specs/presets.h"

#include <algorithm>
#include <cctype>
#include <set>

#include <nlohmann/json.hpp>

#include "common/limits.h"
#include "specs/hf_config.h"
#include "specs/json_fields.h"

#ifndef KIMI_PLAN_PRESET_DIR
#define KIMI_PLAN_PRESET_DIR "presets"
#endif

namespace kp {

using nlohmann::json;

std::string DefaultPresetDir() { return KIMI_PLAN_PRESET_DIR; }

namespace {

Result<std::vector<AttentionKind>> ParseKinds(const json& j, const std::string& field) {
  if (!j.is_array()) return Status::InvalidArgument(field + ": must be a list of \"mha\", \"mla\" or \"kda\"");
  std::vector<AttentionKind> out;
  for (const json& e : j) {
    const std::string s = e.is_string() ? e.get<std::string>() : "";
    if (s == "mha") out.push_back(AttentionKind::kMha);
    else if (s == "mla") out.push_back(AttentionKind::kMla);
    else if (s == "kda") out.push_back(AttentionKind::kKda);
    else return Status::InvalidArgument(field + ": entries must be \"mha\", \"mla\" or \"kda\"");
  }
  return out;
}

Status ParseAttention(const json& j, ModelSpec* m) {
  std::vector<AttentionKind> pattern, tail;
  if (!j.contains("pattern")) return Status::InvalidArgument("attention.pattern: required field is missing");
  KP_ASSIGN_OR_RETURN(pattern, ParseKinds(j.at("pattern"), "attention.pattern"));
  if (j.contains("tail")) {
    KP_ASSIGN_OR_RETURN(tail, ParseKinds(j.at("tail"), "attention.tail"));
  }
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "pattern" && it.key() != "tail")
      return Status::InvalidArgument("attention." + it.key() + ": unknown field");
  KP_ASSIGN_OR_RETURN(m->attention, ExpandAttentionPattern(m->layers, pattern, tail));
  return Status::Ok();
}

Status ParseRope(Fields& f, RopeSpec* rope) {
  const json* r = nullptr;
  KP_ASSIGN_OR_RETURN(r, f.Object("rope"));
  if (!r) return Status::Ok();
  Fields g(*r, "rope");
  KP_RETURN_IF_ERROR(g.Number("theta", &rope->theta, 1.000001, 1e8, false));
  KP_RETURN_IF_ERROR(g.Bool("interleaved", &rope->interleaved));
  const json* y = nullptr;
  KP_ASSIGN_OR_RETURN(y, g.Object("yarn"));
  if (y) {
    Fields h(*y, "rope.yarn");
    KP_RETURN_IF_ERROR(ReadYarnFields(h, "original_max_positions", &rope->yarn));
    KP_RETURN_IF_ERROR(h.NoUnknownKeys());
  }
  return g.NoUnknownKeys();
}

Status ParseModelObject(const json& j, ModelSpec* m) {
  Fields f(j, "");
  KP_RETURN_IF_ERROR(f.Name("name", &m->name));
  KP_RETURN_IF_ERROR(f.Int("layers", &m->layers, 1, limits::kMaxLayers));
  KP_RETURN_IF_ERROR(f.Int("hidden", &m->hidden, 1, limits::kMaxHidden));
  KP_RETURN_IF_ERROR(f.Int("heads", &m->heads, 1, limits::kMaxHeads));
  KP_RETURN_IF_ERROR(f.Int("head_dim", &m->head_dim, 0, limits::kMaxHidden, false));
  m->kv_heads = m->heads;
  KP_RETURN_IF_ERROR(f.Int("kv_heads", &m->kv_heads, 0, limits::kMaxHeads, false));
  KP_RETURN_IF_ERROR(f.Int("vocab", &m->vocab, 1, limits::kMaxVocab));
  KP_RETURN_IF_ERROR(f.Int("dense_layers", &m->dense_layers, 0, limits::kMaxLayers, false));
  KP_RETURN_IF_ERROR(f.Int("dense_ffn", &m->dense_ffn, 0, limits::kMaxFfn, false));
  KP_RETURN_IF_ERROR(f.Bool("tied_embeddings", &m->tied_embeddings));
  KP_RETURN_IF_ERROR(f.Bool("gated_ffn", &m->gated_ffn));
  KP_RETURN_IF_ERROR(f.Bool("dropout", &m->dropout));
  KP_RETURN_IF_ERROR(f.Int("attn_res_block", &m->attn_res_block, 0, limits::kMaxLayers, false));
  KP_RETURN_IF_ERROR(f.Int("mtp_layers", &m->mtp_layers, 0, 16, false));
  std::string ignored;
  KP_RETURN_IF_ERROR(f.Text("source", &ignored, false));
  KP_RETURN_IF_ERROR(f.Text("notes", &ignored, false));
  if (m->layers <= 0) return Status::InvalidArgument("layers: must be a positive integer, got " + std::to_string(m->layers));

  const json* att = nullptr;
  KP_ASSIGN_OR_RETURN(att, f.Object("attention", true));
  KP_RETURN_IF_ERROR(ParseAttention(*att, m));

  const json* mla = nullptr;
  KP_ASSIGN_OR_RETURN(mla, f.Object("mla"));
  if (mla) {
    Fields g(*mla, "mla");
    KP_RETURN_IF_ERROR(g.Int("q_lora_rank", &m->mla.q_lora_rank, 0, limits::kMaxHidden));
    KP_RETURN_IF_ERROR(g.Int("kv_lora_rank", &m->mla.kv_lora_rank, 0, limits::kMaxHidden));
    KP_RETURN_IF_ERROR(g.Int("qk_nope_head_dim", &m->mla.qk_nope_head_dim, 0, limits::kMaxHidden));
    KP_RETURN_IF_ERROR(g.Int("qk_rope_head_dim", &m->mla.qk_rope_head_dim, 0, limits::kMaxHidden));
    KP_RETURN_IF_ERROR(g.Int("v_head_dim", &m->mla.v_head_dim, 0, limits::kMaxHidden));
    KP_RETURN_IF_ERROR(g.Bool("output_gate", &m->mla.output_gate));
    KP_RETURN_IF_ERROR(g.NoUnknownKeys());
  }
  const json* kda = nullptr;
  KP_ASSIGN_OR_RETURN(kda, f.Object("kda"));
  if (kda) {
    Fields g(*kda, "kda");
    KP_RETURN_IF_ERROR(g.Int("head_dim_k", &m->kda.head_dim_k, 0, limits::kMaxHidden));
    KP_RETURN_IF_ERROR(g.Int("head_dim_v", &m->kda.head_dim_v, 0, limits::kMaxHidden));
    KP_RETURN_IF_ERROR(g.Int("conv_kernel", &m->kda.conv_kernel, 0, 1024, false));
    KP_RETURN_IF_ERROR(g.NoUnknownKeys());
  }
  const json* moe = nullptr;
  KP_ASSIGN_OR_RETURN(moe, f.Object("moe"));
  if (moe) {
    Fields g(*moe, "moe");
    KP_RETURN_IF_ERROR(g.Int("num_experts", &m->moe.num_experts, 0, limits::kMaxExperts));
    KP_RETURN_IF_ERROR(g.Int("top_k", &m->moe.top_k, 0, limits::kMaxExperts));
    KP_RETURN_IF_ERROR(g.Int("expert_ffn", &m->moe.expert_ffn, 0, limits::kMaxFfn));
    KP_RETURN_IF_ERROR(g.Int("shared_experts", &m->moe.shared_experts, 0, limits::kMaxExperts, false));
    m->moe.shared_ffn = m->moe.expert_ffn;
    KP_RETURN_IF_ERROR(g.Int("shared_ffn", &m->moe.shared_ffn, 0, limits::kMaxFfn, false));
    KP_RETURN_IF_ERROR(g.Int("latent_dim", &m->moe.latent_dim, 0, limits::kMaxHidden, false));
    KP_RETURN_IF_ERROR(g.Number("route_scale", &m->moe.route_scale, 1e-6, 1e6, false));
    KP_RETURN_IF_ERROR(g.Int("groups", &m->moe.groups, 1, limits::kMaxExperts, false));
    KP_RETURN_IF_ERROR(g.Int("topk_groups", &m->moe.topk_groups, 1, limits::kMaxExperts, false));
    KP_RETURN_IF_ERROR(g.NoUnknownKeys());
  }
  KP_RETURN_IF_ERROR(ParseRope(f, &m->rope));
  KP_RETURN_IF_ERROR(f.Number("norm_eps", &m->norm_eps, 1e-12, 0.5, false));
  const json* storage = nullptr;
  KP_ASSIGN_OR_RETURN(storage, f.Object("storage"));
  if (storage) {
    Fields g(*storage, "storage");
    KP_RETURN_IF_ERROR(g.Int("routed_expert_bits", &m->storage.routed_expert_bits, 0, 64, false));
    KP_RETURN_IF_ERROR(g.Int("quant_group_size", &m->storage.quant_group_size, 0, limits::kMaxHidden, false));
    KP_RETURN_IF_ERROR(g.NoUnknownKeys());
  }
  KP_RETURN_IF_ERROR(f.NoUnknownKeys());
  return m->Validate();
}

Status ParseGpuObject(const json& j, GpuSpec* g) {
  Fields f(j, "");
  double memory_gb = 0, bf16 = 0, fp16 = 0, fp8 = 0, hbm = 0, nvlink = 0, nic = 0, front = 0;
  KP_RETURN_IF_ERROR(f.Name("name", &g->name));
  KP_RETURN_IF_ERROR(f.Name("arch", &g->arch, /*required=*/false));
  if (!g->arch.empty() && g->arch != "ampere" && g->arch != "hopper" && g->arch != "blackwell")
    return Status::InvalidArgument("arch: must be ampere, hopper or blackwell, got \"" + g->arch + "\"");
  KP_RETURN_IF_ERROR(f.Number("memory_gb", &memory_gb, 0, limits::kMaxGpuMemoryGb));
  KP_RETURN_IF_ERROR(f.Number("bf16_tflops", &bf16, 0, limits::kMaxTflops));
  KP_RETURN_IF_ERROR(f.Number("fp16_tflops", &fp16, 0, limits::kMaxTflops));
  KP_RETURN_IF_ERROR(f.Number("fp8_tflops", &fp8, 0, limits::kMaxTflops));
  KP_RETURN_IF_ERROR(f.Number("hbm_gbytes_per_s", &hbm, 0, limits::kMaxBandwidth));
  KP_RETURN_IF_ERROR(f.Number("nvlink_gbytes_per_s", &nvlink, 0, limits::kMaxBandwidth));
  KP_RETURN_IF_ERROR(f.Int("gpus_per_node", &g->gpus_per_node, 0, limits::kMaxGpusPerNode));
  KP_RETURN_IF_ERROR(f.Int("nvlink_domain", &g->nvlink_domain, 0, limits::kMaxGpusPerNode, false));
  KP_RETURN_IF_ERROR(f.Int("nics_per_node", &g->nics_per_node, 0, 1024));
  KP_RETURN_IF_ERROR(f.Number("nic_gbits_per_s", &nic, 0, limits::kMaxBandwidth));
  KP_RETURN_IF_ERROR(f.Number("frontend_gbits_per_s", &front, 0, limits::kMaxBandwidth));
  KP_RETURN_IF_ERROR(f.Text("source", &g->source));
  KP_RETURN_IF_ERROR(f.NoUnknownKeys());
  g->memory = GB(memory_gb);
  g->bf16 = TFLOPS(bf16);
  g->fp16 = TFLOPS(fp16);
  g->fp8 = TFLOPS(fp8);
  g->hbm = GBps(hbm);
  g->nvlink = GBps(nvlink);
  g->nic = Gbps(nic);
  g->frontend = Gbps(front);
  return g->Validate();
}

Status ParseTopologyObject(const json& j, TopologySpec* t) {
  Fields f(j, "");
  KP_RETURN_IF_ERROR(f.Name("name", &t->name));
  KP_RETURN_IF_ERROR(f.Name("model", &t->model));
  KP_RETURN_IF_ERROR(f.Name("gpu", &t->gpu));
  KP_RETURN_IF_ERROR(f.Int("nodes", &t->nodes, 1, limits::kMaxNodes));
  KP_RETURN_IF_ERROR(f.Int("gpus_per_node", &t->gpus_per_node, 1, limits::kMaxGpusPerNode));
  KP_RETURN_IF_ERROR(f.Name("mode", &t->mode));
  KP_RETURN_IF_ERROR(f.Int("lora_rank", &t->lora_rank, 0, limits::kMaxHidden, false));
  KP_RETURN_IF_ERROR(f.Text("use", &t->use, false));
  std::string ignored;
  KP_RETURN_IF_ERROR(f.Text("source", &ignored, false));
  const json* actor = nullptr;
  KP_ASSIGN_OR_RETURN(actor, f.Object("actor", true));
  {
    Fields a(*actor, "actor");
    KP_RETURN_IF_ERROR(a.Int("tp", &t->actor_tp, 1, limits::kMaxClusterGpus));
    KP_RETURN_IF_ERROR(a.Int("pp", &t->actor_pp, 1, limits::kMaxClusterGpus));
    KP_RETURN_IF_ERROR(a.Int("ep", &t->actor_ep, 1, limits::kMaxClusterGpus));
    KP_RETURN_IF_ERROR(a.Int("etp", &t->actor_etp, 1, limits::kMaxClusterGpus));
    KP_RETURN_IF_ERROR(a.Int("cp", &t->actor_cp, 1, limits::kMaxClusterGpus));
    KP_RETURN_IF_ERROR(a.NoUnknownKeys());
  }
  const json* rollout = nullptr;
  KP_ASSIGN_OR_RETURN(rollout, f.Object("rollout", true));
  {
    Fields r(*rollout, "rollout");
    KP_RETURN_IF_ERROR(r.Int("tp", &t->rollout_tp, 1, limits::kMaxClusterGpus));
    KP_RETURN_IF_ERROR(r.Int("ep", &t->rollout_ep, 1, limits::kMaxClusterGpus));
    KP_RETURN_IF_ERROR(r.Int("n", &t->rollout_n, 1, limits::kMaxBatch));
    KP_RETURN_IF_ERROR(r.NoUnknownKeys());
  }
  const json* lengths = nullptr;
  KP_ASSIGN_OR_RETURN(lengths, f.Object("lengths", true));
  {
    Fields l(*lengths, "lengths");
    KP_RETURN_IF_ERROR(l.Int("prompt", &t->prompt_length, 1, limits::kMaxSequence));
    KP_RETURN_IF_ERROR(l.Int("response", &t->response_length, 1, limits::kMaxSequence));
    KP_RETURN_IF_ERROR(l.NoUnknownKeys());
  }
  KP_RETURN_IF_ERROR(f.NoUnknownKeys());
  if (t->mode != "full" && t->mode != "lora")
    return Status::InvalidArgument("mode: must be \"full\" or \"lora\", got \"" + t->mode + "\"");
  if (t->mode == "lora" && t->lora_rank <= 0)
    return Status::InvalidArgument("lora_rank: must be a positive integer in lora mode");
  for (auto [field, v] : {std::pair{"nodes", t->nodes}, {"gpus_per_node", t->gpus_per_node},
                          {"actor.tp", t->actor_tp}, {"actor.pp", t->actor_pp}, {"actor.ep", t->actor_ep},
                          {"actor.etp", t->actor_etp}, {"actor.cp", t->actor_cp},
                          {"rollout.tp", t->rollout_tp}, {"rollout.ep", t->rollout_ep},
                          {"rollout.n", t->rollout_n}, {"lengths.prompt", t->prompt_length},
                          {"lengths.response", t->response_length}})
    if (v <= 0)
      return Status::InvalidArgument(std::string(field) + ": must be a positive integer, got " + std::to_string(v));
  return Status::Ok();
}

template <typename T, typename Parser>
Result<T> ParseWith(const std::string& text, Parser parse) {
  KP_ASSIGN_OR_RETURN(json j, ParseObject(text));
  T out;
  KP_RETURN_IF_ERROR(parse(j, &out));
  return out;
}

}  // namespace

Result<ModelSpec> ParseModelSpec(const std::string& t) { return ParseWith<ModelSpec>(t, ParseModelObject); }
Result<GpuSpec> ParseGpuSpec(const std::string& t) { return ParseWith<GpuSpec>(t, ParseGpuObject); }
Result<TopologySpec> ParseTopologySpec(const std::string& t) {
  return ParseWith<TopologySpec>(t, ParseTopologyObject);
}

namespace {

json KindsToJson(const std::vector<AttentionKind>& kinds) {
  json a = json::array();
  for (AttentionKind k : kinds) a.push_back(AttentionKindName(k));
  return a;
}

}  // namespace

std::string ModelSpecToJson(const ModelSpec& m) {
  json j = {{"name", m.name}, {"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads},
            {"head_dim", m.head_dim}, {"kv_heads", m.kv_heads}, {"vocab", m.vocab},
            {"dense_layers", m.dense_layers}, {"dense_ffn", m.dense_ffn}, {"tied_embeddings", m.tied_embeddings},
            {"gated_ffn", m.gated_ffn}, {"dropout", m.dropout}, {"attn_res_block", m.attn_res_block},
            {"mtp_layers", m.mtp_layers},
            // The expanded per-layer list is itself a pattern that repeats once.
            {"attention", {{"pattern", KindsToJson(m.attention)}}},
            {"storage", {{"routed_expert_bits", m.storage.routed_expert_bits},
                         {"quant_group_size", m.storage.quant_group_size}}}};
  if (m.count(AttentionKind::kMla) > 0)
    j["mla"] = {{"q_lora_rank", m.mla.q_lora_rank}, {"kv_lora_rank", m.mla.kv_lora_rank},
                {"qk_nope_head_dim", m.mla.qk_nope_head_dim}, {"qk_rope_head_dim", m.mla.qk_rope_head_dim},
                {"v_head_dim", m.mla.v_head_dim}, {"output_gate", m.mla.output_gate}};
  if (m.count(AttentionKind::kKda) > 0)
    j["kda"] = {{"head_dim_k", m.kda.head_dim_k}, {"head_dim_v", m.kda.head_dim_v}, {"conv_kernel", m.kda.conv_kernel}};
  if (m.is_moe())
    j["moe"] = {{"num_experts", m.moe.num_experts}, {"top_k", m.moe.top_k}, {"expert_ffn", m.moe.expert_ffn},
                {"shared_experts", m.moe.shared_experts}, {"shared_ffn", m.moe.shared_ffn},
                {"latent_dim", m.moe.latent_dim}, {"route_scale", m.moe.route_scale},
                {"groups", m.moe.groups}, {"topk_groups", m.moe.topk_groups}};
  j["norm_eps"] = m.norm_eps;
  j["rope"] = {{"theta", m.rope.theta}, {"interleaved", m.rope.interleaved}};
  if (m.rope.yarn.enabled()) {
    const YarnScaling& y = m.rope.yarn;
    j["rope"]["yarn"] = {{"factor", y.factor}, {"original_max_positions", y.original_max_positions},
                         {"beta_fast", y.beta_fast}, {"beta_slow", y.beta_slow},
                         {"mscale", y.mscale}, {"mscale_all_dim", y.mscale_all_dim}};
  }
  return j.dump();
}

std::string GpuSpecToJson(const GpuSpec& g) {
  const json j = {{"name", g.name}, {"memory_gb", g.memory.value() / 1e9}, {"bf16_tflops", g.bf16.value() / 1e12},
                  {"fp16_tflops", g.fp16.value() / 1e12}, {"fp8_tflops", g.fp8.value() / 1e12},
                  {"hbm_gbytes_per_s", g.hbm.value() / 1e9}, {"nvlink_gbytes_per_s", g.nvlink.value() / 1e9},
                  {"arch", g.arch}, {"gpus_per_node", g.gpus_per_node}, {"nvlink_domain", g.nvlink_domain},
                  {"nics_per_node", g.nics_per_node},
                  {"nic_gbits_per_s", g.nic.value() * 8 / 1e9}, {"frontend_gbits_per_s", g.frontend.value() * 8 / 1e9},
                  {"source", g.source}};
  return j.dump();
}

Result<std::string> PresetCatalog::Read(const std::string& kind, const std::string& name,
                                        const std::string& flag) const {
  for (const std::string& n : Names(kind))
    if (n == name) return fs_.ReadFile(dir_ + "/" + kind + "/" + name + ".json", limits::kMaxSpecFileBytes);
  std::string known;
  for (const std::string& n : Names(kind)) known += (known.empty() ? "" : ", ") + n;
  return Status::NotFound(flag + ": unknown preset \"" + name + "\" (known: " + known + ")");
}

namespace {
template <typename T>
Result<T> WithFile(Result<T> r, const std::string& where) {
  if (r.ok()) return r;
  return r.status().WithContext(where);
}
}  // namespace

Result<std::shared_ptr<const CalibrationTable>> PresetCatalog::Calibration(const std::string& gpu) const {
  const std::string path = dir_ + "/calibration/" + gpu + ".json";
  if (!fs_.Exists(path)) return std::shared_ptr<const CalibrationTable>();
  KP_ASSIGN_OR_RETURN(std::string text, fs_.ReadFile(path, limits::kMaxSpecFileBytes));
  Result<CalibrationTable> t = WithFile(ParseCalibration(text), "presets/calibration/" + gpu + ".json");
  if (!t.ok()) return t.status();
  return std::make_shared<const CalibrationTable>(std::move(*t));
}

Result<std::shared_ptr<const CalibrationTable>> PresetCatalog::CalibrationFile(const std::string& path) const {
  Result<std::string> text = fs_.ReadFile(path, limits::kMaxSpecFileBytes);
  if (!text.ok()) return text.status().WithContext("--calibration-file");
  Result<CalibrationTable> t = ParseCalibration(*text);
  if (!t.ok()) return Status::InvalidArgument("--calibration-file: " + path + ": " + t.status().message());
  return std::make_shared<const CalibrationTable>(std::move(*t));
}

Result<ModelSpec> PresetCatalog::Model(const std::string& name, const std::string& field) const {
  KP_ASSIGN_OR_RETURN(std::string text, Read("models", name, field));
  return WithFile(ParseModelSpec(text), "presets/models/" + name + ".json");
}
Result<GpuSpec> PresetCatalog::Gpu(const std::string& name, const std::string& field) const {
  KP_ASSIGN_OR_RETURN(std::string text, Read("gpus", name, field));
  return WithFile(ParseGpuSpec(text), "presets/gpus/" + name + ".json");
}
Result<TopologySpec> PresetCatalog::Topology(const std::string& name) const {
  KP_ASSIGN_OR_RETURN(std::string text, Read("topologies", name, "--preset"));
  return WithFile(ParseTopologySpec(text), "presets/topologies/" + name + ".json");
}
namespace {
Result<std::string> ReadPresetFile(const FileSystem& fs, const std::string& flag, const std::string& path) {
  Result<std::string> text = fs.ReadFile(path, limits::kMaxSpecFileBytes);
  if (!text.ok()) return text.status().WithContext(flag);
  return text;
}
}  // namespace

namespace {

// A Hugging Face config has no name: its folder's, in the characters a
// name may hold ("Kimi-K2.6" for /ckpt/Kimi-K2.6/config.json).
std::string NameOfConfigFolder(const std::string& path) {
  std::string dir = path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/'));
  dir = dir.substr(dir.find_last_of('/') == std::string::npos ? 0 : dir.find_last_of('/') + 1);
  std::string name;
  for (char c : dir)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') name += c;
  if (name.empty() || name.size() > 100) return "hf-config";
  return name;
}

}  // namespace

Result<ModelSpec> PresetCatalog::ModelFile(const std::string& path) const {
  KP_ASSIGN_OR_RETURN(std::string text, ReadPresetFile(fs_, "--model-file", path));
  if (IsHfConfig(text)) return WithFile(ModelSpecFromHfConfig(text, NameOfConfigFolder(path)), "--model-file " + path);
  return WithFile(ParseModelSpec(text), "--model-file " + path);
}
Result<GpuSpec> PresetCatalog::GpuFile(const std::string& path) const {
  KP_ASSIGN_OR_RETURN(std::string text, ReadPresetFile(fs_, "--gpu-file", path));
  return WithFile(ParseGpuSpec(text), "--gpu-file " + path);
}
Result<TopologySpec> PresetCatalog::TopologyFile(const std::string& path) const {
  KP_ASSIGN_OR_RETURN(std::string text, ReadPresetFile(fs_, "--topology-file", path));
  return WithFile(ParseTopologySpec(text), "--topology-file " + path);
}

std::vector<std::string> PresetCatalog::Names(const std::string& kind) const {
  std::vector<std::string> out;
  for (std::string n : fs_.List(dir_ + "/" + kind, ".json")) out.push_back(n.substr(0, n.size() - 5));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kp
