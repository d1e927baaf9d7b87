#!/usr/bin/env python3
"""Writes what the measured H200 table (presets/calibration/h200.json, kimi-plan
calibrate) and published microbenchmarks can give the GPUs no one here can
measure (docs/presets.md, "Calibration tables"; the sources below): the
Blackwell tables (b200, b300, gb200, gb300) whole, and the H100 table's FP8
grid (its BF16 grid and collectives stay Calculon's, scripts/
derive_calibration.py): the H200's measured FP8 grid at the H100's best-shape
FP8 efficiency (0.709 against the H200's 0.734, the same search), as the two
share their tensor cores.

  GEMM  the H200's measured efficiency at every shape (2mnk / (t x peak))
        carries the shape's profile (small products are latency-bound,
        thin ones bandwidth-bound); it is scaled by the ratio of the
        Blackwell GPU's best-shape efficiency to the H200's, both from the
        same published search (stas00/ml-engineering, "Maximum Achievable
        Matmul FLOPS comparison table", compute/accelerator/README.md at
        744d01e18b79512572f64a6bbd8b5f4a725203a7: best-shape BF16 / FP8 of
        H200 0.823 (our table) / 0.734, B200 0.776 / 0.763, B300 0.786 /
        0.745, GB200 0.729 / 0.723; GB300 has no entry and takes GB200's).
        A product never runs faster than the H200 table's fastest one (its
        launch-bound floor).
  copy  6.72 TB/s: cub::DeviceTransform on a B200, 2^28 fp16 elements
        (NVIDIA/cccl PR #7391); none published for B300, GB200, GB300, whose
        HBM3e has the same 8 TB/s datasheet rate.
  elementwise  the H200 table's share and per-layer overhead.
  collectives  latency + bytes x factor / (line rate x efficiency), as the
        Calculon-derived tables: NVLink5 900 GB/s per direction, ring
        all-gather/reduce-scatter/send-recv/all-to-all at 0.76 (nccl-tests
        all-reduce with NVLS off on 8 x B200, 682 GB/s; GB200 4 GPUs ring
        680), all-reduce at 0.93 (NVLS, 838 GB/s on 8 x B200, 835-847 on a
        GB200 NVL72 rack); the fabric at 0.96 of one NIC per GPU (ConnectX-7
        400 Gb/s: 48 GB/s, NCCL's guidance; ConnectX-8 800 Gb/s on B300 and
        GB300 assumed the same 0.96, none measured). The NVLink curves hold
        for a node (8) or an NVL72 rack (72).

    python3 scripts/derive_calibration.py presets/calibration        # first: h100.json
    python3 scripts/derive_from_h200_calibration.py presets/calibration
"""
import json
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from derive_calibration import num, write  # noqa: E402  (the same file layout)

H200_BF16_PEAK, H200_FP8_PEAK = 989, 1979
H200_FP8_BEST = 0.734  # MAMF, H200 SXM FP8 e4m3 (our table's fp8 best is 0.724)
SIZES = [2 ** i for i in range(10, 33, 2)]  # 1 KiB .. 4 GiB
COPY_GBPS = 6721.0

GPUS = {
    # name: (bf16 peak, fp8 peak, bf16 best, fp8 best, NVLink ranks, NIC GB/s per GPU)
    "b200": (2250, 4500, 0.776, 0.763, 8, 50),
    "b300": (2250, 4500, 0.786, 0.745, 8, 100),
    "gb200": (2500, 5000, 0.729, 0.723, 72, 50),
    "gb300": (2500, 5000, 0.729, 0.723, 72, 100),
}
NVLINK_GBPS = 900
RING_EFF, NVLS_EFF, NIC_EFF = 0.76, 0.93, 0.96
NVLINK_LATENCY, FABRIC_LATENCY = 2e-6, 4e-6


def scaled_grid(rows, h200_peak, h200_best, peak, best):
    floor = min(t for _, _, _, t in rows)
    out = []
    for m, n, k, t in rows:
        eff = 2.0 * m * n * k / (t * 1e-6) / (h200_peak * 1e12)
        target = eff * best / h200_best
        out.append([m, n, k, max(floor, 2.0 * m * n * k / (peak * 1e12 * target) * 1e6)])
    return out


def curve(op, span, ranks, bw, eff, latency, factor, source):
    minus1 = op != "send-recv"
    pts = []
    for b in SIZES:
        scale = factor * ((ranks - 1) / ranks if minus1 else 1.0)
        pts.append([b, (latency + scale * b / (bw * 1e9 * eff)) * 1e6])
    return {"op": op, "span": span, "ranks": ranks if op != "send-recv" else 2, "source": source, "points": pts}


def derive(name, h200):
    bf16_peak, fp8_peak, bf16_best, fp8_best, nvlink_ranks, nic = GPUS[name]
    h200_bf16_best = max(2.0 * m * n * k / (t * 1e-6) / (H200_BF16_PEAK * 1e12) for m, n, k, t in h200["gemm"]["bf16"])
    gemm = {"bf16": scaled_grid(h200["gemm"]["bf16"], H200_BF16_PEAK, h200_bf16_best, bf16_peak, bf16_best),
            "fp8": scaled_grid(h200["gemm"]["fp8"], H200_FP8_PEAK, H200_FP8_BEST, fp8_peak, fp8_best)}
    collectives = []
    for op, factor, eff in (("all-reduce", 1.0, NVLS_EFF), ("reduce-scatter", 1.0, RING_EFF),
                            ("all-gather", 1.0, RING_EFF), ("all-to-all", 1.0, RING_EFF), ("send-recv", 1.0, RING_EFF)):
        collectives.append(curve(op, "nvlink", nvlink_ranks, NVLINK_GBPS, eff, NVLINK_LATENCY,
                                 2.0 if op == "all-reduce" else factor,
                                 f"NVLink5 {NVLINK_GBPS} GB/s x {eff} ({'NVLS' if op == 'all-reduce' else 'ring'}), "
                                 f"latency {NVLINK_LATENCY * 1e6:g} us; nccl-tests on B200 and GB200 (docs/presets.md)"))
    for op, factor in (("all-reduce", 2.0), ("reduce-scatter", 1.0), ("all-gather", 1.0), ("all-to-all", 1.0),
                       ("send-recv", 1.0)):
        collectives.append(curve(op, "fabric", 16, nic, NIC_EFF, FABRIC_LATENCY, factor,
                                 f"one {nic * 8} Gb/s NIC per GPU x {NIC_EFF}, latency {FABRIC_LATENCY * 1e6:g} us"))
    return {
        "schema": "kimi-plan.calibration/1",
        "gpu": name,
        "source": ("derived by scripts/derive_blackwell_calibration.py, not measured by kimi-plan: the H200 table's "
                   "measured GEMM efficiency by shape scaled to this GPU's published best-shape efficiency "
                   f"(bf16 {bf16_best}, fp8 {fp8_best} of {bf16_peak} / {fp8_peak} TFLOP/s; ml-engineering's "
                   "Maximum Achievable Matmul FLOPS table), the copy bandwidth of a B200 (6.72 TB/s, NVIDIA/cccl "
                   "PR #7391), NVLink and NIC collectives from nccl-tests (docs/presets.md)"),
        "memory_copy_gbytes_per_s": COPY_GBPS,
        "elementwise": dict(h200["elementwise"], source="the H200 table's: " + h200["elementwise"]["source"]),
        "gemm": gemm,
        "collectives": collectives,
    }


H100_FP8_BEST = 0.709  # MAMF, H100 SXM FP8 e4m3


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "presets/calibration"
    h200 = json.load(open(f"{out}/h200.json"))
    for name in GPUS:
        with open(f"{out}/{name}.json", "w") as f:
            write(derive(name, h200), f)
    h100 = json.load(open(f"{out}/h100.json"))
    h100["gemm"]["fp8"] = scaled_grid(h200["gemm"]["fp8"], H200_FP8_PEAK, H200_FP8_BEST, H200_FP8_PEAK, H100_FP8_BEST)
    if "fp8 grid" not in h100["source"]:
        h100["source"] += ("; its fp8 grid by scripts/derive_from_h200_calibration.py: the H200's measured fp8 grid "
                           f"at the H100's best-shape efficiency ({H100_FP8_BEST} against {H200_FP8_BEST})")
    with open(f"{out}/h100.json", "w") as f:
        write(h100, f)


if __name__ == "__main__":
    main()
