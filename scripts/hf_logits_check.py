#!/usr/bin/env python3
"""The runtime's logits against Hugging Face transformers' DeepseekV3ForCausalLM.

For each case (Kimi K2.6's architecture scaled down, and DeepSeek-V3's with
group-limited routing), builds a small random DeepseekV3ForCausalLM in fp32
with a fixed seed: MLA with q/kv LoRA ranks, sigmoid routing with a random
e_score_correction_bias, a shared expert, one leading dense layer, YaRN RoPE
on interleaved weights and the release's routed_scaling_factor. It
save_pretrained's the model, runs

    kimi-plan logits --model-file DIR/config.json --init-from DIR --tokens ... --json
    (or kimi-plan-logits with the same flags, built in the runtime-only tree)

(the runtime reads the architecture from the same config.json) and compares
the logits with transformers' forward of the same tokens:
  fp32: max |runtime - transformers| < 1e-4 (--tol);
  bf16: the runtime in bf16 against transformers in fp32, within twice the
        error of transformers' own bf16 forward plus 1e-2 (--bf16-slack).
Prints a table per case and a last line of JSON; exits 1 on a failure, 2 when
the runtime cannot be run. Needs torch and transformers (4.x or 5.x).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

CASES = {
    # Kimi K2 / K2.6's release config, widths scaled down.
    "kimi-k2.6-scaled": dict(rope_theta=50000.0, yarn=dict(factor=64.0, original_max_position_embeddings=4096,
                                                          beta_fast=1.0, beta_slow=1.0, mscale=1.0,
                                                          mscale_all_dim=1.0),
                             routed_scaling_factor=2.827, n_group=1, topk_group=1, rms_norm_eps=1e-6),
    # DeepSeek-V3's (YaRN factor 40, beta 32 / 1), with 4 groups of which 2.
    "deepseek-v3-groups": dict(rope_theta=10000.0, yarn=dict(factor=40.0, original_max_position_embeddings=4096,
                                                             beta_fast=32.0, beta_slow=1.0, mscale=1.0,
                                                             mscale_all_dim=1.0),
                               routed_scaling_factor=2.5, n_group=4, topk_group=2, rms_norm_eps=1e-6),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runtime", default=os.environ.get("KP_RUNTIME", "kimi-plan logits"),
                   help="the command to run: 'kimi-plan logits', or kimi-plan-logits (the runtime-only tree's)")
    p.add_argument("--runtime-args", default="", help="extra flags for the runtime, e.g. '--device cuda'")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--bf16-slack", type=float, default=1e-2)
    p.add_argument("--no-bf16", action="store_true")
    p.add_argument("--keep", default="", help="write the checkpoints under this folder and keep them")
    return p.parse_args()


def make_config(case):
    yarn = dict(case["yarn"])
    common = dict(
        vocab_size=256, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
        intermediate_size=128, first_k_dense_replace=1, moe_intermediate_size=32,
        n_routed_experts=16, num_experts_per_tok=4, n_shared_experts=1,
        n_group=case["n_group"], topk_group=case["topk_group"], norm_topk_prob=True,
        routed_scaling_factor=case["routed_scaling_factor"],
        q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        rms_norm_eps=case["rms_norm_eps"], hidden_act="silu", attention_bias=False, attention_dropout=0.0,
        tie_word_embeddings=False, initializer_range=0.1,
        # The release's ratio; transformers may derive the YaRN factor from it.
        max_position_embeddings=int(yarn["factor"] * yarn["original_max_position_embeddings"]),
    )
    try:  # transformers 5: rope_parameters
        c = DeepseekV3Config(**common, rope_parameters={"rope_type": "yarn", "rope_theta": case["rope_theta"], **yarn})
        params = getattr(c, "rope_parameters", None) or {}
        if params.get("rope_type") == "yarn" and params.get("factor") == yarn["factor"]:
            return c
    except TypeError:
        pass
    return DeepseekV3Config(**common, rope_theta=case["rope_theta"], rope_scaling={"type": "yarn", "rope_type": "yarn", **yarn})


def randomize(model, gen):
    """Norm weights and router biases away from their 1 / 0 init, so a misplaced
    norm, or a bias used in the weights, shows."""
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                t.copy_(torch.rand(t.shape, generator=gen) + 0.5)
            elif name.endswith("e_score_correction_bias"):
                t.copy_(torch.randn(t.shape, generator=gen) * 0.1)


def per_expert_names(folder, c):
    """The released checkpoints hold one tensor per expert (what the runtime
    reads); where a transformers version saves its fused banks, split them."""
    path = os.path.join(folder, "model.safetensors")
    sd = load_file(path)
    fused = [k for k in sd if k.endswith("mlp.experts.gate_up_proj")]
    for k in fused:
        base, inter = k[: -len("gate_up_proj")], c.moe_intermediate_size
        gate_up, down = sd.pop(k), sd.pop(base + "down_proj")
        for e in range(gate_up.shape[0]):
            sd[f"{base}{e}.gate_proj.weight"] = gate_up[e, :inter].contiguous()
            sd[f"{base}{e}.up_proj.weight"] = gate_up[e, inter:].contiguous()
            sd[f"{base}{e}.down_proj.weight"] = down[e].contiguous()
    if fused:
        save_file(sd, path, metadata={"format": "pt"})
    return len(fused)


def fp64_floor(c, model, tokens, hf):
    """transformers' own fp32 rounding: the same weights in fp64. Its grouped
    expert GEMM takes no fp64, so the reference asks for the eager experts."""
    import copy
    c64 = copy.deepcopy(c)
    for key in ("experts_implementation", "_experts_implementation"):
        try:
            setattr(c64, key, "eager")
        except (AttributeError, TypeError, ValueError):
            pass
    try:
        hf64 = DeepseekV3ForCausalLM(c64).double().eval()
        hf64.load_state_dict(model.state_dict())
        return float((hf64(tokens).logits[0] - hf).abs().max())
    except (RuntimeError, ValueError) as e:
        print(f"  (no fp64 reference: {str(e).splitlines()[0][:120]})")
        return float("nan")


def run_runtime(a, folder, tokens, dtype):
    cmd = shlex.split(a.runtime) + ["--model-file", os.path.join(folder, "config.json"), "--init-from", folder,
           "--tokens", ",".join(str(t) for t in tokens), "--dtype", dtype] + shlex.split(a.runtime_args)
    if "kimi-plan-logits" not in a.runtime:
        cmd.append("--json")
    print("$ " + " ".join(shlex.quote(x) for x in cmd), flush=True)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"cannot run the runtime: {e}")
        sys.exit(2)
    if r.returncode != 0:
        print(r.stdout[-4000:] + r.stderr[-4000:])
        print(f"the runtime exited {r.returncode}")
        sys.exit(2)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return torch.tensor(out["logits"], dtype=torch.float64)


def check_case(a, name, folder):
    gen = torch.Generator().manual_seed(a.seed)
    torch.manual_seed(a.seed)
    c = make_config(CASES[name])
    model = DeepseekV3ForCausalLM(c).float().eval()
    randomize(model, gen)
    tokens = torch.randint(0, c.vocab_size, (1, a.seq_len), generator=gen)
    with torch.no_grad():
        hf = model(tokens).logits[0].double()
        floor = fp64_floor(c, model, tokens, hf)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    split = per_expert_names(folder, c)
    result = {"case": name, "fp32_vs_fp64_transformers": floor, "split_banks": split,
              "max_abs_logit": float(hf.abs().max())}
    rt = run_runtime(a, folder, tokens[0].tolist(), "fp32").reshape(hf.shape)
    diff = (rt - hf).abs()
    result["fp32_max_abs_diff"] = float(diff.max())
    result["fp32_argmax_agree"] = int((rt.argmax(-1) == hf.argmax(-1)).sum())
    result["fp32_pass"] = result["fp32_max_abs_diff"] < a.tol
    if not a.no_bf16:
        with torch.no_grad():
            hf_bf16 = DeepseekV3ForCausalLM(c).eval()
            hf_bf16.load_state_dict(model.state_dict())
            hf_bf16 = hf_bf16.to(torch.bfloat16)
            hf_err = float((hf_bf16(tokens).logits[0].double() - hf).abs().max())
        rt16 = run_runtime(a, folder, tokens[0].tolist(), "bf16").reshape(hf.shape)
        result["bf16_max_abs_diff"] = float((rt16 - hf).abs().max())
        result["bf16_transformers_max_abs_diff"] = hf_err
        result["bf16_bound"] = 2 * hf_err + a.bf16_slack
        result["bf16_pass"] = result["bf16_max_abs_diff"] <= result["bf16_bound"]
    print(f"{name}: tokens {a.seq_len}, |logits| max {result['max_abs_logit']:.3g}, "
          f"transformers fp32 vs fp64 {floor:.2e}")
    print(f"  fp32: max |runtime - transformers| {result['fp32_max_abs_diff']:.3e} "
          f"({'<' if result['fp32_pass'] else '>='} {a.tol:g}); argmax agrees at "
          f"{result['fp32_argmax_agree']}/{a.seq_len}")
    if not a.no_bf16:
        print(f"  bf16: runtime {result['bf16_max_abs_diff']:.3e}, transformers' own bf16 "
              f"{result['bf16_transformers_max_abs_diff']:.3e}, bound {result['bf16_bound']:.3e}: "
              f"{'PASS' if result['bf16_pass'] else 'FAIL'}")
    return result


def main():
    a = parse_args()
    root = a.keep or tempfile.mkdtemp(prefix="hf_logits_check_")
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; checkpoints under {root}")
    results = [check_case(a, name, os.path.join(root, name)) for name in a.cases.split(",")]
    ok = all(r["fp32_pass"] and r.get("bf16_pass", True) for r in results)
    print(json.dumps({"pass": ok, "transformers": transformers.__version__, "results": results}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
