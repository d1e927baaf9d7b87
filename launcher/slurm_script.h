// The sbatch script of a launch (docs/launcher.md shows one).
#ifndef KIMI_PLAN_LAUNCHER_SLURM_SCRIPT_H_
#define KIMI_PLAN_LAUNCHER_SLURM_SCRIPT_H_

#include <string>

#include "launcher/launch_spec.h"
#include "launcher/verl_overrides.h"

namespace kp {

/// A bash script for sbatch: the #SBATCH header (job name, nodes, tasks
/// and GPUs per node, time, exclusive, partition, account, CPUs per task),
/// the head node's address from the allocation, seed 001's NCCL defaults,
/// then either one srun task per GPU running `kimi-plan run` as one rank
/// of the torchrun-style environment (engine native), or a Ray head and
/// workers that the script waits on until every node has joined, followed
/// by Verl's trainer (engine verl). Arguments given to sbatch after the
/// script are appended to the runtime's or the trainer's command line.
/// `keys` is read only for Verl; Internal when an override key is missing.
Result<std::string> SlurmScript(const Launch& l, const VerlKeys& keys);

}  // namespace kp

#endif  // KIMI_PLAN_LAUNCHER_SLURM_SCRIPT_H_
