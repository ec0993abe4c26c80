"""Checks `baton plan --json` against figures computed here independently.

usage: check_plan_figures.py BATON RECIPES_DIR
Parameter counts are recomputed from the architectures below (LLaMA with GQA, SwiGLU,
untied head); memory figures are checked against the engine's accounting (4-byte fp32
weights plus, on CUDA, the GEMMs' 2-byte converted copies of the layers' attention and
MLP weights; ZeRO-1 optimizer at 8 bytes/param (Adam m, v) over tp*pp*dp).
"""
import json
import os
import subprocess
import sys


def llama_params(dim, layers, heads, kv, ffn, vocab):
    hd = dim // heads
    attn = dim * heads * hd + 2 * dim * kv * hd + heads * hd * dim
    return vocab * dim + layers * (attn + 3 * dim * ffn + 2 * dim) + dim + dim * vocab


def plan(baton, path):
    out = subprocess.run([baton, "plan", "--json", path], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"baton plan --json {path} exited {out.returncode}: {out.stderr}")
    return json.loads(out.stdout)


failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def near(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def check_shape(stage):
    for key in ["name", "params_total", "world", "layout", "memory_per_gpu", "fits",
                "comm_bytes_per_step", "flops_per_step", "warnings"]:
        check(key in stage, f"{stage.get('name')}: key {key}")
    for key in ["params", "grads", "optimizer", "activations", "total"]:
        check(key in stage["memory_per_gpu"], f"{stage.get('name')}: memory_per_gpu.{key}")
    mem = stage["memory_per_gpu"]
    parts = mem["params"] + mem["grads"] + mem["optimizer"] + mem["activations"]
    check(mem["total"] >= parts * 0.999, f"{stage['name']}: total memory covers its parts")


def plan_sets(baton, path, sets):
    args = [baton, "plan", "--json", path]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True)
    return out.returncode, (json.loads(out.stdout) if out.stdout.startswith("{") else None)


def check_alternatives(baton, path, micro_batch, extra=()):
    """A stage that does not fit (no recomputation, a larger micro_batch): plan exits 1,
    prints the whole plan, and offers at most three settings of the same devices, each of
    which, given to the recipe, plans as offered: it fits, with that memory and step time;
    one per split of tp and pp. extra: more settings of the recipe, which the offers keep
    (sequence_parallel off stays off); one that changes pp where the recipe gives
    stage_layers says to drop them."""
    base = ["defaults.recompute=none", f"defaults.micro_batch={micro_batch}", *extra]
    rc, p = plan_sets(baton, path, base)
    name = os.path.basename(path)
    check(rc == 1 and p is not None, f"{name} without recomputation: plan exits 1 ({rc}), JSON printed")
    if p is None:
        return
    st = p["stages"][0]
    alts = st["alternatives"]
    check(st["fits"] is False and 1 <= len(alts) <= 3, f"{name}: {len(alts)} alternatives offered")
    check(len({(a["tp"], a["pp"]) for a in alts}) == len(alts), f"{name}: one per tp x pp split")
    for a in alts:
        sets = base + [f"defaults.parallel.{k}={a[k]}" for k in ("tp", "pp", "dp", "zero", "virtual_stages")]
        sets += [f"defaults.recompute={a['recompute']}", f"defaults.micro_batch={a['micro_batch']}"]
        split = [x for x in extra if x.startswith("defaults.parallel.stage_layers=")]
        if split and "pp: " in a["keys"]:  # the keys name pp where it changed
            check("stage_layers: []" in a["keys"], f"{name}: {a['keys']} does not drop stage_layers")
            sets.append("defaults.parallel.stage_layers=[]")
        rc, q = plan_sets(baton, path, sets)
        got = q["stages"][0] if q else None
        check(rc == 0 and got is not None and got["fits"] is True and got["world"] == st["world"]
              and got["memory_per_gpu"]["total"] == a["memory_total"]
              and near(got["step_time_s"], a["step_time_s"], 1e-5),
              f"{name}: alternative {a['keys']} plans to fit as offered (exit {rc})")


def main():
    baton, recipes = sys.argv[1], sys.argv[2]

    p70 = plan(baton, os.path.join(recipes, "llama3-70b-64gpu.yaml"))
    s = p70["stages"][0]
    check_shape(s)
    n70 = llama_params(8192, 80, 64, 8, 28672, 128256)
    check(n70 == 70553706496, "independent 70B count is 70,553,706,496")
    check(s["params_total"] == n70, f"70B params_total {s['params_total']} == {n70}")
    check(f"{s['params_total'] / 1e9:.2f}" == "70.55", "70B prints as 70.55B")
    check(s["world"] == 64, "70B world 64")
    mem = s["memory_per_gpu"]
    layer_gemms = 8192 * 64 * 128 * 2 + 2 * 8192 * 8 * 128 + 3 * 8192 * 28672
    want = 4 * n70 / 32 + 2 * 20 * layer_gemms / 8  # stage 0: 20 layers over tp 8
    check(near(mem["params"], want, 0.03), f"70B params/GPU {mem['params']:.3e} ~ {want:.3e}")
    check(near(mem["optimizer"], 8 * n70 / 64, 0.03),
          f"70B optimizer/GPU {mem['optimizer']:.3e} ~ 8.8e9")
    check(mem["total"] < 80e9 and s["fits"] is True, f"70B fits in 80 GB ({mem['total']:.3e})")
    check(s["comm_bytes_per_step"]["tp"] > 0 and s["comm_bytes_per_step"]["cp"] == 0,
          "70B has TP traffic and no CP traffic")
    tokens = 1024 * 8192
    check(s["flops_per_step"] >= 6 * n70 * tokens, "70B flops >= 6 N T")

    p405 = plan(baton, os.path.join(recipes, "llama3-405b.yaml"))
    names = [st["name"] for st in p405["stages"]]
    check(names == ["pretrain", "long-context", "fp8"], f"405B stages {names}")
    n405 = llama_params(16384, 126, 128, 8, 53248, 128256)
    for st in p405["stages"]:
        check_shape(st)
        check(st["params_total"] == n405, f"405B {st['name']} params_total == {n405}")
        check(st["world"] == 16384, f"405B {st['name']} world 16384")
    check(f"{n405 / 1e9:.2f}" == "405.85", "405B prints as 405.85B")
    check(p405["stages"][1]["comm_bytes_per_step"]["cp"] > 0, "405B long-context has CP traffic")
    check(p405["stages"][0]["comm_bytes_per_step"]["cp"] == 0, "405B pretrain has no CP traffic")

    tiny = plan(baton, os.path.join(recipes, "tiny-cpu.yaml"))
    check(len(tiny["stages"]) == 3, "tiny recipe has three stages")
    check(tiny["stages"][0]["params_total"] == llama_params(128, 4, 4, 2, 352, 320),
          "tiny params_total recomputed")

    moe = plan(baton, os.path.join(recipes, "deepseek-moe-16b.yaml"))
    st = moe["stages"][0]
    check_shape(st)
    check(st["comm_bytes_per_step"]["ep"] > 0, "MoE plan has EP traffic")
    check(near(st["params_total"], 16.4e9, 0.03), f"MoE params {st['params_total']:.4e} ~ 16.4B")

    check_alternatives(baton, os.path.join(recipes, "llama3-70b-64gpu.yaml"), 2)
    check_alternatives(baton, os.path.join(recipes, "deepseek-moe-16b.yaml"), 4)
    check_alternatives(baton, os.path.join(recipes, "llama3-70b-64gpu.yaml"), 2,
                       ["defaults.parallel.tp=1", "defaults.parallel.dp=16",
                        "defaults.parallel.sequence_parallel=false"])
    check_alternatives(baton, os.path.join(recipes, "llama3-70b-64gpu.yaml"), 2,
                       ["defaults.parallel.stage_layers=[21,20,20,19]"])

    if failures:
        sys.exit(f"{len(failures)} check(s) failed")


main()
