#!/usr/bin/env python3
"""Fits the memory-bound passes' cost model of the A100 calibration table
(docs/presets.md, "Calibration tables") to the Zero Bubble paper's profiled
layers (Qi et al., ICLR 2024, Table 6; arXiv 2401.10241 Table 9: T_F, T_B,
T_W per pipeline stage and micro-batch, A100 80 GB, fp16, Megatron-LM).

T_W is pure matrix products: it gives the scale of Calculon's GEMM curve
(GEMM_SCALE in derive_calibration.py). T_F and T_B less their products leave
the memory-bound passes (fused layer norm, bias-dropout-add, scale-mask-
softmax, attention dropout, bias-GeLU), whose bytes planner/layer_ops.cc
counts. A straight line through the eight (bytes, time) points per layer,
forward and backward pooled, gives the bandwidth they reach and a fixed cost
per layer pass (kernel launches and the small kernels the bytes omit):

    python3 scripts/fit_elementwise.py
"""

PEAK = 312e12
COPY_GBPS = 2048 * 0.90
# name, hidden, heads, sequence, micro-batch, layers per stage, T_F, T_B, T_W (ms)
CASES = [
    ("1.5B", 2304, 24, 1024, 6, 3, 18.522, 18.086, 9.337),
    ("6.2B", 4096, 32, 1024, 3, 4, 29.718, 29.444, 19.927),
    ("14.6B", 5120, 40, 1024, 1, 3, 11.347, 11.248, 8.132),
    ("28.3B", 6144, 48, 1024, 1, 2, 10.419, 10.207, 7.715),
]
CALCULON_MATRIX = [(128, 0.95), (16, 0.9), (1, 0.6), (0, 0.1)]


def gemm_s(m, n, k, scale=1.0):
    flops = 2.0 * m * n * k
    eff = next(e for threshold, e in CALCULON_MATRIX if flops / 1e9 >= threshold)
    return flops / (PEAK * eff * scale)


def layer(h, a, s, b):
    """Per layer: forward, data-gradient and weight-gradient GEMM seconds at
    scale 1, and the memory-bound bytes forward and backward (layer_ops.cc:
    fp16, eager attention, dropout counted twice forward for its RNG)."""
    T, S = s * b, s * b * a * s
    weights = [(T, 3 * h, h), (T, h, h), (T, 4 * h, h), (T, h, 4 * h)]
    core = [(T * a, s, h / a), (T * a, h / a, s)]  # batched: one product `count` times taller
    fwd = sum(gemm_s(*g) for g in weights + core)
    data = sum(gemm_s(m, k, n) for m, n, k in weights + core) + sum(gemm_s(n, k, m) for m, n, k in core)
    wgrad = sum(gemm_s(k, n, m) for m, n, k in weights)
    fwd_bytes = S * 4 + S * 5 * 2 + T * 4 * h * 4 + 2 * T * h * 4 + 2 * T * h * 7 * 2
    bwd_bytes = S * 4 * 1.5 + S * 5 + T * 4 * h * 4 * 1.5 + 2 * T * h * 4 * 1.5 + 2 * T * h * 7
    return fwd, data, wgrad, fwd_bytes, bwd_bytes


def main():
    rows = [(c, layer(*c[1:5])) for c in CASES]
    scale = sum(l[2] / (c[8] / c[5] / 1e3) for c, l in rows) / len(rows)
    pts = []
    for c, (fwd, data, _, fb, bb) in rows:
        k = c[5]
        pts.append((fb, c[6] / k / 1e3 - fwd / scale))
        pts.append((bb, c[7] / k / 1e3 - data / scale))
    n = len(pts)
    sx, sy = sum(x for x, _ in pts), sum(y for _, y in pts)
    sxx, sxy = sum(x * x for x, _ in pts), sum(x * y for x, y in pts)
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    intercept = (sy - slope * sx) / n
    print(f"GEMM scale {scale:.3f} of Calculon's curve")
    print(f"memory-bound passes: {1 / slope / 1e9:.0f} GB/s = {1 / slope / 1e9 / COPY_GBPS:.3f} of "
          f"{COPY_GBPS:.1f} GB/s copy, plus {intercept * 1e6:.0f} us per layer pass")
    for (x, y) in pts:
        print(f"  {x / 1e9:5.2f} GB  measured {y * 1e3:6.3f} ms  fitted {(intercept + slope * x) * 1e3:6.3f} ms")


if __name__ == "__main__":
    main()
