"""Does LLVM hoist the work a schedule recomputes inside a loop it does not depend on? Measured latencies say.

Meta-schedule may compute a reduction (a LayerNorm's mean, an RMSNorm's sum of squares) inside the output's inner
loop, which it does not use, so the program's counted work runs it once per trip of that loop (`_tir.Leaf.
invariant_extent`). LLVM sometimes hoists it out and sometimes does not, and a model that only sees the counts
cannot tell. For the stored programs of one device whose task names match
`--tasks`, this prints the latency per unit of work (FLOPs + loads, nanoseconds) counted in full and counted with
the invariant loops run once, for the programs with an invariant factor of `--min-factor` or more, split by
whether TVM unrolls the work inside the invariant loop (its trips at most the `pragma_auto_unroll_max_step` of
the loops around it), beside the same for the task's programs without such loops. Near the latter's rate on the
full count: the recomputation ran; on the hoisted count: LLVM hoisted it. No measuring: it reads the dataset.

`--model-errors` asks what that does to a model (default: the bundled one, `--model DIR`): on the test part of
its own split, the programs of the matching tasks (every device) with `coverage.recomputed_share` at least
`coverage.RECOMPUTE_SHARE` against the others: MAPE and percentiles of predicted / measured (what `perfcast
predict-records` warns about).

    python bench/invariant_work.py [--data DIR] [--device-key KEY] [--tasks layer_norm] [--min-factor 4]
                                   [--model-errors [--model DIR]] [--json]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np


def program_work(script: str) -> dict:
    """Full and hoisted work (FLOPs + loads) of a stored program, its largest invariant factor, and whether TVM
    unrolls the work inside every store's innermost invariant loop."""
    from perfcast.eval.coverage import counted_work
    from perfcast.features._tir import walk
    from perfcast.features.base import as_primfunc

    func = as_primfunc(script)
    full, hoisted = counted_work(func)
    unrolled = True
    factor = 1
    for x in walk(func).leaves:
        if x.invariant_extent > 1:
            factor = max(factor, x.invariant_extent)
            unrolled &= x.invariant_body <= max((lp.auto_unroll for lp in x.loops), default=0)
    return {"full": full, "hoisted": hoisted, "factor": factor, "unrolled": unrolled}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="dataset directory (default: bundled)")
    ap.add_argument("--device-key", default="local@AMD EPYC/znver4",
                    help="whose records (a device key of the dataset, as `perfcast data summary` lists them)")
    ap.add_argument("--tasks", default="layer_norm", help="a regular expression the task names must match")
    ap.add_argument("--min-factor", type=int, default=4, help="the invariant factor that counts as recomputation")
    ap.add_argument("--model-errors", action="store_true", help="also the model's test-part errors by recomputing")
    ap.add_argument("--model", default=None, help="with --model-errors: the model (default: bundled)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import pandas as pd

    from perfcast import paths
    from perfcast.data.store import Dataset
    from perfcast.devices.base import device_key_of_json
    from perfcast.errors import PerfcastError

    ds = Dataset(a.data or paths.bundled_dataset_dir())
    t = ds.read("records", ["task_name", "device_spec_json", "tir_script", "status", "latency_s"]).to_pandas()
    t = t[(t["status"] == "ok") & t["task_name"].str.contains(a.tasks, regex=True)]
    t = t[t["device_spec_json"].map(device_key_of_json) == a.device_key]
    if t.empty:
        raise PerfcastError(f"no ok record of {a.device_key!r} whose task matches {a.tasks!r}: check --device-key "
                            "against `perfcast data summary` and --tasks")
    w = pd.DataFrame([program_work(s) for s in t["tir_script"]], index=t.index)
    t = t.join(w)
    t["ns_full"] = t["latency_s"] / t["full"] * 1e9
    t["ns_hoisted"] = t["latency_s"] / t["hoisted"] * 1e9
    plain = t[t["factor"] == 1]
    base = float(plain["ns_full"].median()) if len(plain) else math.nan
    rows = {"no invariant loop": plain}
    inv = t[t["factor"] >= a.min_factor]
    rows["invariant, unrolled by TVM"] = inv[inv["unrolled"]]
    rows["invariant, not unrolled"] = inv[~inv["unrolled"]]
    out = {"device_key": a.device_key, "tasks": a.tasks, "programs": int(len(t)), "groups": {}}
    for name, g in rows.items():
        if g.empty:
            continue
        hoisted_like = g["ns_hoisted"] < 3 * base  # at most 3x the plain programs' rate on the hoisted count
        out["groups"][name] = {"programs": int(len(g)), "ns_per_full_work": float(g["ns_full"].median()),
                               "ns_per_hoisted_work": float(g["ns_hoisted"].median()),
                               "median_factor": float(g["factor"].median()),
                               "at_hoisted_rate": int(hoisted_like.sum())}
    if a.model_errors:
        out["model_errors"] = model_errors(a.model, a.data, a.tasks)
    if a.json:
        print(json.dumps(out))
        return
    print(f"{out['programs']} programs of {a.device_key} matching {a.tasks!r}; ns per unit of work (FLOPs + loads), "
          "median")
    print(f"{'group':30s} {'programs':>8s} {'full count':>11s} {'hoisted':>9s} {'factor':>7s} {'at hoisted rate':>16s}")
    for name, g in out["groups"].items():
        print(f"{name:30s} {g['programs']:8d} {g['ns_per_full_work']:11.4f} {g['ns_per_hoisted_work']:9.4f} "
              f"{g['median_factor']:7.0f} {g['at_hoisted_rate']:16d}")
    if a.model_errors:
        e = out["model_errors"]
        print(f"{e['model']} on its test part, tasks matching {a.tasks!r}, every device:")
        for name in ("recomputing", "others"):
            g = e[name]
            if g["programs"]:
                print(f"  {name:12s} {g['programs']:6d} programs  MAPE {100 * g['mape']:.1f} %  predicted / measured "
                      f"p5 {g['ratio_p5']:.2f} median {g['ratio_p50']:.2f} p95 {g['ratio_p95']:.2f}")


def model_errors(model, data, tasks: str) -> dict:
    """The model's errors on its own test part's programs of tasks matching `tasks`, split by whether the program
    repeats loop-invariant work (`coverage.recomputed_share` >= `coverage.RECOMPUTE_SHARE`)."""
    from perfcast.eval.coverage import RECOMPUTE_SHARE, recomputed_share
    from perfcast.eval.workflow import own_split

    m, ds, df, X, name, sp = own_split(model, data)
    idx = np.asarray(sp.test)
    idx = idx[df["task_name"].iloc[idx].str.contains(tasks, regex=True).to_numpy()]
    scripts = ds.read("records", ["record_id", "tir_script"]).to_pandas().drop_duplicates("record_id")
    script = dict(zip(scripts["record_id"], scripts["tir_script"]))
    ratio = m.predict(X.take(idx)) / df["latency_s"].iloc[idx].to_numpy()
    recomputing = np.array([recomputed_share(script[r]) >= RECOMPUTE_SHARE for r in df["record_id"].iloc[idx]])
    out = {"model": m.name, "split": name, "share": RECOMPUTE_SHARE}
    for key, sel in (("recomputing", recomputing), ("others", ~recomputing)):
        r = ratio[sel]
        out[key] = {"programs": int(sel.sum()), "mape": float(np.mean(np.abs(r - 1))) if len(r) else math.nan,
                    **{f"ratio_p{q}": float(np.percentile(r, q)) if len(r) else math.nan for q in (5, 50, 95)}}
    return out


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
