// The flags of `kimi-plan run` and what they make of a run: the model, the
// training configuration, the parallel layout with its stage split and
// micro-batches, from flags or from a recorded plan (--plan ID).
//
// The plan is the run: `run` declares exactly the planner flags it
// executes (the model, mode and adapters, the workload's batch and
// lengths, the schedule, the layout and its split, the activation dtype);
// any other planner flag is refused by name before anything runs
// (RefuseUnexecutedFlags), and a flag that --plan also sets is refused
// beside it rather than overridden. docs/runtime.md ("Distributed runs").
#ifndef KIMI_PLAN_CLI_RUN_OPTIONS_H_
#define KIMI_PLAN_CLI_RUN_OPTIONS_H_

#include <optional>
#include <string>
#include <vector>

#include "cli/options.h"
#include "planner/plan_request.h"
#include "runtime/train/train_session.h"
#include "runtime/train/trainer.h"

namespace kp {

/// `run`'s options: its own, the training flags, the planner flags it
/// executes, the output flags.
po::options_description RunOptions();

/// InvalidArgument naming the first of `args` that is a planner flag `run`
/// (its options `run`, RunOptions()) does not execute (e.g. --placement,
/// --gpu, --grad-bucket-mib).
Status RefuseUnexecutedFlags(const std::vector<std::string>& args, const po::options_description& run);

/// The recorded plan of --plan, or nullopt without it. Errors name --db or
/// --plan; a flag --plan also sets (the layout, split, schedule, batch and
/// lengths) is refused naming it.
Result<std::optional<PlanRequest>> RunPlan(const po::variables_map& vm, const CliEnv& env);

/// The training configuration: the model (scaled by flags), the training flags, and the step's sequences and their
/// length: --plan's (its global batch x rollout n sequences of prompt +
/// response tokens), else --global-batch x --rollout-n or --batch, and
/// --prompt-length + --response-length or --seq-len.
Result<runtime::TrainConfig> BuildRunConfig(const po::variables_map& vm, const CliEnv& env,
                                            const std::optional<PlanRequest>& plan);

/// The layout from the flags or the plan, its split (the planner's rule,
/// built as is) and micro-batch; dp defaults to the world over pp x cp x tp.
Result<runtime::ParallelLayout> BuildRunLayout(const po::variables_map& vm, int world, const ModelSpec& model,
                                               const std::optional<PlanRequest>& plan);

/// What the layout's ranks build, before any starts: every pipeline rank's
/// share under --max-params (InvalidArgument naming it and the rank), and
/// all of them together against this machine's memory (CheckTrainMemory).
Status CheckRankShares(const po::variables_map& vm, const runtime::TrainConfig& config,
                       const runtime::ParallelLayout& layout, const CliEnv& env);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_RUN_OPTIONS_H_
