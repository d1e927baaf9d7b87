#include "cli/runtime_options.h"

#include <optional>

#include "common/limits.h"
#include "runtime/runtime_config.h"
#include "specs/presets.h"

namespace kp {

namespace {

template <typename T>
void Set(const po::variables_map& vm, const char* name, std::optional<T>* field) {
  if (vm.count(name)) *field = vm[name].as<T>();
}

}  // namespace

// The flags' ranges stop what no model has (common/limits.h); zero and the
// preset-relative bounds are ScaleModel's to refuse, with its messages.
void AddScaledModelOptions(po::options_description& desc) {
  desc.add_options()("model", po::value<std::string>()->default_value("kimi-k3-debug"), "model preset")
      ("model-file", po::value<std::string>(), "a model file in the preset format (instead of --model)")
      ("layers", IntFlag(0, limits::kMaxLayers), "scale the preset: decoder layers (at most the preset's)")
      ("hidden", IntFlag(0, limits::kMaxHidden), "scale the preset: hidden size (FFN, latent and LoRA-rank widths follow)")
      ("heads", IntFlag(0, limits::kMaxHeads), "scale the preset: attention heads")
      ("experts", IntFlag(0, limits::kMaxExperts), "scale the preset: routed experts (0: dense)")
      ("top-k", IntFlag(0, limits::kMaxExperts), "scale the preset: experts per token")
      ("vocab", IntFlag(0, limits::kMaxVocab), "scale the preset: vocabulary size")
      ("attn-res-block", IntFlag(0, limits::kMaxLayers), "scale the preset: attention-residual block size (0: plain residual)")
      ("dense-layers", IntFlag(0, limits::kMaxLayers), "scale the preset: leading dense-FFN layers");
}

Result<ModelSpec> ResolveScaledModel(const po::variables_map& vm, const CliEnv& env) {
  PresetCatalog catalog(env.fs, env.preset_dir);
  ModelSpec preset;
  if (vm.count("model-file")) {
    KP_ASSIGN_OR_RETURN(preset, catalog.ModelFile(vm["model-file"].as<std::string>()));
  } else {
    KP_ASSIGN_OR_RETURN(preset, catalog.Model(vm.count("model") ? vm["model"].as<std::string>() : "kimi-k3-debug"));
  }
  runtime::ScaleFlags f;
  Set(vm, "layers", &f.layers);
  Set(vm, "hidden", &f.hidden);
  Set(vm, "heads", &f.heads);
  Set(vm, "experts", &f.experts);
  Set(vm, "top-k", &f.top_k);
  Set(vm, "vocab", &f.vocab);
  Set(vm, "attn-res-block", &f.attn_res_block);
  Set(vm, "dense-layers", &f.dense_layers);
  return runtime::ScaleModel(preset, f);
}

}  // namespace kp
