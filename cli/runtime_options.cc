#include "cli/runtime_options.h"

#include <optional>

#include "runtime/runtime_config.h"
#include "specs/presets.h"

namespace kp {

namespace {

template <typename T>
void Set(const po::variables_map& vm, const char* name, std::optional<T>* field) {
  if (vm.count(name)) *field = vm[name].as<T>();
}

}  // namespace

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
