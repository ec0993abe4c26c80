#!/usr/bin/python3
"""Greedy passkey answers of a Hugging Face LLaMA export, in float64 PyTorch: the oracle
for `baton eval --passkey`.

  /usr/bin/python3 passkey_oracle.py HF_DIR PASSKEY_PREFIX NUM_DOCS BATON_JSON

For each of the first NUM_DOCS documents (one per sequence of PASSKEY_PREFIX.bin/.idx,
answer digits at [len - 7, len - 2)), the argmax of the logits at the 5 positions before
each digit, compared with the "predicted" tokens of baton's JSON (BATON_JSON, a file).
The model code is tests/ckpt/hf/hf_llama_loss.py's (independent of baton's engine).
Exit status: 0 the same (at most one near-tie allowed), 1 different, 77 no torch.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ckpt", "hf"))
import hf_llama_loss as hf  # noqa: E402  (exits 77 without torch)

torch = hf.torch


def read_docs(prefix, n):
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", f"{prefix}.idx: bad magic"
    code = idx[17]
    (S,) = struct.unpack_from("<Q", idx, 18)
    lengths = struct.unpack_from(f"<{S}i", idx, 34)
    pointers = struct.unpack_from(f"<{S}q", idx, 34 + 4 * S)
    size = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 8: 2}[code]
    fmt = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}[code]
    docs = []
    with open(prefix + ".bin", "rb") as f:
        for ln, ptr in list(zip(lengths, pointers))[:n]:
            f.seek(ptr)
            docs.append(list(struct.unpack(f"<{ln}{fmt}", f.read(ln * size))))
    return docs


def main():
    hf_dir, prefix, n, baton_json = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    torch.set_default_dtype(torch.float64)
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    p = hf.read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    got = json.load(open(baton_json))["predicted"]
    want, right = [], 0
    with torch.no_grad():
        for doc in read_docs(prefix, n):
            at = len(doc) - 7
            x = torch.tensor(doc[: at + 4], dtype=torch.long).view(1, -1)
            logits = hf.forward_logits(cfg, p, x)[0]
            pred = [int(logits[at - 1 + j].argmax()) for j in range(5)]
            want += pred
            right += sum(pred[j] == doc[at + j] for j in range(5))
    diff = sum(a != b for a, b in zip(got, want))
    print(f"passkey oracle: {len(want) // 5} documents, {diff} of {len(want)} predicted digits "
          f"differ from baton's; torch digit accuracy {right / max(1, len(want)):.3f}")
    sys.exit(0 if len(got) == len(want) and diff <= 1 else 1)


main()
