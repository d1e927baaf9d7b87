#!/usr/bin/env python3
"""Writes launcher/verl_keys.txt: every configuration key of one Verl version.

`kimi-plan launch --engine verl` may only emit overrides whose key is in that
list (launcher/verl_overrides.cc checks it), so the list is the contract with
the Verl version the generated jobs install. Refresh it from a Verl checkout:

    git -C verl show HEAD:verl/trainer/config/_generated_ppo_megatron_trainer.yaml > gen.yaml
    git -C verl show HEAD:verl/trainer/config/ppo_trainer.yaml > ppo.yaml
    python3 scripts/verl_keys.py gen.yaml ppo.yaml \
        --commit "$(git -C verl rev-parse HEAD)" \
        --describe "$(git -C verl describe --tags HEAD)" \
        --version "$(git -C verl show HEAD:verl/version/version)" \
        --date "$(git -C verl log -1 --format=%cs HEAD)" > launcher/verl_keys.txt

Needs PyYAML. Reads only the two YAML files it is given.
"""
import argparse
import sys

import yaml

# Keys Verl reads but does not declare, so Hydra needs them appended with '+'.
# main_ppo.py passes the whole ray_kwargs.ray_init mapping to ray.init(); the
# seed's launcher joins the running Ray cluster with address=auto.
# verl/workers/engine/megatron/transformer_impl.py passes every entry of
# megatron.override_transformer_config to Megatron's TransformerConfig
# (set_extra_args, or the Megatron-Bridge provider's fields); the launcher
# sets the planner's stage split with the two uneven-pipeline fields, as
# Verl's own examples/grpo_trainer/run_qwen3_235b_a22b_megatron.sh does, or
# with pipeline_model_parallel_layout, and the recipe's FP8, dispatcher and
# overlap fields. override_optimizer_config goes to Megatron's
# OptimizerConfig (bf16 moments: the precision-aware optimizer) and
# override_ddp_config to its DistributedDataParallelConfig.
APPENDED = [
    "+ray_kwargs.ray_init.address",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.num_layers_in_first_pipeline_stage",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.num_layers_in_last_pipeline_stage",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.pipeline_model_parallel_layout",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.moe_token_dispatcher_type",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.moe_flex_dispatcher_backend",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.overlap_moe_expert_parallel_comm",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.delay_wgrad_compute",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.fp8",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.fp8_recipe",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.fp8_param",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.cuda_graph_impl",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.cuda_graph_scope",
    "+actor_rollout_ref.actor.optim.override_optimizer_config.use_precision_aware_optimizer",
    "+actor_rollout_ref.actor.optim.override_optimizer_config.exp_avg_dtype",
    "+actor_rollout_ref.actor.optim.override_optimizer_config.exp_avg_sq_dtype",
    "+actor_rollout_ref.actor.megatron.override_ddp_config.grad_reduce_in_fp32",
]


def flatten(node, prefix, out):
    """Every mapping and leaf key below `node`, dotted."""
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        out.append(dotted)
        flatten(value, dotted, out)


def config_groups(ppo_trainer):
    """Plain `group: option` entries of the defaults list: selectable as group=option."""
    groups = []
    for entry in ppo_trainer.get("defaults", []):
        if isinstance(entry, dict):
            for key in entry:
                if "@" not in key and "/" not in key:
                    groups.append(key)
    return groups


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("generated_yaml", help="verl/trainer/config/_generated_ppo_megatron_trainer.yaml")
    parser.add_argument("ppo_trainer_yaml", help="verl/trainer/config/ppo_trainer.yaml (for its config groups)")
    parser.add_argument("--repo", default="github.com/verl-project/verl")
    parser.add_argument("--commit", required=True)
    parser.add_argument("--describe", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--date", required=True)
    args = parser.parse_args()

    with open(args.generated_yaml) as f:
        generated = yaml.safe_load(f)
    with open(args.ppo_trainer_yaml) as f:
        ppo_trainer = yaml.safe_load(f)
    keys = []
    flatten(generated, "", keys)
    groups = config_groups(ppo_trainer)

    out = sys.stdout
    out.write(
        "# Verl configuration keys that `kimi-plan launch --engine verl` may override,\n"
        "# one dotted key per line. The generator refuses any other key.\n"
        "#\n"
        f"# Source: {args.repo} (formerly volcengine/verl)\n"
        f"#   commit  {args.commit} ({args.date})\n"
        f"#   tag     {args.describe}, verl/version/version {args.version.strip()}\n"
        "#   keys    verl/trainer/config/_generated_ppo_megatron_trainer.yaml: every mapping and\n"
        "#           leaf, i.e. ppo_trainer.yaml flattened with model_engine=megatron\n"
        "#           (ppo_megatron_trainer.yaml is a deprecated alias of that selection)\n"
        "#   groups  the plain `group: option` entries of verl/trainer/config/ppo_trainer.yaml's\n"
        "#           defaults list, selectable as group=option\n"
        "#   +keys   read by Verl but not declared, so Hydra needs them appended with '+':\n"
        "#           main_ppo.py passes ray_kwargs.ray_init to ray.init();\n"
        "#           verl/workers/engine/megatron/transformer_impl.py passes\n"
        "#           megatron.override_transformer_config to Megatron's TransformerConfig,\n"
        "#           optim.override_optimizer_config to its OptimizerConfig and\n"
        "#           megatron.override_ddp_config to its DistributedDataParallelConfig\n"
        "# Regenerate with scripts/verl_keys.py (its docstring has the commands).\n"
        "\n# config groups\n"
    )
    for g in groups:
        out.write(g + "\n")
    out.write("\n# appended keys\n")
    for k in APPENDED:
        out.write(k + "\n")
    out.write("\n# keys of _generated_ppo_megatron_trainer.yaml\n")
    for k in keys:
        out.write(k + "\n")


if __name__ == "__main__":
    main()
