// `kimi-plan simulate attnres`: PR #4312's block-transport tables for a
// model (or a layer count and block size) cut into pp x vp stages.
#include "cli/simulate_commands.h"
#include "common/limits.h"
#include "schedules/attnres_transport.h"
#include "specs/presets.h"

namespace kp {

namespace {

po::options_description AttnResOptions() {
  po::options_description desc("kimi-plan simulate attnres (--model NAME | --layers L --block-size S) --pp P [--vp V]\n\n"
                               "Which attention-residual blocks cross each stage boundary, with the whole\n"
                               "stack on every hop and with the rank cache of torchtitan PR #4312. Options");
  desc.add_options()("help,h", "this text")
      ("model", po::value<std::string>(), "a model preset with attention residuals (kimi-k3, kimi-k3-debug)")
      ("model-file", po::value<std::string>(), "a model file in the preset format")
      ("layers", IntFlag(1, limits::kMaxLayers), "decoder layers (instead of a model)")
      ("block-size", IntFlag(1, limits::kMaxLayers), "layers per attention-residual block (instead of a model)")
      ("pp", IntFlag(1, limits::kMaxPipelineRanks), "pipeline ranks")
      ("vp", IntFlag(1, limits::kMaxLayers)->default_value(1), "stages per rank (loop style: stage s on rank s % pp)")
      ("split", po::value<std::string>(), "decoder layers per stage, comma separated (default: torchtitan's even split)");
  AddOutputOptions(desc);
  return desc;
}

Result<std::pair<int, int>> LayersAndBlock(const po::variables_map& vm, const CliEnv& env) {
  const bool by_model = vm.count("model") || vm.count("model-file");
  if (by_model && (vm.count("layers") || vm.count("block-size")))
    return Status::InvalidArgument("--model: give a model or --layers with --block-size, not both");
  if (by_model) {
    PresetCatalog catalog(env.fs, env.data.presets);
    KP_ASSIGN_OR_RETURN(ModelSpec m, vm.count("model") ? catalog.Model(vm["model"].as<std::string>())
                                                       : catalog.ModelFile(vm["model-file"].as<std::string>()));
    if (m.attn_res_block <= 0)
      return Status::InvalidArgument("--model: " + m.name + " has no attention residuals (attn_res_block is 0)");
    return std::make_pair(m.layers, m.attn_res_block);
  }
  if (!vm.count("layers") || !vm.count("block-size"))
    return Status::InvalidArgument("--layers: give --model, or --layers with --block-size");
  const int layers = vm["layers"].as<int>();
  if (layers <= 0) return Status::InvalidArgument("--layers: must be a positive integer, got " + std::to_string(layers));
  return std::make_pair(layers, vm["block-size"].as<int>());
}

}  // namespace

Status SimulateAttnResCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = AttnResOptions();
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  KP_ASSIGN_OR_RETURN(auto shape, LayersAndBlock(vm, env));
  const auto [layers, block] = shape;
  if (!vm.count("pp")) return Status::InvalidArgument("--pp: required");
  const int pp = vm["pp"].as<int>(), vp = vm["vp"].as<int>();
  if (pp <= 0) return Status::InvalidArgument("--pp: must be a positive integer, got " + std::to_string(pp));
  if (vp <= 0) return Status::InvalidArgument("--vp: must be a positive integer, got " + std::to_string(vp));
  StageSplit split;
  if (vm.count("split")) {
    KP_ASSIGN_OR_RETURN(split, ParseSplit(vm["split"].as<std::string>(), layers));
    if (split.num_stages() != pp * vp)
      return Status::InvalidArgument("--split: gives " + std::to_string(split.num_stages()) + " stages, pp x vp is " +
                                     std::to_string(pp * vp));
  } else {
    KP_ASSIGN_OR_RETURN(split, EvenSplit(layers, pp * vp));
  }
  KP_ASSIGN_OR_RETURN(AttnResTransport t, ComputeAttnResTransport(layers, block, split, pp));
  nlohmann::json result = ToJson(t);
  result["schema"] = "kimi-plan.attnres/1";
  result["split"] = split.ToString();
  const nlohmann::json request = {{"layers", layers}, {"block_size", block}, {"pp", pp}, {"vp", vp},
                                  {"split", split.ToString()}};
  return RecordAndReport(vm, env, "attnres", 0, request, result, [&](std::int64_t id) {
    env.out << "kimi-plan simulate attnres #" << id << ": " << layers << " layers in blocks of " << block << ", pp "
            << pp << " x vp " << vp << "\nsplit  " << split.ToString() << "\n\n"
            << RenderTables(t) << "\nper micro-batch: option 1 " << t.option1_entries << ", option 2 (whole stack) "
            << t.naive_entries << ", cached " << t.cached_entries << "; peak per hop: cached " << t.cached_peak_per_hop
            << ", option 2 " << t.option2_peak_per_hop << "\n";
  });
}

}  // namespace kp
