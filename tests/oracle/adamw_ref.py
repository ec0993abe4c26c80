"""Reference for tests/unit/test_optim.c: AdamW + global-norm clipping + warmup/decay
schedule in float64 with torch.optim.AdamW, torch.nn.utils.clip_grad_norm_ and
torch.optim.lr_scheduler.LambdaLR.

Usage: /usr/bin/python3 adamw_ref.py IN OUT

IN is whitespace-separated text; floats are C99 hex literals (exact float32/float64):
    lr min_lr warmup schedule(cosine|linear|constant) weight_decay grad_clip beta1 beta2 eps
    total_steps nsteps ntensors
    per tensor: n decay(0|1), then n initial parameters
    per step, per tensor: n gradients
OUT is text, floats as float.hex():
    per step: lr grad_norm(before clipping)
    per tensor: n parameters, n first moments, n second moments (after the last step)
"""
import math
import sys

import torch


def lr_at(step, total, hp):
    """Steps from 1: warmup lr*step/warmup, then Megatron's decay (iteration k decays by
    k - 1 - warmup steps of total - warmup), so the first decay step runs at lr."""
    lr, min_lr, warmup, sched = hp["lr"], hp["min_lr"], hp["warmup"], hp["schedule"]
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    if sched == "constant":
        return lr
    if step > total:
        return min_lr
    ratio = (step - warmup - 1) / (total - warmup)
    if sched == "linear":
        coef = 1.0 - ratio
    else:
        coef = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return min_lr + coef * (lr - min_lr)


def parse_float(tok):
    return float.fromhex(tok)


def main():
    tokens = open(sys.argv[1]).read().split()
    pos = 0

    def take(n=1):
        nonlocal pos
        out = tokens[pos : pos + n]
        pos += n
        return out

    names = ["lr", "min_lr", "warmup", "schedule", "weight_decay", "grad_clip", "beta1",
             "beta2", "eps", "total", "nsteps", "ntensors"]
    hp = dict(zip(names, take(len(names))))
    for k in ("lr", "min_lr", "weight_decay", "grad_clip", "beta1", "beta2", "eps"):
        hp[k] = parse_float(hp[k])
    for k in ("warmup", "total", "nsteps", "ntensors"):
        hp[k] = int(hp[k])

    params, decays = [], []
    for _ in range(hp["ntensors"]):
        n, decay = (int(t) for t in take(2))
        values = [parse_float(t) for t in take(n)]
        params.append(torch.tensor(values, dtype=torch.float64, requires_grad=True))
        decays.append(decay)

    groups = [
        {"params": [p for p, d in zip(params, decays) if d], "weight_decay": hp["weight_decay"]},
        {"params": [p for p, d in zip(params, decays) if not d], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=hp["lr"],
                            betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])
    # LambdaLR evaluates the factor at 0, 1, ...; optimizer step k (from 1) uses factor k-1.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: lr_at(i + 1, hp["total"], hp) / hp["lr"])

    out = []
    for _ in range(hp["nsteps"]):
        for p in params:
            p.grad = torch.tensor([parse_float(t) for t in take(p.numel())], dtype=torch.float64)
        if hp["grad_clip"] > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(params, hp["grad_clip"]))
        else:
            norm = math.sqrt(sum(float((p.grad * p.grad).sum()) for p in params))
        out.append("%s %s" % (float(opt.param_groups[0]["lr"]).hex(), norm.hex()))
        opt.step()
        sched.step()

    for p in params:
        state = opt.state[p]
        for t in (p.detach(), state["exp_avg"], state["exp_avg_sq"]):
            out.append(" ".join(float(x).hex() for x in t.tolist()))
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
