#!/usr/bin/python3
"""The same Llama-style training step as motley's train-step benchmark, in PyTorch, for a
side-by-side ratio (issue: foundation benchmark). Run with Debian's PyTorch (python3-torch) via
/usr/bin/python3. Model: RMSNorm, RoPE (HF rotate_half), causal attention, SwiGLU, untied head,
AdamW; fp32. Prints one JSON line with the per-step seconds (min and median) and tokens/s.

Usage: /usr/bin/python3 bench/pytorch_step.py [--threads 2] [--steps 6] [--preset gpt2-124m]
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

PRESETS = {
    # name: (L, C, NH, F, V)
    "gpt2-124m": (12, 768, 12, 2048, 50304),
    "small": (4, 128, 4, 384, 256),
}


class Block(torch.nn.Module):
    def __init__(self, c, nh, f):
        super().__init__()
        self.nh, self.hs = nh, c // nh
        self.ln1 = torch.nn.Parameter(torch.ones(c))
        self.ln2 = torch.nn.Parameter(torch.ones(c))
        self.q = torch.nn.Linear(c, c, bias=False)
        self.k = torch.nn.Linear(c, c, bias=False)
        self.v = torch.nn.Linear(c, c, bias=False)
        self.o = torch.nn.Linear(c, c, bias=False)
        self.gate = torch.nn.Linear(c, f, bias=False)
        self.up = torch.nn.Linear(c, f, bias=False)
        self.down = torch.nn.Linear(f, c, bias=False)

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        h = self.rms(x, self.ln1)
        q = self.q(h).view(b, t, self.nh, self.hs).transpose(1, 2)
        k = self.k(h).view(b, t, self.nh, self.hs).transpose(1, 2)
        v = self.v(h).view(b, t, self.nh, self.hs).transpose(1, 2)

        def rope(z):
            z1, z2 = z[..., : self.hs // 2], z[..., self.hs // 2:]
            return z * cos + torch.cat((-z2, z1), dim=-1) * sin

        q, k = rope(q), rope(k)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hs)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.o(y)
        h = self.rms(x, self.ln2)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(torch.nn.Module):
    def __init__(self, layers, c, nh, f, vocab):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, c)
        self.blocks = torch.nn.ModuleList(Block(c, nh, f) for _ in range(layers))
        self.norm = torch.nn.Parameter(torch.ones(c))
        self.head = torch.nn.Linear(c, vocab, bias=False)
        hs = c // nh
        self.inv_freq = 10000.0 ** (-torch.arange(0, hs, 2).float() / hs)

    def forward(self, idx, targets):
        t = idx.shape[1]
        freqs = torch.outer(torch.arange(t).float(), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        logits = self.head(Block.rms(x, self.norm))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--preset", default="gpt2-124m", choices=sorted(PRESETS))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    layers, c, nh, f, vocab = PRESETS[a.preset]
    model = Model(layers, c, nh, f, vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=False)
    idx = torch.randint(0, vocab, (a.batch, a.seq))
    tgt = torch.randint(0, vocab, (a.batch, a.seq))
    times = []
    for step in range(a.steps + 1):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        opt.step()
        if step > 0:  # first step warms up allocators
            times.append(time.perf_counter() - start)
    med = statistics.median(times)
    print(json.dumps({"engine": f"pytorch {torch.__version__}", "preset": a.preset,
                      "threads": a.threads, "B": a.batch, "T": a.seq,
                      "step_s_min": min(times), "step_s_median": med,
                      "tokens_per_s": a.batch * a.seq / med}))


if __name__ == "__main__":
    main()
