// `kimi-plan profile`: measures what the runtime's layers keep for the
// backward on this device (runtime/train/activation_profile_measure.h) and
// writes the activation profile that `kimi-plan plan --activation-profile`
// prices the native engine's activations from. Sees the runtime through
// that header only, which includes no LibTorch.
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/output_paths.h"
#include "cli/runtime_options.h"
#include "common/limits.h"
#include "common/table.h"
#include "runtime/model/runtime_config.h"
#include "runtime/train/activation_profile_measure.h"

namespace kp {

namespace {

po::options_description ProfileOptions() {
  po::options_description desc("kimi-plan profile [options]\n\n"
                               "Runs a forward and backward of --batch and of 2 x --batch sequences through the\n"
                               "runtime's model and writes what each layer keeps for the backward, per token and\n"
                               "per micro-batch (an activation profile, docs/planner.md) to --out for\n"
                               "`kimi-plan plan --activation-profile`.\n"
                               "Options");
  desc.add_options()("help,h", "this text")
      ("out", po::value<std::string>(), "write the profile (JSON) to this file (required)")
      ("batch", IntFlag(1, limits::kMaxBatch)->default_value(1), "sequences in the micro-batch")
      ("seq-len", IntFlag(1, limits::kMaxSequence)->default_value(64), "tokens per sequence")
      ("dtype", po::value<std::string>()->default_value("fp32"), "fp32 | bf16 (activations; fp32 master weights)")
      ("lora-rank", IntFlag(1, limits::kMaxHidden),
       "train LoRA adapters of this rank (alpha 2 x rank) on the frozen bf16 base, as `run --lora-rank` does")
      ("json", "print the profile (JSON) instead of a table");
  AddScaledModelOptions(desc);
  AddTrainOptions(desc, runtime::TrainConfig(), /*steps_required=*/false, /*log_every=*/10);
  return desc;
}

std::string PerToken(double bytes) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(bytes < 100 ? 1 : 0) << bytes;
  return o.str();
}

void PrintProfile(const runtime::ActivationTrace& t, const std::string& out, const CliEnv& env) {
  const ActivationProfile& p = t.profile;
  env.out << "activation profile of " << p.model << " on " << p.device << " (" << p.dtype << ", " << p.tokens
          << " tokens) -> " << out << "\n\n";
  Table table({"piece", "bytes per token", "fixed MB", "MB for the micro-batch"});
  auto row = [&](const std::string& what, double per_token, double fixed) {
    table.AddRow({what, PerToken(per_token), FormatFixed(fixed / 1e6, 2),
                  FormatFixed((fixed + per_token * p.tokens) / 1e6, 2)});
  };
  row("embedding", p.embedding, 0);
  for (size_t l = 0; l < p.layers.size(); ++l) row("layer " + std::to_string(l), p.layers[l], p.layers_fixed[l]);
  row("head and loss", p.head, p.head_fixed);
  row("backward, above the forward", p.backward, 0);
  env.out << table.Render() << "\nweights " << FormatFixed(t.weights_bytes / 1e6, 1) << " MB, gradients "
          << FormatFixed(t.gradients_bytes / 1e6, 1) << " MB, forward end "
          << FormatFixed(t.forward_end_bytes / 1e6, 1) << " MB, peak " << FormatFixed(t.peak_bytes / 1e6, 1) << " MB\n";
}

}  // namespace

Status ProfileCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = ProfileOptions();
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  if (!vm.count("out")) return Status::InvalidArgument("--out: required (the file the profile is written to)");
  KP_RETURN_IF_ERROR(CheckOutputFile(vm, env, "out", /*create_parent=*/false));
  KP_RETURN_IF_ERROR(CheckDistinctPaths(vm, env, {"db", "out"}));
  runtime::TrainConfig config;
  KP_ASSIGN_OR_RETURN(config.model, ResolveScaledModel(vm, env));
  KP_RETURN_IF_ERROR(ReadTrainOptions(vm, &config));
  KP_ASSIGN_OR_RETURN(config.options.dtype, runtime::ParseDType(vm["dtype"].as<std::string>()));
  if (vm.count("lora-rank")) {
    config.lora.rank = vm["lora-rank"].as<int>();
    config.lora.alpha = 2.0 * config.lora.rank;
    config.options.weight_dtype = runtime::DType::kBf16;  // the frozen base, as run stores it
  }
  config.options.seed = config.seed;
  KP_RETURN_IF_ERROR(runtime::ValidateTrainConfig(config));  // e.g. --fp8 experts on a model without them
  PrepareDevice(config, env);
  KP_RETURN_IF_ERROR(CheckTrainMemory(config, env));
  KP_ASSIGN_OR_RETURN(const runtime::ActivationTrace t,
                      runtime::MeasureActivationProfile(config.model, config.options, vm["batch"].as<int>(),
                                                        vm["seq-len"].as<int>(), config.device, config.lora));
  const std::string out = vm["out"].as<std::string>();
  const std::string text = ActivationProfileToJson(t.profile);
  KP_RETURN_IF_ERROR(env.fs.WriteFile(out, text).WithContext("--out"));
  if (vm.count("json")) env.out << text;
  else PrintProfile(t, out, env);
  return Status::Ok();
}

}  // namespace kp
