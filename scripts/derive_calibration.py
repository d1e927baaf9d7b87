#!/usr/bin/env python3
"""Writes the calibration tables of GPUs we cannot measure here, derived from
published measurements (docs/presets.md, "Calibration tables").

The source is Calculon (Isaev et al., "Calculon: a Methodology and Tool for
High-Level Codesign of Systems and Large Language Models", SC'23), whose
system files carry efficiency tables fitted to measured A100 and H100 runs
and validated against Megatron-LM's published step times (3.65% mean error):
github.com/calculon-ai/calculon, systems/a100_80g.json and
systems/h100_80g_nvl8.json. We turn them into our format:

  GEMM  time = 2mnk / (peak x eff(2mnk)), eff by the product's GFLOP
        (Calculon's "matrix" gflops_efficiency steps), on a grid of powers of
        two from 128 to 32768 in m, n and k.
  copy  Calculon's "mem1" bandwidth x its efficiency above 100 MB, as bytes
        read plus written.
  collectives  time = latency + bytes x op / (bandwidth x efficiency) for
        Calculon's two networks (NVLink in the node, the fabric across), with
        its per-op factors, at sizes 1 KiB .. 4 GiB.

Calculon's GEMM efficiencies (0.95 for large products) are higher than
Megatron-LM's products reach in training: the Zero Bubble paper's profiled
weight-gradient passes (Qi et al., ICLR 2024, Table 6 / arXiv Table 9: T_W
of four GPT sizes on A100, pure matrix products) reach 0.806, 0.796, 0.762
and 0.771 of the 312 TFLOP/s peak, 0.829 of Calculon's curve on average; the
curve is scaled by GEMM_SCALE. The same paper's T_F and T_B, less their
products, give the memory-bound passes' cost (scripts/fit_elementwise.py): a
line through the four sizes' bytes (planner/layer_ops.cc's counts) with a
slope of 1130 GB/s, 0.613 of the copy bandwidth (ELEMENTWISE_SHARE), and
258 us per layer pass (LAYER_OVERHEAD_US). All three carry to the H100 table
unmeasured.

    python3 scripts/derive_calibration.py presets/calibration
"""
import json
import sys

GEMM_SCALE = 0.829
ELEMENTWISE_SHARE = 0.613
LAYER_OVERHEAD_US = 258
ELEMENTWISE_SOURCE = ("fitted to the Zero Bubble paper's profiled A100 layers (Qi et al., ICLR 2024, Table 6; "
                      "arXiv 2401.10241 Table 9) by scripts/fit_elementwise.py: forward and backward passes of "
                      "the 1.5B, 6.2B, 14.6B and 28.3B GPTs less their products, a line of slope 1130 GB/s = "
                      "0.613 x 1843 GB/s plus 258 us per layer pass")
GRID = [2 ** i for i in range(7, 16)]  # 128 .. 32768
SIZES = [2 ** i for i in range(10, 33, 2)]  # 1 KiB .. 4 GiB

SYSTEMS = {
    "a100-80g": {
        "file": "systems/a100_80g.json",
        "peak_tflops": 312,
        "matrix": [(128, 0.95), (16, 0.9), (1, 0.6), (0, 0.1)],
        "mem_gbps": 2048, "mem_eff": 0.90,
        # (span, ranks, bandwidth GB/s, efficiency, latency s, ops, minus1)
        "networks": [
            ("nvlink", 8, 300, 0.6, 1e-6,
             {"all-reduce": 2.0, "reduce-scatter": 1.5, "all-gather": 1.5, "send-recv": 1.0}, True),
            ("fabric", 16, 25, 0.9, 2e-6,
             {"all-reduce": 1.0, "reduce-scatter": 1.0, "all-gather": 1.0, "send-recv": 1.0}, True),
        ],
    },
    "h100": {
        "file": "systems/h100_80g_nvl8.json",
        "peak_tflops": 1000,
        "matrix": [(128, 0.95), (16, 0.9), (1, 0.6), (0, 0.1)],
        "mem_gbps": 3072, "mem_eff": 0.90,
        "networks": [
            ("nvlink", 8, 450, 0.6, 1e-6,
             {"all-reduce": 1.0, "reduce-scatter": 1.5, "all-gather": 1.5, "send-recv": 1.0}, False),
            ("fabric", 16, 50, 0.9, 2e-6,
             {"all-reduce": 1.0, "reduce-scatter": 1.0, "all-gather": 1.0, "send-recv": 1.0}, True),
        ],
    },
}


def efficiency(table, gflop):
    for threshold, eff in table:
        if gflop >= threshold:
            return eff
    return table[-1][1]


def collective_us(op_factor, minus1, ranks, nbytes, bw, eff, latency):
    # Calculon's "collective_minus1_scalar": the op's factor times (n-1)/n.
    scale = op_factor * ((ranks - 1) / ranks if minus1 and ranks > 1 else 1.0)
    return (latency + scale * nbytes / (bw * 1e9 * eff)) * 1e6


def derive(name, s):
    gemm = []
    for m in GRID:
        for n in GRID:
            for k in GRID:
                flops = 2.0 * m * n * k
                t = flops / (s["peak_tflops"] * 1e12 * efficiency(s["matrix"], flops / 1e9) * GEMM_SCALE)
                gemm.append([m, n, k, t * 1e6])
    collectives = []
    for span, ranks, bw, eff, lat, ops, minus1 in s["networks"]:
        for op, factor in ops.items():
            pts = [[b, collective_us(factor, minus1 and op != "send-recv", ranks, b, bw, eff, lat)]
                   for b in SIZES]
            collectives.append({"op": op, "span": span, "ranks": ranks if op != "send-recv" else 2,
                                "source": f"Calculon {s['file']}: {bw} GB/s x {eff}, latency {lat * 1e6:g} us, "
                                          f"op factor {factor}", "points": pts})
    return {
        "schema": "kimi-plan.calibration/1",
        "gpu": name,
        "source": (f"derived by scripts/derive_calibration.py from Calculon's published system file {s['file']} "
                   "(github.com/calculon-ai/calculon; Isaev et al., SC'23): GEMM efficiency by GFLOP scaled by "
                   f"{GEMM_SCALE} to the Zero Bubble paper's measured A100 weight-gradient passes (Qi et al., "
                   "ICLR 2024, Table 6), memory and network efficiencies; not measured by kimi-plan"),
        "memory_copy_gbytes_per_s": s["mem_gbps"] * s["mem_eff"],
        "elementwise": {"share": ELEMENTWISE_SHARE, "layer_overhead_us": LAYER_OVERHEAD_US,
                        "source": ELEMENTWISE_SOURCE},
        "gemm": {"bf16": gemm},
        "collectives": collectives,
    }


def num(v, digits=6):
    return "%.*g" % (digits, v)


def write(table, f):
    """The layout CalibrationToJson writes: one GEMM row or curve per line."""
    f.write('{\n "schema": "%s",\n "gpu": %s,\n "source": %s,\n "memory_copy_gbytes_per_s": %s,\n'
            ' "elementwise": {"share": %s, "layer_overhead_us": %s, "source": %s},\n "gemm": {'
            % (table["schema"], json.dumps(table["gpu"]), json.dumps(table["source"]),
               num(table["memory_copy_gbytes_per_s"]), num(table["elementwise"]["share"]),
               num(table["elementwise"]["layer_overhead_us"]), json.dumps(table["elementwise"]["source"])))
    for di, (dtype, rows) in enumerate(sorted(table["gemm"].items())):
        f.write(("," if di else "") + '\n  "%s": [' % dtype)
        f.write(",".join("\n   [%d, %d, %d, %s]" % (m, n, k, num(t)) for m, n, k, t in rows))
        f.write("\n  ]")
    f.write('\n },\n "collectives": [')
    for i, c in enumerate(table["collectives"]):
        pts = ", ".join("[%s, %s]" % (num(b, 12), num(t)) for b, t in c["points"])
        f.write((",\n  " if i else "\n  ") + '{"op": "%s", "span": "%s", "ranks": %d, "source": %s, "points": [%s]}'
                % (c["op"], c["span"], c["ranks"], json.dumps(c["source"]), pts))
    f.write("\n ]\n}\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "presets/calibration"
    for name, s in SYSTEMS.items():
        with open(f"{out}/{name}.json", "w") as f:
            write(derive(name, s), f)


if __name__ == "__main__":
    main()
