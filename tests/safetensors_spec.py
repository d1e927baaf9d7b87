#!/usr/bin/env python3
"""The safetensors format from its specification alone (standard library
only), as an independent writer and reader for kimi-plan's tests:

  write DIR            a small checkpoint with Kimi K2.6's Hugging Face names
                       (two shards and model.safetensors.index.json; BF16
                       weights, an F32 router bias, INT4 experts packed as
                       compressed-tensors stores them: I32 weight_packed,
                       BF16 weight_scale per group of 32, I32 weight_shape)
  check DIR JSON       every tensor of DIR as this reader sees it equals
                       `kimi-plan checkpoint inspect DIR --json`'s listing
  corrupt DIR KIND     breaks DIR one way (truncate, offsets, shard, index, shape)

Format: 8 bytes little-endian u64 N, N bytes of JSON {name: {dtype, shape,
data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the tensors'
bytes, which the offsets index entirely without holes or overlaps."""
import json
import os
import random
import struct
import sys

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def encode(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] -> the file's bytes."""
    header, at = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        assert len(data) == numel(shape) * SIZES[dtype], name
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        at += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def decode(path):
    """-> {name: (dtype, shape, bytes)}; raises ValueError on what the format forbids."""
    raw = open(path, "rb").read()
    if len(raw) < 8:
        raise ValueError("too short")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError("truncated header")
    header = json.loads(raw[8:8 + n])
    buffer = raw[8 + n:]
    header.pop("__metadata__", None)
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    at = 0
    for b, e, k in spans:
        if b != at or e - b != numel(header[k]["shape"]) * SIZES[header[k]["dtype"]]:
            raise ValueError("bad offsets for " + k)
        at = e
    if at != len(buffer):
        raise ValueError("buffer not indexed exactly")
    return {k: (v["dtype"], v["shape"], buffer[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def rand_bytes(rng, count):
    return bytes(rng.getrandbits(8) for _ in range(count))


def kimi_tensors(rng, hidden=32, vocab=64, experts=2, expert_ffn=64, q_rank=16, kv_rank=16, heads=2):
    """Kimi K2.6's names (DeepseekV3 layout), a dense layer 0 and an MoE layer 1."""
    t = []
    def bf16(name, shape):
        t.append((name, "BF16", shape, rand_bytes(rng, numel(shape) * 2)))
    bf16("model.embed_tokens.weight", [vocab, hidden])
    for layer in (0, 1):
        p = "model.layers.%d." % layer
        bf16(p + "input_layernorm.weight", [hidden])
        bf16(p + "post_attention_layernorm.weight", [hidden])
        bf16(p + "self_attn.q_a_proj.weight", [q_rank, hidden])
        bf16(p + "self_attn.q_a_layernorm.weight", [q_rank])
        bf16(p + "self_attn.q_b_proj.weight", [heads * 24, q_rank])
        bf16(p + "self_attn.kv_a_proj_with_mqa.weight", [kv_rank + 8, hidden])
        bf16(p + "self_attn.kv_a_layernorm.weight", [kv_rank])
        bf16(p + "self_attn.kv_b_proj.weight", [heads * 32, kv_rank])
        bf16(p + "self_attn.o_proj.weight", [hidden, heads * 16])
    for proj, shape in (("gate_proj", [128, 32]), ("up_proj", [128, 32]), ("down_proj", [32, 128])):
        bf16("model.layers.0.mlp.%s.weight" % proj, shape)
    bf16("model.layers.1.mlp.gate.weight", [experts, hidden])
    t.append(("model.layers.1.mlp.gate.e_score_correction_bias", "F32", [experts], rand_bytes(rng, experts * 4)))
    for e in range(experts):
        for proj, (rows, cols) in (("gate_proj", (expert_ffn, hidden)), ("up_proj", (expert_ffn, hidden)),
                                   ("down_proj", (hidden, expert_ffn))):
            p = "model.layers.1.mlp.experts.%d.%s." % (e, proj)
            t.append((p + "weight_packed", "I32", [rows, cols // 8], rand_bytes(rng, rows * cols // 8 * 4)))
            t.append((p + "weight_scale", "BF16", [rows, cols // 32], rand_bytes(rng, rows * cols // 32 * 2)))
            t.append((p + "weight_shape", "I32", [2], struct.pack("<ii", rows, cols)))
    for proj, shape in (("gate_proj", [64, 32]), ("up_proj", [64, 32]), ("down_proj", [32, 64])):
        bf16("model.layers.1.mlp.shared_experts.%s.weight" % proj, shape)
    bf16("model.norm.weight", [hidden])
    bf16("lm_head.weight", [vocab, hidden])
    return t


def write(folder):
    os.makedirs(folder, exist_ok=True)
    tensors = kimi_tensors(random.Random(7))
    half = len(tensors) // 2
    shards = {"model-00001-of-00002.safetensors": tensors[:half], "model-00002-of-00002.safetensors": tensors[half:]}
    weight_map = {}
    for name, part in shards.items():
        open(os.path.join(folder, name), "wb").write(encode(part, {"format": "pt"}))
        weight_map.update({t[0]: name for t in part})
    total = sum(len(t[3]) for t in tensors)
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(folder, "model.safetensors.index.json"), "w"), indent=2)


def check(folder, listing):
    listed = json.load(open(listing))["tensors"]
    assert all(t.pop("runtime") for t in listed), "a tensor with no runtime name"
    got = {t["name"]: t for t in listed}
    index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))["weight_map"]
    want = {}
    for shard in sorted(set(index.values())):
        for name, (dtype, shape, data) in decode(os.path.join(folder, shard)).items():
            want[name] = {"name": name, "dtype": dtype, "shape": shape, "bytes": len(data), "file": shard}
    assert got == want, (sorted(set(got) ^ set(want)), [k for k in want if got.get(k) != want[k]][:3])


def corrupt(folder, kind):
    first = os.path.join(folder, "model-00001-of-00002.safetensors")
    second = os.path.join(folder, "model-00002-of-00002.safetensors")
    raw = open(first, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    if kind == "truncate":
        kept = open(second, "rb").read()[:-100]
        open(second, "wb").write(kept)
    elif kind in ("offsets", "shape"):
        name = "model.layers.0.self_attn.q_a_proj.weight"
        if kind == "offsets":
            header[name]["data_offsets"][1] += 2
        else:
            header[name]["shape"] = [header[name]["shape"][0], header[name]["shape"][1] + 1]
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        open(first, "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    elif kind == "shard":
        os.remove(second)
    elif kind == "index":
        path = os.path.join(folder, "model.safetensors.index.json")
        index = json.load(open(path))
        index["weight_map"]["model.layers.7.mlp.gate.weight"] = "model-00001-of-00002.safetensors"
        json.dump(index, open(path, "w"))
    else:
        raise SystemExit("unknown corruption " + kind)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "write":
        write(sys.argv[2])
    elif cmd == "check":
        check(sys.argv[2], sys.argv[3])
    elif cmd == "corrupt":
        corrupt(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)
