#!/usr/bin/env python3
"""A small Hugging Face LlamaForCausalLM directory (config.json + model.safetensors, F32)
for the `baton ckpt` tool tests (check-tools.sh), with the standard library alone.

  make_hf.py DIR HIDDEN LAYERS VOCAB [--tied] [--head same|other|none]

Each tensor's values follow from its name (a short repeated ramp), so that two tensors
differ. --tied writes tie_word_embeddings: true; --head says what lm_head.weight holds:
its own values (other, the default), the embedding's (same), or nothing (none).

  make_hf.py --compare FILE NAME_A NAME_B

exits 0 when tensors NAME_A and NAME_B of safetensors FILE hold the same bytes, 3 if not
(not 1, which is what an error such as a missing FILE exits with).
"""
import array
import json
import os
import struct
import sys
import zlib


def ramp(name, n):
    seed = zlib.crc32(name.encode()) % 997
    period = array.array("f", [((seed + k) % 211 - 105) / 1000.0 for k in range(1024)])
    reps = -(-n // 1024)
    return (period * reps)[:n]


def write(out, hidden, layers, vocab, tied, head):
    heads, kv = 4, 2
    hd = hidden // heads
    ffn = 2 * hidden
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "model.norm.weight": [hidden]}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": [hidden],
            p + "self_attn.q_proj.weight": [hidden, hidden],
            p + "self_attn.k_proj.weight": [kv * hd, hidden],
            p + "self_attn.v_proj.weight": [kv * hd, hidden],
            p + "self_attn.o_proj.weight": [hidden, hidden],
            p + "post_attention_layernorm.weight": [hidden],
            p + "mlp.gate_proj.weight": [ffn, hidden],
            p + "mlp.up_proj.weight": [ffn, hidden],
            p + "mlp.down_proj.weight": [hidden, ffn],
        })
    if head != "none":
        shapes["lm_head.weight"] = [vocab, hidden]
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(shapes):
        n = 1
        for d in shapes[name]:
            n *= d
        src = "model.embed_tokens.weight" if name == "lm_head.weight" and head == "same" else name
        raw = ramp(src, n).tobytes()
        header[name] = {"dtype": "F32", "shape": shapes[name], "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": ffn, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "vocab_size": vocab, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": 64, "hidden_act": "silu",
        "tie_word_embeddings": tied,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)


def tensor_bytes(path, name):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        b, e = header[name]["data_offsets"]
        f.seek(8 + n + b)
        return f.read(e - b)


DIFFER = 3  # --compare's exit for tensors that differ


def main(argv):
    if argv[:1] == ["--compare"]:
        return 0 if tensor_bytes(argv[1], argv[2]) == tensor_bytes(argv[1], argv[3]) else DIFFER
    out, hidden, layers, vocab = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    tied = "--tied" in argv
    head = argv[argv.index("--head") + 1] if "--head" in argv else "other"
    write(out, hidden, layers, vocab, tied, head)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
