#!/usr/bin/env python3
"""The native runtime's step on one GPU, predicted against measured.

For each bench model, `kimi-plan plan` prices one step of B sequences from
the profile measured on the GPU (bench/profiles/<model>-h200-bf16.json: each
piece's bytes and seconds, scripts/gpu_native_step.sh), and the measured
median step (bench/profiles/native_steps.json, the same script's
kimi-plan-train-bench runs) is set beside it. Prints predicted, measured and
their ratio; exits 1 when a ratio is outside 0.9-1.1 (the fidelity issue's
bound). Reads only; the plans go to a throw-away store.

    python3 scripts/native_step_check.py [--kimi-plan build/kimi-plan]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def predicted_ms(kimi_plan, model, batch, seq, profile, db):
    args = [kimi_plan, "plan", "--model-file", os.path.join(ROOT, "bench", model + ".json"), "--gpu", "h200",
            "--nodes", "1", "--gpus-per-node", "1", "--seq-len", str(seq), "--global-batch", str(batch),
            "--micro-batch", str(batch), "--rollout-n", "1", "--recompute", "none", "--distributed-optimizer", "off",
            "--state-precision", "fp32", "--grad-bucket-mib", "25", "--activation-profile", profile,
            "--db", db, "--json"]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{model}: kimi-plan plan failed: {out.stderr.strip()}")
    return json.loads(out.stdout)["step_time_s"] * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kimi-plan", default=os.path.join(ROOT, "build", "kimi-plan"))
    args = parser.parse_args()
    with open(os.path.join(ROOT, "bench", "profiles", "native_steps.json")) as f:
        steps = json.load(f)
    print(f"{'model':<10} {'batch x seq':>12} {'predicted ms':>13} {'measured ms':>12} {'measured/predicted':>19}")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "check.db")
        for run in steps["runs"]:
            profile = os.path.join(ROOT, "bench", "profiles", run["model"] + "-h200-bf16.json")
            p = predicted_ms(args.kimi_plan, run["model"], run["batch"], run["seq_len"], profile, db)
            m = run["median_step_ms"]
            ratio = m / p
            bad += not 0.9 <= ratio <= 1.1
            print(f"{run['model']:<10} {str(run['batch']) + ' x ' + str(run['seq_len']):>12} {p:>13.1f} {m:>12.1f} "
                  f"{ratio:>19.3f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
