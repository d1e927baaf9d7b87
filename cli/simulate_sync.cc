// `kimi-plan simulate sync`: the size of a weight update from the model and
// its storage format, its time over TCP and RDMA (the seed's comparison),
// and a pipelined broadcast to R rollout nodes.
#include "cli/simulate_commands.h"
#include "cli/log.h"
#include "common/clock.h"
#include "common/limits.h"
#include "simulator/weight_sync.h"
#include "specs/presets.h"

namespace kp {

namespace {

po::options_description SyncOptions() {
  po::options_description desc("kimi-plan simulate sync --model NAME --mode full|lora-shared-outer|lora-per-expert\n\n"
                               "Sizes a trainer -> rollout weight update from the model and times it. Options");
  desc.add_options()("help,h", "this text")
      ("model", po::value<std::string>(), "model preset")
      ("model-file", po::value<std::string>(), "a model file in the preset format")
      ("gpu", po::value<std::string>()->default_value("h200"), "GPU preset of both nodes")
      ("gpu-file", po::value<std::string>(), "a GPU file in the preset format")
      ("mode", po::value<std::string>()->default_value("full"), "full | lora-shared-outer | lora-per-expert")
      ("lora-rank", IntFlag(1, limits::kMaxHidden)->default_value(32), "LoRA rank")
      ("receivers", IntFlag(1, limits::kMaxSyncReceivers)->default_value(1), "rollout nodes of the broadcast")
      ("bucket-gib", NumberFlag(1.0 / 1024, 1024 * 1024), "bucket size per node in GiB (default 16 full, 1 LoRA)");
  AddOutputOptions(desc);
  return desc;
}

}  // namespace

Status SimulateSyncCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = SyncOptions();
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  KP_ASSIGN_OR_RETURN(ModelSpec model, ResolveModel(vm, env, ""));
  KP_ASSIGN_OR_RETURN(GpuSpec gpu, ResolveGpu(vm, env, ""));
  KP_ASSIGN_OR_RETURN(SyncMode mode, ParseSyncMode(vm["mode"].as<std::string>()));
  KP_RETURN_IF_ERROR(FlagNeeds(vm, "lora-rank", mode != SyncMode::kFull, "--mode lora-shared-outer or lora-per-expert"));
  const Bytes bucket = vm.count("bucket-gib") ? GiB(vm["bucket-gib"].as<double>())
                                               : (mode == SyncMode::kFull ? kDefaultSyncBucket : GiB(1));
  // The largest broadcasts take seconds: a progress line at most once a second.
  Stopwatch watch;
  double shown = 0;
  auto progress = [&](int receivers, int done, int total) {
    if (watch.Seconds() - shown < 1.0) return;
    shown = watch.Seconds();
    Progress(env, "simulate sync: broadcast to " + std::to_string(receivers) + " receivers, bucket " +
                      std::to_string(done) + " of " + std::to_string(total) + " delivered (" +
                      std::to_string(static_cast<int>(shown)) + " s)");
  };
  KP_ASSIGN_OR_RETURN(SyncReport report, WeightSyncReport(model, gpu, mode, vm["lora-rank"].as<int>(),
                                                          vm["receivers"].as<int>(), bucket, progress));
  nlohmann::json result = ToJson(report);
  const nlohmann::json request = {{"model", model.name}, {"gpu", gpu.name}, {"mode", SyncModeName(mode)},
                                  {"lora_rank", vm["lora-rank"].as<int>()}, {"receivers", vm["receivers"].as<int>()},
                                  {"bucket_bytes", bucket.value()}};
  return RecordAndReport(vm, env, "sync", 0, request, result, [&](std::int64_t id) {
    env.out << "kimi-plan simulate sync #" << id << "\n\n" << FormatSyncReport(report);
  });
}

}  // namespace kp
