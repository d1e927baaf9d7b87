# The blockwise-scaled FP8 GEMM of PyTorch's torch._scaled_mm, alone: which
# pairings of 1x128 tiles and 128x128 blocks it takes (against fp64 over
# the dequantised operands) and its speed against bf16 at expert shapes.
# Run on the GPU machine's Python (scripts/gpu_fp8_bench.sh, PROBE=...).
import torch, time
torch.manual_seed(0)
dev = "cuda"
print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())
print("has F.scaled_mm", hasattr(torch.nn.functional, "scaled_mm"), "has _scaled_grouped_mm", hasattr(torch, "_scaled_grouped_mm"))
E4 = torch.float8_e4m3fn

def q_rows(x):  # 1x128 along the last dim: x [M,K] -> q [M,K], s [M,K/128]
    M, K = x.shape
    t = x.float().view(M, K // 128, 128)
    s = t.abs().amax(-1) / 448.0
    s = torch.where(s > 0, s, torch.ones_like(s))
    return (t / s[..., None]).to(E4).view(M, K), s

def q_blocks(w):  # 128x128: w [N,K] -> q, s [N/128, K/128]
    N, K = w.shape
    t = w.float().view(N // 128, 128, K // 128, 128)
    s = t.abs().amax((1, 3)) / 448.0
    s = torch.where(s > 0, s, torch.ones_like(s))
    return (t / s[:, None, :, None]).to(E4).view(N, K), s

def deq_rows(q, s):
    M, K = q.shape
    return (q.double().view(M, K // 128, 128) * s.double()[..., None]).view(M, K)

def deq_blocks(q, s):
    N, K = q.shape
    return (q.double().view(N // 128, 128, K // 128, 128) * s.double()[:, None, :, None]).view(N, K)

def colmajor(s):  # same values, stride (1, rows)
    return s.t().contiguous().t()

def try_mm(name, a, b, sa, sb, ref):
    try:
        out = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        print(f"{name}: OK max rel err {err:.3e}")
        return True
    except Exception as e:
        print(f"{name}: FAIL {str(e).splitlines()[0][:160]}")
        return False

for (M, K, N) in [(256, 512, 384), (200, 512, 384)]:
    x = torch.randn(M, K, device=dev); w = torch.randn(N, K, device=dev)
    xq, xs = q_rows(x); wq, ws = q_blocks(w)
    ref = deq_rows(xq, xs) @ deq_blocks(wq, ws).t()
    # A 1x128, B 128x128: b = wq.t() (K,N col-major); scale_b (K/128, N/128) col-major i.e. ws.t() stride(1,K/128)
    try_mm(f"M{M} fwd 1x128 x 128x128", xq, wq.t(), colmajor(xs), ws.t(), ref)
    # 1x128 x 1x128 (wgrad form): B rows quantised along K
    wq2, ws2 = q_rows(w)
    ref2 = deq_rows(xq, xs) @ deq_rows(wq2, ws2).t()
    try_mm(f"M{M} 1x128 x 1x128", xq, wq2.t(), colmajor(xs), colmajor(ws2).t(), ref2)
    # 128x128 x 1x128
    if M % 128 == 0:
        xq3, xs3 = q_blocks(x)
        ref3 = deq_blocks(xq3, xs3) @ deq_rows(wq2, ws2).t()
        try_mm(f"M{M} 128x128 x 1x128", xq3, wq2.t(), xs3, colmajor(ws2).t(), ref3)

def bench(f, n=20):
    for _ in range(3): f()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): f()
    torch.cuda.synchronize(); return (time.perf_counter() - t) / n

for (M, K, N) in [(2048, 512, 1536), (2048, 1536, 512), (1024, 4096, 512), (1024, 512, 4096), (8192, 7168, 2048), (4096, 4096, 4096)]:
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16); w = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
    xq, xs = q_rows(x); wq, ws = q_blocks(w)
    xsc = colmajor(xs); bt = wq.t(); wst = ws.t()
    try:
        t8 = bench(lambda: torch._scaled_mm(xq, bt, scale_a=xsc, scale_b=wst, out_dtype=torch.bfloat16))
    except Exception as e:
        t8 = float("nan"); print("fail", str(e)[:100])
    t16 = bench(lambda: x @ w.t())
    tq = bench(lambda: q_rows(x))
    fl = 2 * M * K * N
    print(f"M{M} K{K} N{N}: fp8 {t8*1e6:.1f} us ({fl/t8/1e12:.0f} TF/s)  bf16 {t16*1e6:.1f} us ({fl/t16/1e12:.0f} TF/s)  aten quant x {tq*1e6:.1f} us")
