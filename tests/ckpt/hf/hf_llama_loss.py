#!/usr/bin/python3
"""Mean next-token loss of a Hugging Face LLaMA directory, computed in float64 PyTorch.

  /usr/bin/python3 hf_llama_loss.py HF_DIR [HF_DIR...] DATA_PREFIX SEQ_LEN NUM_SEQS

An oracle for `baton ckpt export --format hf`, independent of baton's code: it reads
HF_DIR/model.safetensors with its own few lines (8-byte little-endian header length,
JSON header, raw data; no `safetensors` package) and HF_DIR/config.json, builds
LlamaForCausalLM's forward from the config the way transformers defines it (RMSNorm,
rotate-half RoPE with rope_theta and rope_scaling none/linear/llama3/yarn (yarn's
"truncate" read as transformers reads it: absent is true), grouped-query
attention, SwiGLU MLP, untied head), and evaluates the first NUM_SEQS windows of
SEQ_LEN + 1 consecutive tokens (window i = tokens [i T, i T + T + 1) of all documents
concatenated: consecutive windows share a token, as baton's loader cuts them) of the
Megatron indexed dataset DATA_PREFIX.bin/.idx, read here too.
Prints, per HF_DIR, a line {"dir": HF_DIR, "loss": mean over windows of the mean
cross-entropy of the T targets, "tokens"} (several directories in one run pay torch's
import once).
Exit status: 0 done, 77 torch unavailable (SKIPPED), 1 error.
"""
import array
import json
import math
import struct
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"SKIPPED: cannot import torch in {sys.executable}: {e}")
    sys.exit(77)


def read_safetensors(path):
    """name -> float64 tensor of the stored shape (F32 and BF16 only)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    data = blob[8 + n :]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = bytearray(data[b:end])
        if e["dtype"] == "F32":
            t = torch.frombuffer(raw, dtype=torch.float32)
        elif e["dtype"] == "BF16":
            t = torch.frombuffer(raw, dtype=torch.bfloat16)
        else:
            raise ValueError(f"{path}: {name}: dtype {e['dtype']} not handled")
        out[name] = t.to(torch.float64).reshape(e["shape"])
    return out


def inv_freq_and_scale(cfg, hd):
    """transformers' modeling_rope_utils, written from its definitions."""
    theta = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return inv, 1.0
    factor = rs["factor"]
    if kind == "linear":
        return inv / factor, 1.0
    old = rs["original_max_position_embeddings"]
    if kind == "llama3":
        lo, hi = rs["low_freq_factor"], rs["high_freq_factor"]
        wavelen = 2 * math.pi / inv
        out = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        mid = (1 - smooth) * out / factor + smooth * out
        is_mid = (wavelen >= old / hi) & (wavelen <= old / lo)
        return torch.where(is_mid, mid, out), 1.0
    if kind == "yarn":

        def dim_of(rot):
            return hd * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(theta))

        low, high = dim_of(rs.get("beta_fast") or 32), dim_of(rs.get("beta_slow") or 1)
        # transformers: truncate = rope_scaling.get("truncate", True); rounds if truthy
        if rs.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, hd - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(hd // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        af = rs.get("attention_factor")
        if af is None:
            af = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
        return inv / factor * ramp + inv * (1 - ramp), af
    raise ValueError(f"rope_type {kind} not handled")


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def forward_loss(cfg, p, tokens):
    """Mean cross-entropy of tokens[:, 1:] given tokens[:, :-1]; tokens (B, T+1)."""
    logits = forward_logits(cfg, p, tokens[:, :-1])
    y = tokens[:, 1:]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def forward_logits(cfg, p, x_tok):
    """Logits (B, T, V) of the tokens x_tok (B, T)."""
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd, eps = C // H, cfg["rms_norm_eps"]
    B, T = x_tok.shape
    inv, mscale = inv_freq_and_scale(cfg, hd)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos() * mscale, emb.sin() * mscale
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    x = p["model.embed_tokens.weight"][x_tok]
    for l in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{l}."
        h = rmsnorm(x, p[pre + "input_layernorm.weight"], eps)
        q = (h @ p[pre + "self_attn.q_proj.weight"].T).view(B, T, H, hd).transpose(1, 2)
        k = (h @ p[pre + "self_attn.k_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        v = (h @ p[pre + "self_attn.v_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        a = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + a.transpose(1, 2).reshape(B, T, H * hd) @ p[pre + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, p[pre + "post_attention_layernorm.weight"], eps)
        g = h @ p[pre + "mlp.gate_proj.weight"].T
        u = h @ p[pre + "mlp.up_proj.weight"].T
        x = x + (F.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].T
    x = rmsnorm(x, p["model.norm.weight"], eps)
    head = p.get("lm_head.weight", p["model.embed_tokens.weight"])
    return x @ head.T


INDEXED_TYPECODES = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}


def read_sequences(prefix, limit=None):
    """The token lists of the first `limit` (all when None) sequences of a Megatron
    indexed dataset (prefix.idx/.bin)."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", f"{prefix}.idx: bad magic"
    code = idx[17]
    (S,) = struct.unpack_from("<Q", idx, 18)
    lengths = struct.unpack_from(f"<{S}i", idx, 34)
    pointers = struct.unpack_from(f"<{S}q", idx, 34 + 4 * S)
    tc = INDEXED_TYPECODES[code]
    size = array.array(tc).itemsize
    out = []
    with open(prefix + ".bin", "rb") as f:
        for n, ptr in list(zip(lengths, pointers))[:limit]:
            f.seek(ptr)
            a = array.array(tc)
            a.frombytes(f.read(n * size))
            out.append(list(a))
    return out


def read_tokens(prefix, count):
    """The first `count` tokens of all sequences concatenated (Megatron .idx/.bin)."""
    out = []
    for seq in read_sequences(prefix):
        if len(out) >= count:
            break
        out.extend(seq[: count - len(out)])
    if len(out) < count:
        raise ValueError(f"{prefix}: only {len(out)} tokens, {count} needed")
    return out


def dir_loss(hf_dir, toks):
    with open(hf_dir + "/config.json") as f:
        cfg = json.load(f)
    assert cfg["model_type"] == "llama" and "LlamaForCausalLM" in cfg["architectures"]
    p = read_safetensors(hf_dir + "/model.safetensors")
    with torch.no_grad():
        losses = [forward_loss(cfg, p, toks[i : i + 1]).item() for i in range(len(toks))]
    return sum(losses) / len(losses)


def main():
    if len(sys.argv) < 5:
        sys.exit("usage: hf_llama_loss.py HF_DIR [HF_DIR...] DATA_PREFIX SEQ_LEN NUM_SEQS")
    dirs, prefix, T, N = sys.argv[1:-3], sys.argv[-3], int(sys.argv[-2]), int(sys.argv[-1])
    torch.set_default_dtype(torch.float64)
    flat = torch.tensor(read_tokens(prefix, N * T + 1), dtype=torch.long)
    toks = torch.stack([flat[i * T : i * T + T + 1] for i in range(N)])
    for d in dirs:
        print(json.dumps({"dir": d, "loss": dir_loss(d, toks), "tokens": N * T}), flush=True)


if __name__ == "__main__":
    main()
