#!/usr/bin/env python3
"""The runtime's model and training step written in PyTorch eager Python.

The same math as runtime/ (docs/runtime.md, section numbers below refer to it),
the same parameter names and shapes, the same training step as
TrainSession::Step (forward with router-load counting, fp32 cross entropy,
backward, global-norm clipping at 1.0, AdamW with decay on matrices only,
router-bias update), so that kimi-plan-train-bench and this script time the
same work on the same GPU (docs/benchmarks.md, "Runtime training on GPU").

  eager_reference.py --shape bench/kimi-1b.json [--batch 16] [--seq-len 1024]
      [--warmup 3] [--steps 10] [--device cuda] [--dtype bf16] [--kda-chunk 16]
      [--flops-per-token F] [--peak-tflops P] [--adamw default|foreach|single]
  eager_reference.py --shape S --check-dir DIR   # DIR from kimi-plan-train-bench --dump-dir

--check-dir loads the C++ model's fp32 initial weights by name (every name must
match, both ways), runs the forward on the dumped tokens in fp32 on the CPU and
compares the loss with the C++ one. Output ends with one `RESULT key=value ...`
line. Runs on PyTorch 1.13 and 2.x.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


# ------------------------------------------------------------------ shape

def load_shape(path):
    with open(path) as f:
        j = json.load(f)
    att = j["attention"]
    pattern, tail = att["pattern"], att.get("tail", [])
    body = j["layers"] - len(tail)
    assert body >= 0 and body % len(pattern) == 0, "attention pattern does not fit the layers"
    j["kinds"] = [pattern[i % len(pattern)] for i in range(body)] + list(tail)
    return j


def upcast(x):
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x


def rms_normalize(x, eps):  # §1
    xf = upcast(x)
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)


class Proj(nn.Module):
    """y = x W^T with the fp32 master weight cast to the activation dtype at use."""

    def __init__(self, din, dout, std):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dout, din) * std)

    def forward(self, x):
        return F.linear(x, self.weight.to(x.dtype))


class RmsNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return (rms_normalize(x, self.eps) * self.weight).to(x.dtype)


def attn_res_read(blocks, partial, norm_weight, query, eps):  # §2
    values = [upcast(b) for b in blocks]
    if partial is not None:
        values.append(upcast(partial))
    dtype = partial.dtype if partial is not None else blocks[0].dtype
    v = torch.stack(values, dim=-2)
    scores = (rms_normalize(v, eps) * (norm_weight * query)).sum(-1)
    p = torch.softmax(scores, -1).unsqueeze(-2)
    return torch.matmul(p, v).squeeze(-2).to(dtype)


class AttnRes(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.norm = nn.Parameter(torch.ones(dim))
        self.proj = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, blocks, partial):
        return attn_res_read(blocks, partial, self.norm, self.proj, self.eps)


class SwiGlu(nn.Module):  # §6
    def __init__(self, dim, hidden, std, out_std):
        super().__init__()
        self.gate = Proj(dim, hidden, std)
        self.up = Proj(dim, hidden, std)
        self.down = Proj(hidden, dim, out_std)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


# ------------------------------------------------------------------ MoE (§7)

class Router(nn.Module):
    def __init__(self, dim, experts, top_k, scale):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(experts, dim) * 0.02)
        self.register_buffer("bias", torch.zeros(experts))
        self.register_buffer("load", torch.zeros(experts))
        self.top_k, self.scale = top_k, scale

    def forward(self, x, record_load):
        scores = torch.sigmoid(F.linear(upcast(x), self.weight))
        experts = torch.topk(scores + self.bias, self.top_k, dim=-1, largest=True, sorted=True)[1]
        picked = scores.gather(-1, experts)
        weights = picked / picked.sum(-1, keepdim=True) * self.scale
        if record_load:
            with torch.no_grad():
                self.load.add_(torch.bincount(experts.reshape(-1), minlength=self.load.numel()).to(self.load.dtype))
        return experts, weights

    @torch.no_grad()
    def update_bias(self, rate):
        self.bias.add_(torch.sign(self.load.mean() - self.load), alpha=rate)
        self.load.zero_()


class ExpertBank(nn.Module):
    def __init__(self, experts, dim, ffn, std, out_std):
        super().__init__()
        self.gate = nn.Parameter(torch.randn(experts, ffn, dim) * std)
        self.up = nn.Parameter(torch.randn(experts, ffn, dim) * std)
        self.down = nn.Parameter(torch.randn(experts, dim, ffn) * out_std)

    def forward(self, x_sorted, counts):
        dt = x_sorted.dtype
        gate, up, down = self.gate.to(dt).unbind(0), self.up.to(dt).unbind(0), self.down.to(dt).unbind(0)
        outs, offset = [], 0
        for e, c in enumerate(counts):
            if c == 0:
                continue
            xe = x_sorted.narrow(0, offset, c)
            h = F.silu(F.linear(xe, gate[e])) * F.linear(xe, up[e])
            outs.append(F.linear(h, down[e]))
            offset += c
        if not outs:
            return torch.zeros_like(x_sorted)
        return torch.cat(outs, 0)


class Moe(nn.Module):
    def __init__(self, s, std, out_std, route_scale):
        super().__init__()
        d, m = s["hidden"], s["moe"]
        latent = m.get("latent_dim", 0)
        self.num_experts = m["num_experts"]
        self.router = Router(d, self.num_experts, m["top_k"], route_scale)
        self.experts = ExpertBank(self.num_experts, latent if latent > 0 else d, m["expert_ffn"], std, out_std)
        self.latent_down = Proj(d, latent, std) if latent > 0 else None
        self.latent_up = Proj(latent, d, out_std) if latent > 0 else None
        self.shared = SwiGlu(d, m["shared_experts"] * m["shared_ffn"], std, out_std) if m["shared_experts"] > 0 else None

    def forward(self, x, record_load):
        shape = x.shape
        xf = x.reshape(-1, shape[-1])
        experts, weights = self.router(xf, record_load)
        n, k = xf.size(0), experts.size(1)
        flat = experts.reshape(-1)
        order = torch.sort(flat, stable=True, dim=0, descending=False)[1]
        counts = torch.bincount(flat, minlength=self.num_experts).cpu().tolist()
        token_of = torch.div(order, k, rounding_mode="floor")
        routed_in = self.latent_down(xf) if self.latent_down is not None else xf
        y_sorted = self.experts(routed_in.index_select(0, token_of), counts)
        y_slots = torch.zeros_like(y_sorted).index_copy(0, order, y_sorted)
        y = (upcast(y_slots).view(n, k, -1) * weights.unsqueeze(-1)).sum(1).to(x.dtype)
        if self.latent_up is not None:
            y = self.latent_up(y)
        if self.shared is not None:
            y = y + self.shared(xf)
        return y.view(shape)


class Dense(nn.Module):
    def __init__(self, s, std, out_std):
        super().__init__()
        self.inner = SwiGlu(s["hidden"], s["dense_ffn"], std, out_std)

    def forward(self, x, record_load):
        return self.inner(x)


# ------------------------------------------------------------------ attention

def l2_normalize(x, eps):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def chunked(x, chunk, padded):  # [B, T, H, d] -> [B, H, n, C, d]
    y = x.transpose(1, 2)
    t = y.size(2)
    if padded > t:
        pad = list(y.shape)
        pad[2] = padded - t
        y = torch.cat([y, y.new_zeros(pad)], 2)
    shape = list(y.shape)
    shape[2] = padded // chunk
    shape.insert(3, chunk)
    return y.reshape(shape)


def kda_chunked(q, k, v, g, beta, chunk):  # §5, KdaChunked
    b, t_len, h, dk = q.shape
    dv = v.size(3)
    n = (t_len + chunk - 1) // chunk
    padded = n * chunk
    qc, kc = chunked(q, chunk, padded), chunked(k, chunk, padded)
    vc, gc = chunked(v, chunk, padded), chunked(g, chunk, padded)
    bc = chunked(beta.unsqueeze(-1), chunk, padded)
    cum = gc.cumsum(3)
    lower_incl = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    diff = cum.unsqueeze(-2) - cum.unsqueeze(-3)
    decay = torch.exp(diff.masked_fill(lower_incl.logical_not().unsqueeze(-1), -math.inf))
    kk = (kc.unsqueeze(-2) * kc.unsqueeze(-3) * decay).sum(-1)
    qk = (qc.unsqueeze(-2) * kc.unsqueeze(-3) * decay).sum(-1)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    strict = kk * torch.ones(chunk, chunk, dtype=q.dtype, device=q.device).tril(-1)
    tri = eye + bc * strict
    w = torch.linalg.solve_triangular(tri, bc * vc, upper=False, left=True, unitriangular=True)
    y = torch.linalg.solve_triangular(tri, bc * (kc * torch.exp(cum)), upper=False, left=True, unitriangular=True)
    q_decayed = qc * torch.exp(cum)
    last = cum.narrow(3, chunk - 1, 1)
    k_to_end = kc * torch.exp(last - cum)
    chunk_decay = torch.exp(last).transpose(-1, -2)
    s = q.new_zeros(b, h, dk, dv)
    outs = []
    for i in range(n):
        u = w.select(2, i) - torch.matmul(y.select(2, i), s)
        outs.append(torch.matmul(q_decayed.select(2, i), s) + torch.matmul(qk.select(2, i), u))
        s = chunk_decay.select(2, i) * s + torch.matmul(k_to_end.select(2, i).transpose(-1, -2), u)
    return torch.cat(outs, 2).narrow(2, 0, t_len).transpose(1, 2)


def causal_depthwise_conv(x, weight):
    t, c, kernel = x.size(1), weight.size(0), weight.size(1)
    y = F.conv1d(x.transpose(1, 2), weight.to(x.dtype).unsqueeze(1), None, 1, kernel - 1, 1, c)
    return y.narrow(2, 0, t).transpose(1, 2)


def apply_rope(x, theta):
    t, d = x.size(1), x.size(-1)
    half = d // 2
    xf = upcast(x)
    inv_freq = torch.pow(theta, -torch.arange(0, half, dtype=xf.dtype, device=xf.device) * (2.0 / d))
    angles = torch.outer(torch.arange(0, t, dtype=xf.dtype, device=xf.device), inv_freq).view(1, t, 1, half)
    cos, sin = torch.cos(angles), torch.sin(angles)
    x1, x2 = xf.narrow(-1, 0, half), xf.narrow(-1, half, half)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)


def causal_attention(q, k, v, scale):
    t = q.size(2)
    scores = upcast(torch.matmul(q, k.transpose(-1, -2))) * scale
    future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    p = torch.softmax(scores.masked_fill(future, -math.inf), -1)
    return torch.matmul(p.to(v.dtype), v)


class Kda(nn.Module):
    def __init__(self, s, std, out_std, chunk, eps):
        super().__init__()
        d, h = s["hidden"], s["heads"]
        dk, dv, kernel = s["kda"]["head_dim_k"], s["kda"]["head_dim_v"], s["kda"]["conv_kernel"]
        self.heads, self.dk, self.dv, self.chunk, self.eps = h, dk, dv, chunk, eps
        hk, hv = h * dk, h * dv
        self.q_proj, self.k_proj, self.v_proj = Proj(d, hk, std), Proj(d, hk, std), Proj(d, hv, std)
        bound = 1.0 / math.sqrt(kernel)
        self.q_conv = nn.Parameter(torch.empty(hk, kernel).uniform_(-bound, bound))
        self.k_conv = nn.Parameter(torch.empty(hk, kernel).uniform_(-bound, bound))
        self.v_conv = nn.Parameter(torch.empty(hv, kernel).uniform_(-bound, bound))
        self.f_a, self.f_b = Proj(d, dk, std), Proj(dk, hk, std)
        self.A_log = nn.Parameter(torch.log(torch.empty(h).uniform_(1.0, 16.0)))
        dt = torch.exp(torch.empty(hk).uniform_(math.log(1e-3), math.log(0.1)))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.b_proj = Proj(d, h, std)
        self.g_a, self.g_b = Proj(d, dv, std), Proj(dv, hv, std)
        self.o_norm = nn.Parameter(torch.ones(dv))
        self.o_proj = Proj(hv, d, out_std)

    def forward(self, x):
        b, t = x.shape[:2]
        h, dk, dv = self.heads, self.dk, self.dv

        def conv(p, w, dim):
            return F.silu(causal_depthwise_conv(upcast(p(x)), w)).view(b, t, h, dim)

        q = l2_normalize(conv(self.q_proj, self.q_conv, dk), self.eps) / math.sqrt(dk)
        k = l2_normalize(conv(self.k_proj, self.k_conv, dk), self.eps)
        v = conv(self.v_proj, self.v_conv, dv)
        forget = upcast(self.f_b(self.f_a(x))).view(b, t, h, dk)
        g = -torch.exp(self.A_log).view(1, 1, h, 1) * F.softplus(forget + self.dt_bias.view(h, dk))
        beta = torch.sigmoid(upcast(self.b_proj(x)))
        assert self.chunk > 0, "only the chunked form is written here (the runtime's default)"
        o = kda_chunked(q, k, v, g, beta, self.chunk)
        gate = upcast(self.g_b(self.g_a(x))).view(b, t, h, dv)
        normed = rms_normalize(o, self.eps) * self.o_norm * torch.sigmoid(gate)
        return self.o_proj(normed.reshape(b, t, h * dv).to(x.dtype))


class Mla(nn.Module):  # §4
    def __init__(self, s, std, out_std, eps, theta):
        super().__init__()
        d, h, m = s["hidden"], s["heads"], s["mla"]
        self.heads, self.nope, self.rope, self.v_dim = h, m["qk_nope_head_dim"], m["qk_rope_head_dim"], m["v_head_dim"]
        self.kv_rank, self.theta = m["kv_lora_rank"], theta
        qk = self.nope + self.rope
        if m["q_lora_rank"] > 0:
            self.q_a = Proj(d, m["q_lora_rank"], std)
            self.q_norm = RmsNorm(m["q_lora_rank"], eps)
            self.q_b = Proj(m["q_lora_rank"], h * qk, std)
            self.q = None
        else:
            self.q = Proj(d, h * qk, std)
        self.kv_a = Proj(d, self.kv_rank + self.rope, std)
        self.kv_norm = RmsNorm(self.kv_rank, eps)
        self.kv_b = Proj(self.kv_rank, h * (self.nope + self.v_dim), std)
        self.gate = Proj(d, h * self.v_dim, std)
        self.o_proj = Proj(h * self.v_dim, d, out_std)

    def forward(self, x):
        b, t = x.shape[:2]
        h, nope, rope, vd = self.heads, self.nope, self.rope, self.v_dim
        q = (self.q(x) if self.q is not None else self.q_b(self.q_norm(self.q_a(x)))).view(b, t, h, nope + rope)
        kv = self.kv_a(x)
        kv_up = self.kv_b(self.kv_norm(kv.narrow(-1, 0, self.kv_rank))).view(b, t, h, nope + vd)
        q_full, k_full = q, kv_up.narrow(-1, 0, nope)
        if rope > 0:
            k_rope = apply_rope(kv.narrow(-1, self.kv_rank, rope).unsqueeze(2), self.theta)
            q_full = torch.cat([q.narrow(-1, 0, nope), apply_rope(q.narrow(-1, nope, rope), self.theta)], -1)
            k_full = torch.cat([k_full, k_rope.expand(b, t, h, rope)], -1)
        v = kv_up.narrow(-1, nope, vd)
        o = causal_attention(q_full.transpose(1, 2), k_full.transpose(1, 2), v.transpose(1, 2),
                             1.0 / math.sqrt(nope + rope)).transpose(1, 2).reshape(b, t, h * vd)
        gated = o * torch.sigmoid(upcast(self.gate(x))).to(x.dtype)
        return self.o_proj(gated)


# ------------------------------------------------------------------ model (§2)

class DecoderLayer(nn.Module):
    def __init__(self, s, layer, opts):
        super().__init__()
        d, eps = s["hidden"], opts["eps"]
        std, out_std = 0.02, 0.02 / math.sqrt(2.0 * s["layers"])
        self.index, self.block = layer, s["attn_res_block"]
        self.attn_res = AttnRes(d, eps) if self.block > 0 and layer > 0 else None
        self.ffn_res = AttnRes(d, eps) if self.block > 0 else None
        self.attn_norm, self.ffn_norm = RmsNorm(d, eps), RmsNorm(d, eps)
        kind = s["kinds"][layer]
        if kind == "kda":
            self.attention = Kda(s, std, out_std, opts["kda_chunk"], eps)
        elif kind == "mla":
            self.attention = Mla(s, std, out_std, eps, opts["rope_theta"])
        else:
            raise ValueError("attention kind " + kind + " is not written here")
        is_moe = s.get("moe", {}).get("num_experts", 0) > 0 and layer >= s["dense_layers"]
        if is_moe:
            self.moe = Moe(s, std, out_std, opts["route_scale"])
            self.ffn = None
        else:
            self.ffn = Dense(s, std, out_std)
            self.moe = None

    def commits_block(self):
        return self.block > 0 and self.index % self.block == 0

    def body(self, blocks, partial, record_load):
        attn_in = self.attn_res(blocks, partial) if self.attn_res is not None else (
            partial if partial is not None else blocks[-1])
        attn_out = self.attention(self.attn_norm(attn_in))
        prefix = partial + attn_out if partial is not None else attn_out
        ffn_in = self.ffn_res(blocks, prefix) if self.ffn_res is not None else prefix
        mixer = self.moe if self.moe is not None else self.ffn
        return prefix + mixer(self.ffn_norm(ffn_in), record_load)

    def forward(self, hidden, blocks, record_load):
        partial = None
        if self.commits_block():
            blocks = blocks + [hidden]
        else:
            partial = hidden
        return self.body(blocks, partial, record_load), blocks


class Embedding(nn.Module):
    def __init__(self, s, bf16):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(s["vocab"], s["hidden"]))
        self.bf16 = bf16

    def forward(self, tokens):
        e = F.embedding(tokens, self.weight)
        return e.to(torch.bfloat16) if self.bf16 else e


class Head(nn.Module):
    def __init__(self, s, eps):
        super().__init__()
        d = s["hidden"]
        self.output_res = AttnRes(d, eps) if s["attn_res_block"] > 0 else None
        self.norm = RmsNorm(d, eps)
        self.lm_head = Proj(d, s["vocab"], 1.0 / math.sqrt(d))

    def forward(self, hidden, blocks):
        h = self.output_res(blocks, hidden) if self.output_res is not None else hidden
        return upcast(self.lm_head(self.norm(h)))


class Model(nn.Module):
    def __init__(self, s, bf16, kda_chunk):
        super().__init__()
        opts = dict(eps=1e-6, kda_chunk=kda_chunk, rope_theta=10000.0, route_scale=2.5)
        self.embedding = Embedding(s, bf16)
        self.layers = nn.ModuleDict({str(l): DecoderLayer(s, l, opts) for l in range(s["layers"])})
        self.head = Head(s, opts["eps"])

    def forward(self, tokens, record_load=False):
        hidden, blocks = self.embedding(tokens), []
        for layer in self.layers.values():
            hidden, blocks = layer(hidden, blocks, record_load)
        return self.head(hidden, blocks)

    def update_router_biases(self, rate):
        for layer in self.layers.values():
            if layer.moe is not None:
                layer.moe.router.update_bias(rate)


def lm_loss(logits, targets):
    return F.cross_entropy(upcast(logits.reshape(-1, logits.size(-1))), targets.reshape(-1))


def runtime_name(name):
    """Python parameter name -> the C++ runtime's (the dense FFN sits one module deeper here)."""
    return name.replace(".ffn.inner.", ".ffn.")


# ------------------------------------------------------------------ modes

def check(args, shape):
    model = Model(shape, bf16=False, kda_chunk=args.kda_chunk)
    params = {runtime_name(n): p for n, p in model.named_parameters()}
    loaded = set()
    with open(os.path.join(args.check_dir, "manifest.txt")) as f:
        for line in f:
            name, *dims = line.split()
            dims = [int(x) for x in dims]
            assert name in params, "the C++ model has " + name + ", this one does not"
            p = params[name]
            assert list(p.shape) == dims, f"{name}: shape {list(p.shape)} here, {dims} in C++"
            data = torch.from_numpy(__import__("numpy").fromfile(os.path.join(args.check_dir, name + ".bin"),
                                                                   dtype="<f4").reshape(dims).copy())
            with torch.no_grad():
                p.copy_(data)
            loaded.add(name)
    missing = sorted(set(params) - loaded)
    assert not missing, "parameters the C++ model lacks: " + ", ".join(missing[:5])
    with open(os.path.join(args.check_dir, "loss.txt")) as f:
        cpp_loss, b, t = f.read().split()
    b, t = int(b), int(t)
    import numpy as np
    tokens = torch.from_numpy(np.fromfile(os.path.join(args.check_dir, "tokens.bin"), dtype="<i8").reshape(b, t + 1).copy())
    with torch.no_grad():
        loss = lm_loss(model(tokens[:, :t]), tokens[:, 1:]).item()
    n = sum(p.numel() for p in model.parameters())
    rel = abs(loss - float(cpp_loss)) / abs(float(cpp_loss))
    print(f"check: {len(loaded)} parameter tensors ({n} parameters) match by name and shape; "
          f"loss {loss:.8f} here vs {float(cpp_loss):.8f} C++ (rel. diff {rel:.2e})")
    print(f"RESULT impl=check params={n} loss={loss:.8f} cpp_loss={float(cpp_loss):.8f} rel_diff={rel:.3e}")
    return 0 if rel < 1e-5 else 1


def measure_peak(device):
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    for _ in range(3):
        c = a @ b
    torch.cuda.synchronize()
    tflops = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(10):
            c = a @ b
        torch.cuda.synchronize()
        tflops.append(10 * 2.0 * n ** 3 / (time.perf_counter() - t0) / 1e12)
    del c
    return statistics.median(tflops)


def bench(args, shape):
    device = torch.device(args.device)
    torch.manual_seed(0)
    own_peak = measure_peak(device) if device.type == "cuda" else 0.0
    peak = args.peak_tflops if args.peak_tflops > 0 else own_peak
    print(f"bf16 matmul peak (8192^3, random data, measured here): {own_peak:.1f} TFLOP/s; MFU uses {peak:.1f}")
    model = Model(shape, bf16=args.dtype == "bf16", kda_chunk=args.kda_chunk).to(device)
    model.train()
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    kw = {}
    if args.adamw == "foreach":
        kw["foreach"] = True
    elif args.adamw == "single":
        kw["foreach"] = False
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **kw)
    print(f"python eager: torch {torch.__version__}, {n_params} parameters (fp32 master weights), dtype {args.dtype}, "
          f"{args.batch} x {args.seq_len} tokens per step, KDA chunk {args.kda_chunk}, AdamW {args.adamw}")
    b, t = args.batch, args.seq_len
    total = args.warmup + args.steps
    gen = torch.Generator().manual_seed(1)
    times, last_loss = [], 0.0
    for i in range(total):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        # As TrainSession::Step: a batch made on the CPU and copied, the
        # warmup-cosine learning rate set per group, then the step.
        tokens = torch.randint(shape["vocab"], (b, t + 1), generator=gen).to(device)
        lr = 3e-4 * (i + 1) / 2 if i < 2 else 3e-4 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (i - 2) / max(1, total - 2)))))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        logits = model(tokens[:, :t], record_load=True)
        loss = lm_loss(logits, tokens[:, 1:])
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        last_loss = loss.item()
        if not (math.isfinite(last_loss) and math.isfinite(float(grad_norm))):
            print("non-finite loss or gradient", file=sys.stderr)
            return 1
        opt.step()
        model.update_router_biases(1e-3)
        if device.type == "cuda":
            torch.cuda.synchronize()
        s = time.perf_counter() - t0
        print(f"step {i + 1:2d}{' (warm-up)' if i < args.warmup else ''}  loss {last_loss:.4f}  {s * 1e3:.1f} ms")
        if i >= args.warmup:
            times.append(s)
    if args.profile:
        profile_step(args, model, opt, params, shape, device, gen)
    med = statistics.median(times)
    tps = b * t / med
    mfu = args.flops_per_token * tps / (peak * 1e12) if peak > 0 and args.flops_per_token > 0 else 0.0
    mem = torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else 0.0
    print(f"Python eager: median step {med * 1e3:.2f} ms (min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f} over "
          f"{args.steps} steps), {tps:.0f} tokens/s, {args.flops_per_token * tps / 1e12:.1f} TFLOP/s model FLOPs, "
          f"MFU {mfu * 100:.1f}% of the measured peak, peak memory {mem:.1f} GB")
    print(f"RESULT impl=python adamw={args.adamw} median_step_ms={med * 1e3:.3f} tokens_per_s={tps:.1f} mfu={mfu:.4f} "
          f"flops_per_token={args.flops_per_token:.6e} peak_tflops={peak:.2f} own_peak_tflops={own_peak:.2f} "
          f"params={n_params} last_loss={last_loss:.4f} peak_gb={mem:.2f}")
    return 0


def profile_step(args, model, opt, params, shape, device, gen):
    """One more step under torch.profiler: GPU kernel time by operator, to args.profile."""
    from torch.profiler import ProfilerActivity, profile
    b, t = args.batch, args.seq_len
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])) as prof:
        tokens = torch.randint(shape["vocab"], (b, t + 1), generator=gen).to(device)
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model(tokens[:, :t], record_load=True), tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        loss.item()
        opt.step()
        model.update_router_biases(1e-3)
        sync()
    wall = time.perf_counter() - t0
    events = prof.key_averages()
    key = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"
    # Kernels only: operator rows repeat their kernels' time.
    gpu_us = sum(getattr(e, key) for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    with open(args.profile, "w") as f:
        f.write(f"profiled step: wall {wall * 1e3:.1f} ms (profiler on), GPU kernel time {gpu_us / 1e3:.1f} ms\n")
        f.write(events.table(sort_by=key, row_limit=30))
    print(f"profiled step: wall {wall * 1e3:.1f} ms (profiler on), GPU kernel time {gpu_us / 1e3:.1f} ms -> {args.profile}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", required=True)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--kda-chunk", type=int, default=16)
    ap.add_argument("--flops-per-token", type=float, default=0.0, help="from kimi-plan-train-bench (the planner's formula)")
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="0: use the peak measured here")
    ap.add_argument("--adamw", default="default", choices=["default", "foreach", "single"],
                    help="PyTorch's default implementation (foreach on CUDA), or force one")
    ap.add_argument("--check-dir", default="")
    ap.add_argument("--profile", default="", help="after the timed steps, profile one more into this file")
    args = ap.parse_args()
    shape = load_shape(args.shape)
    if args.check_dir:
        return check(args, shape)
    return bench(args, shape)


if __name__ == "__main__":
    sys.exit(main())
