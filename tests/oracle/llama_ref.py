#!/usr/bin/python3
"""Float64 PyTorch reference for baton's LLaMA model (tests/unit/test_model_oracle.c).

Written from the model's mathematical definition (Hugging Face LlamaForCausalLM with
rotate-half RoPE and the RoPE scalings of transformers' modeling_rope_utils), not from
the C code. Run with Debian's interpreter: /usr/bin/python3 llama_ref.py ROOT.

Exchange format. ROOT holds one directory per case, each written by the C test:
  config.json    model, rope, batch and optimizer settings, and the tensor list
                 [{"name", "shape", "no_decay"}] in memory order
  params.f32     every tensor, concatenated in that order, row-major float32 (little
                 endian), weights as (out features, in features)
  tokens.i32     (steps, B, T) int32 inputs
  targets.i32    (steps, B, T) int32 targets; negative = ignored
This script writes into the same directory, all float64 little endian:
  logits.f64     (B, T, V) logits of batch 0
  loss.f64       (1) mean cross-entropy of batch 0 over the targets not ignored
  grads.f64      every parameter gradient of that loss, concatenated like params.f32
  adamw.f64      (steps) the loss of batch s before AdamW step s (torch.optim.AdamW,
                 clip_grad_norm_, no decay on norm weights, constant learning rate)
Exit status: 0 done, 77 torch unavailable (the C test reports SKIPPED), 1 error.
"""
import json
import math
import os
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the C test turns this into a visible SKIPPED
    print(f"SKIPPED: cannot import torch in {sys.executable}: {e}")
    sys.exit(77)

torch.set_default_dtype(torch.float64)


def rope_inv_freq(rope, hd):
    """Inverse frequencies (hd/2) and the factor applied to cos and sin."""
    theta, kind = rope["theta"], rope["type"]
    factor = rope.get("factor", 1.0)
    if kind == "ntk":
        theta = theta * factor ** (hd / (hd - 2))
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    mscale = 1.0
    if kind == "linear":
        inv = inv / factor
    elif kind == "llama3":
        old = rope["original_max_position"]
        lo, hi = rope["low_freq_factor"], rope["high_freq_factor"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old / hi) & (wavelen <= old / lo)
        inv = torch.where(medium, blended, scaled)
    elif kind == "yarn":
        old = rope["original_max_position"]

        def corr_dim(rot):
            return hd * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(theta))

        low, high = corr_dim(rope["beta_fast"]), corr_dim(rope["beta_slow"])
        if rope.get("truncate", True):  # as transformers: rounded unless truncate is false
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, hd - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(hd // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        inv = (inv / factor) * ramp + inv * (1 - ramp)
        af = rope.get("attn_factor", 0.0)
        mscale = af if af > 0 else (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
    return inv, mscale


def rope_cos_sin(rope, hd, T):
    inv, mscale = rope_inv_freq(rope, hd)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], dim=-1)  # (T, hd): frequency i serves i and i + hd/2
    return emb.cos() * mscale, emb.sin() * mscale


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Llama:
    def __init__(self, cfg, params):
        self.cfg = cfg
        self.p = params  # name -> leaf tensor

    def w(self, name):
        return self.p[name]

    def attention(self, x, l, cos, sin):
        c = self.cfg
        B, T, _ = x.shape
        H, KV = c["n_heads"], c["n_kv_heads"]
        hd = c["dim"] // H
        pre = f"model.layers.{l}.self_attn."
        q = (x @ self.w(pre + "q_proj.weight").T).view(B, T, H, hd).transpose(1, 2)
        k = (x @ self.w(pre + "k_proj.weight").T).view(B, T, KV, hd).transpose(1, 2)
        v = (x @ self.w(pre + "v_proj.weight").T).view(B, T, KV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)  # head h reads kv head h // (H / KV)
        v = v.repeat_interleave(H // KV, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        y = scores.softmax(-1) @ v
        y = y.transpose(1, 2).reshape(B, T, H * hd)
        return y @ self.w(pre + "o_proj.weight").T

    def mlp(self, x, l):
        pre = f"model.layers.{l}.mlp."
        gate = x @ self.w(pre + "gate_proj.weight").T
        up = x @ self.w(pre + "up_proj.weight").T
        return (F.silu(gate) * up) @ self.w(pre + "down_proj.weight").T

    def forward(self, tokens, targets):
        c = self.cfg
        eps = c["norm_eps"]
        hd = c["dim"] // c["n_heads"]
        cos, sin = rope_cos_sin(c["rope"], hd, tokens.shape[1])
        x = self.w("model.embed_tokens.weight")[tokens]
        for l in range(c["n_layers"]):
            pre = f"model.layers.{l}."
            x = x + self.attention(rmsnorm(x, self.w(pre + "input_layernorm.weight"), eps), l,
                                   cos, sin)
            x = x + self.mlp(rmsnorm(x, self.w(pre + "post_attention_layernorm.weight"), eps), l)
        x = rmsnorm(x, self.w("model.norm.weight"), eps)
        logits = x @ self.w("lm_head.weight").T
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=-1)
        return logits, loss


def read(path, dtype):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype)


def load_params(case, tensors):
    flat = read(os.path.join(case, "params.f32"), torch.float32).to(torch.float64)
    params, off = {}, 0
    for t in tensors:
        n = math.prod(t["shape"])
        params[t["name"]] = flat[off:off + n].view(*t["shape"]).clone().requires_grad_(True)
        off += n
    assert off == flat.numel(), "params.f32 does not match the tensor list"
    return params


def write(path, tensor):
    with open(path, "wb") as f:
        f.write(tensor.detach().to(torch.float64).contiguous().numpy().tobytes())


def gradients(case, cfg, tokens, targets):
    params = load_params(case, cfg["tensors"])
    model = Llama(cfg, params)
    logits, loss = model.forward(tokens[0], targets[0])
    loss.backward()
    write(os.path.join(case, "logits.f64"), logits)
    write(os.path.join(case, "loss.f64"), loss.reshape(1))
    write(os.path.join(case, "grads.f64"),
          torch.cat([params[t["name"]].grad.reshape(-1) for t in cfg["tensors"]]))


def adamw_losses(case, cfg, tokens, targets):
    params = load_params(case, cfg["tensors"])
    model = Llama(cfg, params)
    o = cfg["optim"]
    decay = [params[t["name"]] for t in cfg["tensors"] if not t["no_decay"]]
    no_decay = [params[t["name"]] for t in cfg["tensors"] if t["no_decay"]]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    losses = []
    for s in range(cfg["steps"]):
        opt.zero_grad()
        _, loss = model.forward(tokens[s], targets[s])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), o["grad_clip"])
        opt.step()
        losses.append(loss.item())
    write(os.path.join(case, "adamw.f64"), torch.tensor(losses))


def run_case(case):
    with open(os.path.join(case, "config.json")) as f:
        cfg = json.load(f)
    shape = (cfg["steps"], cfg["B"], cfg["T"])
    tokens = read(os.path.join(case, "tokens.i32"), torch.int32).long().view(shape)
    targets = read(os.path.join(case, "targets.i32"), torch.int32).long().view(shape)
    gradients(case, cfg, tokens, targets)
    adamw_losses(case, cfg, tokens, targets)


def main():
    if len(sys.argv) != 2:
        print("usage: llama_ref.py ROOT", file=sys.stderr)
        return 1
    root = sys.argv[1]
    for name in sorted(os.listdir(root)):
        if os.path.isfile(os.path.join(root, name, "config.json")):
            run_case(os.path.join(root, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
