"""Float64 PyTorch reference of the MoE layer defined in worker/engine/moe.h.

Usage: /usr/bin/python3 moe_ref.py IN OUT  (written and read by tests/unit/test_moe.c)

IN, little-endian:
  int32[8]   N, C (dim), F (ffn_dim), E, k, S (shared), score (0 softmax, 1 sigmoid),
             norm_topk
  float64[2] capacity_factor, aux_loss_coef
  float32    x (N, C), bias (E), then the weights in moe_weights_carve order:
             router (E, C), w13 (E, 2F, C), w2 (E, C, F), shared_w13 (S, 2F, C),
             shared_w2 (S, C, F); then dy (N, C)
OUT, float64:
  y (N, C), aux, dropped, routed (E), dx (N, C), then the weight gradients in the
  same order as the weights, of L = sum(y * dy) + aux.

The formulation is deliberately unlike moe.c's: every expert runs densely on every
token and a (N, E) mask of kept pairs times the combine weights picks the results;
capacity comes from a cumulative sum over tokens; gradients come from autograd.
Exit status 77 when torch is missing.
"""

import math
import sys

import numpy as np

try:
    import torch
except ImportError:
    print("SKIPPED: torch is not importable by", sys.executable)
    sys.exit(77)


def read_inputs(path):
    raw = open(path, "rb").read()
    hdr = np.frombuffer(raw, dtype="<i4", count=8)
    N, C, F, E, K, S, score, norm = (int(v) for v in hdr)
    cf, coef = np.frombuffer(raw, dtype="<f8", count=2, offset=32)
    f32 = np.frombuffer(raw, dtype="<f4", offset=48).astype(np.float64)
    shapes = {
        "x": (N, C), "bias": (E,), "router": (E, C), "w13": (E, 2 * F, C),
        "w2": (E, C, F), "sw13": (S, 2 * F, C), "sw2": (S, C, F), "dy": (N, C),
    }
    t, off = {}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape))
        t[name] = torch.tensor(f32[off:off + n].reshape(shape), dtype=torch.float64)
        off += n
    assert off == f32.size, "input size mismatch"
    cfg = dict(N=N, C=C, F=F, E=E, K=K, S=S, score=score, norm=norm, cf=float(cf),
               coef=float(coef))
    return cfg, t


def expert(x, w13, w2, F):
    h = x @ w13.T
    return (torch.nn.functional.silu(h[:, :F]) * h[:, F:]) @ w2.T


def forward(cfg, t):
    N, F, E, K = cfg["N"], cfg["F"], cfg["E"], cfg["K"]
    x = t["x"]
    logits = x @ t["router"].T
    s = torch.softmax(logits, dim=1) if cfg["score"] == 0 else torch.sigmoid(logits)
    sel = torch.topk(s.detach() + t["bias"], K, dim=1).indices
    mask = torch.zeros(N, E, dtype=torch.float64).scatter_(1, sel, 1.0)
    g = s * mask
    if cfg["norm"]:
        g = g / g.sum(dim=1, keepdim=True)
    kept = mask
    dropped = 0
    if cfg["cf"] > 0:
        cap = math.ceil(cfg["cf"] * N * K / E)
        position = torch.cumsum(mask, dim=0)  # 1-based arrival order per expert
        kept = mask * (position <= cap).double()
        dropped = int((mask - kept).sum().item())
    y = torch.zeros_like(x)
    for e in range(E):
        y = y + (g[:, e] * kept[:, e]).unsqueeze(1) * expert(x, t["w13"][e], t["w2"][e], F)
    for sh in range(cfg["S"]):
        y = y + expert(x, t["sw13"][sh], t["sw2"][sh], F)
    routed = mask.sum(dim=0)
    aux = torch.zeros((), dtype=torch.float64)
    if cfg["coef"] > 0:
        p = s / s.sum(dim=1, keepdim=True)
        f = routed / (N * K)
        aux = cfg["coef"] * E * (f * p.mean(dim=0)).sum()
    return y, aux, dropped, routed


def main():
    if len(sys.argv) != 3:
        print("usage: moe_ref.py IN OUT", file=sys.stderr)
        return 2
    cfg, t = read_inputs(sys.argv[1])
    params = ["x", "router", "w13", "w2", "sw13", "sw2"]
    for name in params:
        t[name].requires_grad_(True)
    y, aux, dropped, routed = forward(cfg, t)
    loss = (y * t["dy"]).sum() + aux
    loss.backward()
    out = [y.detach().reshape(-1), aux.detach().reshape(1),
           torch.tensor([float(dropped)], dtype=torch.float64), routed.reshape(-1)]
    for name in params:
        g = t[name].grad
        out.append(torch.zeros_like(t[name]).reshape(-1) if g is None else g.reshape(-1))
    np.concatenate([o.numpy() for o in out]).astype("<f8").tofile(sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
