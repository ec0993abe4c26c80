#!/usr/bin/python3
"""The PyTorch side of the engine benchmark (bench/README.md).

The same model as bench_engine, written the way Hugging Face's LlamaForCausalLM writes
it (eager mode, float32): token embedding; L x [RMSNorm -> attention with separate
q/k/v projections, rotate-half RoPE, grouped-query heads expanded with repeat_kv and a
causal softmax written by hand (torch 1.13 has no scaled_dot_product_attention) ->
residual -> RMSNorm -> SwiGLU MLP with separate gate/up projections -> residual]; final
RMSNorm; untied LM head; cross-entropy. A step is opt.zero_grad(), forward, backward,
clip_grad_norm_(1.0), torch.optim.AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8, weight
decay 0.1, none on norm weights): what bench_engine times. One thread.

Prints one JSON line with the same fields as bench_engine. With --profile, also prints
torch.autograd.profiler's per-op table (self CPU time) to stderr.

Run with Debian's interpreter, /usr/bin/python3 (the one that has torch).
Exit status: 0 done, 2 bad command line, 77 torch unavailable.
"""
import argparse
import ctypes
import json
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"torch_step.py: cannot import torch in {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)


def openblas_info():
    """The OpenBLAS that torch's sgemm_ resolves to, and its thread count.

    torch (Debian) links libblas.so.3, which the alternatives system points at
    OpenBLAS's libblas.so.3, a thin library that forwards to libopenblas.so.0. Both are
    already loaded in this process, so dlopen returns the very copy torch calls.
    Returns (config, corename, lib) or (None, None, None) when it is not OpenBLAS."""
    for name in ("libopenblas.so.0", "libblas.so.3"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            return (lib.openblas_get_config().decode(), lib.openblas_get_corename().decode(), lib)
        except (OSError, AttributeError):
            continue
    return None, None, None


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, dim, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # repeat_kv: query head h reads key/value head h // (H / KV).
        rep = self.h // self.kv
        k = k[:, :, None].expand(B, self.kv, rep, T, self.hd).reshape(B, self.h, T, self.hd)
        v = v[:, :, None].expand(B, self.kv, rep, T, self.hd).reshape(B, self.h, T, self.hd)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd)
        scores = scores + mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32)
        y = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, self.h * self.hd)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, dim, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.input_layernorm = RMSNorm(a.dim, a.eps)
        self.self_attn = Attention(a.dim, a.heads, a.kv_heads)
        self.post_attention_layernorm = RMSNorm(a.dim, a.eps)
        self.mlp = MLP(a.dim, a.ffn)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.dim, a.eps)
        self.lm_head = nn.Linear(a.dim, a.vocab, bias=False)
        hd = a.dim // a.heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.outer(torch.arange(a.seq, dtype=torch.float32), inv)
        emb = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        mask = torch.full((a.seq, a.seq), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)
        # The engine's initialization: normal(0, 0.02), residual projections / sqrt(2L).
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    std /= math.sqrt(2 * a.layers)
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.embed_tokens(tokens)
        cos, sin, mask = self.cos[:T], self.sin[:T], self.mask[:T, :T]
        for blk in self.layers:
            x = blk(x, cos, sin, mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1),
                               ignore_index=-1)


def parse_args(argv):
    p = argparse.ArgumentParser(description="Time PyTorch training steps of bench_engine's model.")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=0, help="default dim/64")
    p.add_argument("--kv-heads", type=int, default=0, help="default heads/2")
    p.add_argument("--ffn", type=int, default=0, help="default 8/3 dim rounded up to 64")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args(argv)
    a.heads = a.heads or max(a.dim // 64, 1)
    a.kv_heads = a.kv_heads or max(a.heads // 2, 1)
    a.ffn = a.ffn or (8 * a.dim // 3 + 63) // 64 * 64
    a.eps = 1e-5
    for k in ("dim", "layers", "heads", "kv_heads", "ffn", "vocab", "seq", "batch", "steps",
              "threads"):
        if getattr(a, k) <= 0:
            p.error(f"--{k.replace('_', '-')} must be positive")
    if a.warmup < 0 or a.dim % a.heads or a.heads % a.kv_heads or (a.dim // a.heads) % 2:
        p.error("need warmup >= 0, heads dividing dim (even head size), kv-heads dividing heads")
    return a


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    blas_config, blas_core, blas = openblas_info()
    if blas is not None:
        # torch.set_num_threads does not reach a generic (non-MKL) BLAS (checked with
        # torch 1.13: OpenBLAS stays at one thread per core), so set it directly.
        blas.openblas_set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Llama(a)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(a.seed)
    stream = torch.randint(0, a.vocab, (a.batch * a.seq + 1,), generator=g)
    tokens = stream[:-1].view(a.batch, a.seq).clone()
    targets = stream[1:].view(a.batch, a.seq).clone()
    params = list(model.parameters())

    def step():
        opt.zero_grad()
        loss = model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.item()

    # Wall time is the figure; process CPU time is kept beside it (see bench_engine.c).
    ms, cpu_ms, loss_first, loss_last = [], [], 0.0, 0.0
    for i in range(a.warmup + a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        dt, dc = (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3
        if i == 0:
            loss_first = loss
        loss_last = loss
        if i >= a.warmup:
            ms.append(dt)
            cpu_ms.append(dc)
    if a.profile:
        with torch.autograd.profiler.profile() as prof:
            for _ in range(a.steps):
                step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40),
              file=sys.stderr)
    median = statistics.median(ms)
    n_params = sum(p.numel() for p in params)
    n = n_params - a.vocab * a.dim
    tokens_per_step = a.batch * a.seq
    flops = 6.0 * n * tokens_per_step + 6.0 * a.layers * a.dim * a.seq * tokens_per_step
    out = {
        "impl": "torch", "dim": a.dim, "layers": a.layers, "heads": a.heads,
        "kv_heads": a.kv_heads, "ffn": a.ffn, "vocab": a.vocab, "seq": a.seq,
        "batch": a.batch, "params": n_params, "threads": torch.get_num_threads(),
        "blas": blas_config or "not OpenBLAS", "blas_core": blas_core or "unknown",
        "torch": torch.__version__, "warmup": a.warmup, "steps": a.steps,
        "step_ms_median": round(median, 3), "step_ms_min": round(min(ms), 3),
        "step_ms_mean": round(statistics.fmean(ms), 3),
        "step_cpu_ms_median": round(statistics.median(cpu_ms), 3),
        "tokens_per_s": round(tokens_per_step / (median * 1e-3), 1),
        "gflops_per_s": round(flops / (median * 1e-3) * 1e-9, 2),
        "loss_first": round(loss_first, 5), "loss_last": round(loss_last, 5),
    }
    print(json.dumps(out, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
