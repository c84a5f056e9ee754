#!/usr/bin/python3
"""Reference forward pass of Hugging Face LlamaForCausalLM / Qwen2ForCausalLM /
Qwen3ForCausalLM, written from the transformers modelling code's equations with plain
torch ops in float64, for the C++ parity test. It shares no code with rlmesh: it reads
config.json and model.safetensors itself (header parsed with json, bytes viewed with
torch.frombuffer).

usage: reference.py --model DIR --ids IDS.json --out LOGITS.bin
IDS.json is a list of token-id lists; LOGITS.bin receives, for each list in order, its
[len, vocab] logits as little-endian float64; for a ...ForSequenceClassification checkpoint (a
reward model), its [num_labels] scores read as transformers reads them.
Runs with Debian's /usr/bin/python3 (python3-torch); transformers is not needed.
"""
import argparse
import json
import math
import os
import struct

import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(blob[base + begin:base + end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        tensors[name] = t.to(torch.float64)
    return tensors


def inverse_frequencies(cfg, head_dim):
    theta = float(cfg.get("rope_theta", 10000.0))
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        factor = rs["factor"]
        low, high = rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        mid = (1 - smooth) * scaled / factor + smooth * scaled
        is_mid = (wavelen >= old / high) & (wavelen <= old / low)
        inv = torch.where(is_mid, mid, scaled)
    return inv


def rms_norm(x, w, eps):
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def linear(x, w, b=None):
    y = x @ w.t()
    return y if b is None else y + b


def forward(cfg, w, ids):
    # The decoder family: the same for ...ForCausalLM and ...ForSequenceClassification.
    arch = cfg["architectures"][0].replace("ForSequenceClassification", "ForCausalLM")
    hidden = cfg["hidden_size"]
    n_heads = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_heads
    head_dim = cfg.get("head_dim") or hidden // n_heads
    eps = cfg.get("rms_norm_eps", 1e-6)
    qkv_bias = arch == "Qwen2ForCausalLM" or cfg.get("attention_bias", False)
    o_bias = arch != "Qwen2ForCausalLM" and cfg.get("attention_bias", False)
    qk_norm = arch == "Qwen3ForCausalLM"

    t = len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    freqs = torch.outer(torch.arange(t, dtype=torch.float64), inverse_frequencies(cfg, head_dim))
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        bias = (lambda n: w[p + f"self_attn.{n}.bias"]) if qkv_bias else (lambda n: None)
        q = linear(h, w[p + "self_attn.q_proj.weight"], bias("q_proj")).view(t, n_heads, head_dim)
        k = linear(h, w[p + "self_attn.k_proj.weight"], bias("k_proj")).view(t, n_kv, head_dim)
        v = linear(h, w[p + "self_attn.v_proj.weight"], bias("v_proj")).view(t, n_kv, head_dim)
        if qk_norm:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = n_heads // n_kv
        k = k.repeat_interleave(group, dim=0)
        v = v.repeat_interleave(group, dim=0)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(head_dim)
        scores = scores.masked_fill(~causal, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v  # [H, T, hd]
        attn = attn.transpose(0, 1).reshape(t, n_heads * head_dim)
        x = x + linear(attn, w[p + "self_attn.o_proj.weight"],
                       w[p + "self_attn.o_proj.bias"] if o_bias else None)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].t())
        up = h @ w[p + "mlp.up_proj.weight"].t()
        x = x + (gate * up) @ w[p + "mlp.down_proj.weight"].t()
    x = rms_norm(x, w["model.norm.weight"], eps)
    if is_sequence_classifier(cfg):
        return x @ w["score.weight"].t()  # [T, num_labels]: the score head, never tied
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.t()


def is_sequence_classifier(cfg):
    return cfg["architectures"][0].endswith("ForSequenceClassification")


def pooled(cfg, ids, logits):
    """transformers' ...ForSequenceClassification: the row of the last token that is not
    pad_token_id (index 0 when all are; the last token when there is no pad_token_id)."""
    pad = cfg.get("pad_token_id")
    if pad is None:
        return logits[-1]
    kept = [i for i, t in enumerate(ids) if t != pad]
    return logits[kept[-1] if kept else 0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    weights = read_safetensors(os.path.join(args.model, "model.safetensors"))
    with open(args.ids) as f:
        sequences = json.load(f)
    with open(args.out, "wb") as out:
        for ids in sequences:
            logits = forward(cfg, weights, ids).contiguous()
            if is_sequence_classifier(cfg):
                logits = pooled(cfg, ids, logits).contiguous()
            out.write(struct.pack("<%dd" % logits.numel(), *logits.flatten().tolist()))


if __name__ == "__main__":
    with torch.no_grad():
        main()
