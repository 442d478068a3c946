#!/usr/bin/env python3
"""The PyTorch peer of scripts/gpu-check.sh: the same offline batch on a
decoder of the same shape, written plainly in PyTorch.

It runs an OpenAI batch file (what `batchd bench engine --offline N
--write-batch FILE` writes: token-id prompts, max_tokens, greedy, EOS
ignored) through a Llama/Qwen2-shaped decoder with random weights, in waves
of --batch sequences: one padded prefill of the wave, then greedy decode
steps over a static KV cache (torch's scaled_dot_product_attention, GQA),
optionally each step replayed as a CUDA graph. It prints one JSON line:
requests, prompt and output tokens, seconds, output tokens per second.

It is a benchmark peer, not a model: the weights are random and nothing
but the shape matters. Needs only PyTorch (2.x for the GPU; 1.13 runs the
CPU test in CI).
"""

import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = {
    # name: dim, layers, heads, kv_heads, ffn, vocab, qkv_bias
    "qwen2.5-0.5b": (896, 24, 14, 2, 4864, 151936, True),
    "llama-3.1-8b": (4096, 32, 32, 8, 14336, 128256, False),
    "tiny": (128, 4, 4, 2, 352, 364, True),
    "tiny-llama": (128, 3, 4, 1, 352, 364, False),
}


def read_batch(path):
    reqs = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            body = json.loads(line)["body"]
            prompt = body["prompt"]
            if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
                sys.exit(f"{path}:{n}: body.prompt must be a list of token ids")
            reqs.append((prompt, int(body["max_tokens"])))
    return reqs


class Decoder:
    def __init__(self, shape, device, dtype, seed=1):
        dim, layers, heads, kv_heads, ffn, vocab, bias = shape
        self.dim, self.layers, self.heads, self.kv_heads = dim, layers, heads, kv_heads
        self.hd = dim // heads
        self.vocab = vocab
        self.device, self.dtype = device, dtype
        g = torch.Generator(device="cpu").manual_seed(seed)

        def w(*s):
            return (torch.randn(*s, generator=g) * 0.02).to(device=device, dtype=dtype)

        q, kv = heads * self.hd, kv_heads * self.hd
        self.embd = w(vocab, dim)
        self.out = w(vocab, dim)
        self.norm = torch.ones(dim, device=device, dtype=dtype)
        self.L = []
        for _ in range(layers):
            self.L.append(dict(
                an=torch.ones(dim, device=device, dtype=dtype),
                fn=torch.ones(dim, device=device, dtype=dtype),
                wqkv=w(q + 2 * kv, dim),
                bqkv=w(q + 2 * kv) if bias else None,
                wo=w(dim, q),
                wgu=w(2 * ffn, dim),
                wd=w(dim, ffn),
            ))
        self.ffn = ffn
        inv = 1.0 / (1e6 ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd))
        self.inv_freq = inv.to(device)
        self.gqa = heads // kv_heads
        self.sdpa = hasattr(F, "scaled_dot_product_attention")

    def rmsnorm(self, x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(self.dtype) * w

    def rope(self, x, pos):
        # x [B, T, H, hd], pos [B, T]; neox halves.
        ang = pos.float().unsqueeze(-1) * self.inv_freq  # [B, T, hd/2]
        c, s = ang.cos().unsqueeze(2), ang.sin().unsqueeze(2)
        h = self.hd // 2
        a, b = x[..., :h].float(), x[..., h:].float()
        return torch.cat([a * c - b * s, a * s + b * c], -1).to(self.dtype)

    def attend(self, q, k, v, mask):
        # q [B, H, T, hd], k/v [B, KV, S, hd], mask [B, 1, T, S] bool (True: attend)
        if self.gqa > 1:
            k = k.repeat_interleave(self.gqa, dim=1)
            v = v.repeat_interleave(self.gqa, dim=1)
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(self.hd)
        s = s.masked_fill(~mask, float("-inf"))
        return (s.softmax(-1) @ v.float()).to(self.dtype)

    def forward(self, tokens, pos, cache_k, cache_v, mask):
        """tokens, pos [B, T]; writes K/V at pos; mask [B, 1, T, S]; returns last-position logits [B, vocab]."""
        B, T = tokens.shape
        x = self.embd[tokens]
        q_, kv_ = self.heads * self.hd, self.kv_heads * self.hd
        bidx = torch.arange(B, device=self.device).unsqueeze(1).expand(B, T)
        for li, L in enumerate(self.L):
            h = self.rmsnorm(x, L["an"])
            qkv = h @ L["wqkv"].t()
            if L["bqkv"] is not None:
                qkv = qkv + L["bqkv"]
            q, k, v = qkv.split([q_, kv_, kv_], -1)
            q = self.rope(q.view(B, T, self.heads, self.hd), pos)
            k = self.rope(k.view(B, T, self.kv_heads, self.hd), pos)
            v = v.view(B, T, self.kv_heads, self.hd)
            cache_k[li][bidx, :, pos] = k
            cache_v[li][bidx, :, pos] = v
            o = self.attend(q.transpose(1, 2), cache_k[li], cache_v[li], mask)
            x = x + o.transpose(1, 2).reshape(B, T, q_) @ L["wo"].t()
            h = self.rmsnorm(x, L["fn"])
            g, u = (h @ L["wgu"].t()).split([self.ffn, self.ffn], -1)
            x = x + (F.silu(g) * u) @ L["wd"].t()
        return self.rmsnorm(x[:, -1], self.norm) @ self.out.t()


def run_wave(m, wave, graphs, graph_cache):
    B = len(wave)
    plen = [len(p) for p, _ in wave]
    new = max(n for _, n in wave)
    P = max(plen)
    S = P + new
    dev = m.device
    ck = [torch.zeros(B, m.kv_heads, S, m.hd, device=dev, dtype=m.dtype) for _ in range(m.layers)]
    cv = [torch.zeros(B, m.kv_heads, S, m.hd, device=dev, dtype=m.dtype) for _ in range(m.layers)]
    # Prefill, right-padded: a padded position attends like a real one but
    # is overwritten by decode and never attended by later real tokens.
    toks = torch.zeros(B, P, dtype=torch.long, device=dev)
    for i, (p, _) in enumerate(wave):
        toks[i, : len(p)] = torch.tensor(p, device=dev)
    pos = torch.arange(P, device=dev).unsqueeze(0).expand(B, P)
    ar = torch.arange(S, device=dev)
    causal = (ar.view(1, 1, 1, S) <= pos.view(B, 1, P, 1))
    lens = torch.tensor(plen, device=dev)
    # Logits of each sequence's last real prompt token.
    x_last = []
    logits = m.forward(toks, pos, ck, cv, causal)  # last padded position; recompute real last below
    # The real last token of a shorter prompt is not at P-1: rerun it as a
    # one-token step at its own position (cheap, and exact).
    cur = torch.tensor([p[-1] for p, _ in wave], device=dev)
    cur_pos = lens - 1

    def step(cur, cur_pos):
        mask = (ar.view(1, 1, 1, S) <= cur_pos.view(B, 1, 1, 1))
        lg = m.forward(cur.view(B, 1), cur_pos.view(B, 1), ck, cv, mask)
        return lg.argmax(-1)

    out = 0
    if graphs and dev.type == "cuda":
        st_cur, st_pos = cur.clone(), cur_pos.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                step(st_cur, st_pos)  # warm up (allocations) before capture
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            st_next = step(st_cur, st_pos)
        for _ in range(new):
            g.replay()
            st_cur.copy_(st_next)
            st_pos.add_(1)
            out += B
    else:
        for _ in range(new):
            cur = step(cur, cur_pos)
            cur_pos = cur_pos + 1
            out += B
    del x_last, logits
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-file", required=True, help="the OpenAI batch JSONL to run")
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--wave", type=int, default=256, help="sequences decoded together")
    ap.add_argument("--graphs", action="store_true", help="replay each decode step as a CUDA graph")
    a = ap.parse_args()
    reqs = read_batch(a.batch_file)
    dev = torch.device(a.device)
    m = Decoder(SHAPES[a.shape], dev, getattr(torch, a.dtype))
    # Sort by prompt length so that a wave pads little (any engine may).
    order = sorted(range(len(reqs)), key=lambda i: len(reqs[i][0]))
    waves = [[reqs[i] for i in order[j: j + a.wave]] for j in range(0, len(order), a.wave)]
    with torch.inference_mode():
        run_wave(m, waves[0][: min(4, len(waves[0]))], False, {})  # warm up kernels
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = 0
        for w in waves:
            out += run_wave(m, w, a.graphs, {})
        if dev.type == "cuda":
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
    print(json.dumps({
        "peer": "pytorch " + torch.__version__ + (" + cuda graphs" if a.graphs else ""),
        "shape": a.shape, "device": str(dev) if dev.type != "cuda" else torch.cuda.get_device_name(dev),
        "requests": len(reqs), "prompt_tokens": sum(len(p) for p, _ in reqs), "output_tokens": out,
        "seconds": round(secs, 3), "output_tok_s": round(out / secs, 1),
    }))


if __name__ == "__main__":
    main()
