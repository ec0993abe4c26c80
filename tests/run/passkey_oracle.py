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
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ckpt", "hf"))
import hf_llama_loss as hf  # noqa: E402  (exits 77 without torch)

torch = hf.torch


def main():
    hf_dir, prefix, n, baton_json = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    torch.set_default_dtype(torch.float64)
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    p = hf.read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    got = json.load(open(baton_json))["predicted"]
    want, right = [], 0
    with torch.no_grad():
        for doc in hf.read_sequences(prefix, n):
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
