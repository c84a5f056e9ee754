#!/usr/bin/python3
"""Baseline for tests/bench/generate: a plain Hugging-Face-style PyTorch generation loop.

Written for the benchmark (Debian's python3-torch 1.13 has no transformers): reads a
Qwen3/Qwen2/Llama checkpoint folder (config.json + model.safetensors, float32), builds the
decoder the way transformers' eager "modeling_qwen3.py" does (RMSNorm, q/k norm, RoPE,
repeat_kv attention with matmul + softmax, SwiGLU MLP) and generates greedily with a KV cache
that grows by torch.cat each step, as transformers' DynamicCache does. Prints one JSON line:
{"tokens_per_s": ..., "seconds": ..., "first_row": [...]}.

Usage: hf_generate_loop.py --model DIR --batch B --prompt-len P --new-tokens N [--threads 2]
"""
import argparse
import json
import math
import struct
import time

import torch


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    buf = bytearray(data[base:])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: tensor {name}: expected F32, got {info['dtype']}")
        begin, end = info["data_offsets"]
        t = torch.frombuffer(buf, dtype=torch.float32, count=(end - begin) // 4, offset=begin)
        tensors[name] = t.reshape(info["shape"])
    return tensors


class Model:
    def __init__(self, model_dir):
        with open(f"{model_dir}/config.json") as f:
            c = json.load(f)
        self.w = load_safetensors(f"{model_dir}/model.safetensors")
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads", self.heads)
        self.hidden = c["hidden_size"]
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.qk_norm = c.get("model_type") == "qwen3"
        self.tied = c.get("tie_word_embeddings", False)
        theta = c.get("rope_theta", 10000.0)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))

    def rms(self, x, weight):
        var = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(var + self.eps))

    def rope(self, positions):
        freqs = positions[..., None].float() * self.inv_freq  # [B, T, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]  # [B, 1, T, hd]

    @staticmethod
    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    def forward(self, ids, positions, mask, cache):
        """ids [B, T]; positions [B, T]; mask additive [B, 1, T, S]; cache: list of (k, v)."""
        w = self.w
        x = w["model.embed_tokens.weight"][ids]
        cos, sin = self.rope(positions)
        b, t, _ = x.shape
        for i in range(self.layers):
            p = f"model.layers.{i}."
            h = self.rms(x, w[p + "input_layernorm.weight"])
            q = torch.nn.functional.linear(h, w[p + "self_attn.q_proj.weight"], w.get(p + "self_attn.q_proj.bias"))
            k = torch.nn.functional.linear(h, w[p + "self_attn.k_proj.weight"], w.get(p + "self_attn.k_proj.bias"))
            v = torch.nn.functional.linear(h, w[p + "self_attn.v_proj.weight"], w.get(p + "self_attn.v_proj.bias"))
            q = q.view(b, t, self.heads, self.head_dim)
            k = k.view(b, t, self.kv_heads, self.head_dim)
            v = v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
            if self.qk_norm:
                q = self.rms(q, w[p + "self_attn.q_norm.weight"])
                k = self.rms(k, w[p + "self_attn.k_norm.weight"])
            q = q.transpose(1, 2)
            k = k.transpose(1, 2)
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            if cache[i] is not None:
                k = torch.cat((cache[i][0], k), dim=2)
                v = torch.cat((cache[i][1], v), dim=2)
            cache[i] = (k, v)
            rep = self.heads // self.kv_heads
            kr = k[:, :, None].expand(b, self.kv_heads, rep, k.shape[2], self.head_dim).reshape(b, self.heads, k.shape[2], self.head_dim)
            vr = v[:, :, None].expand(b, self.kv_heads, rep, v.shape[2], self.head_dim).reshape(b, self.heads, v.shape[2], self.head_dim)
            scores = torch.matmul(q, kr.transpose(2, 3)) / math.sqrt(self.head_dim) + mask
            probs = torch.softmax(scores, dim=-1)
            a = torch.matmul(probs, vr).transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
            x = x + torch.nn.functional.linear(a, w[p + "self_attn.o_proj.weight"])
            h = self.rms(x, w[p + "post_attention_layernorm.weight"])
            g = torch.nn.functional.linear(h, w[p + "mlp.gate_proj.weight"])
            u = torch.nn.functional.linear(h, w[p + "mlp.up_proj.weight"])
            x = x + torch.nn.functional.linear(torch.nn.functional.silu(g) * u, w[p + "mlp.down_proj.weight"])
        x = self.rms(x[:, -1:], w["model.norm.weight"])  # only the last position is sampled
        head = w["model.embed_tokens.weight"] if self.tied else w["lm_head.weight"]
        return torch.nn.functional.linear(x, head)[:, -1]  # [B, V]


def prompt_ids(batch, prompt_len, vocab):
    # Same formula as generate_bench.cc.
    return torch.tensor([[(i * 31 + r * 7 + 3) % vocab for i in range(prompt_len)] for r in range(batch)])


def generate(model, ids, new_tokens):
    b, p = ids.shape
    cache = [None] * model.layers
    causal = torch.full((p, p), float("-inf")).triu(1)[None, None]
    positions = torch.arange(p)[None].expand(b, p)
    logits = model.forward(ids, positions, causal, cache)
    out = [logits.argmax(-1)]
    for step in range(1, new_tokens):
        pos = torch.full((b, 1), p + step - 1, dtype=torch.long)
        logits = model.forward(out[-1][:, None], pos, torch.zeros(1, 1, 1, 1), cache)
        out.append(logits.argmax(-1))
    return torch.stack(out, dim=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--prompt-len", type=int, required=True)
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = Model(args.model)
    vocab = model.w["model.embed_tokens.weight"].shape[0]
    ids = prompt_ids(args.batch, args.prompt_len, vocab)
    with torch.inference_mode():
        generate(model, ids, 4)  # warm-up: allocator and kernels
        start = time.perf_counter()
        out = generate(model, ids, args.new_tokens)
        seconds = time.perf_counter() - start
    print(json.dumps({"tokens_per_s": args.batch * args.new_tokens / seconds, "seconds": seconds,
                      "first_row": out[0].tolist()}))


if __name__ == "__main__":
    main()
