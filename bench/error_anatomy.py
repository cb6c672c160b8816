"""Where a model's kernel error comes from: its own test part against a sample of its training part, by kind of
program, by operator family and by how far off the prediction is. No measuring: it reads the dataset and cached
features.

Per part (the model's test part; a seeded sample of its training part, scored on programs it was fitted to):
- MAPE, median and 90th-percentile absolute percentage error;
- the share of programs and of the summed error by prediction / measurement ratio (under- vs over-predicted);
- by schedule kind (`default` TVM kernels, `random` schedules, `imported` search programs);
- by operator family (the task name without its numbers and fusion suffixes' digits), the families that carry the
  most of the summed error;
- the task-median oracle: the MAPE of predicting every program as the median measured latency of its (task, device)
  — how much of the error is the spread *within* a task, which a model must rank and scale program by program.

A training-part MAPE close to the test one says the model under-fits (features or capacity), a much lower one that
it fails to generalise to new tasks.

    python bench/error_anatomy.py [--model DIR] [--data DIR] [--train-sample 15000] [--top 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import re

import numpy as np

RATIO_BINS = ((0.0, 0.5), (0.5, 0.8), (0.8, 1.25), (1.25, 2.0), (2.0, np.inf))


def family(task_name: str) -> str:
    """`fused_conv2d3_add7_relu2` -> `fused_conv2d_add_relu`: the operator family of a task name."""
    return re.sub(r"(?<=[a-z_])\d+(?=_|$)", "", task_name)


def anatomy(df, y, pred, idx, top: int) -> dict:
    import pandas as pd

    t = y[idx]
    r = pred / t
    ape = np.abs(r - 1)
    sub = df.iloc[idx]
    keys = list(zip(sub["workload_key"], sub["device_key"]))
    logs = pd.Series(np.log(t)).groupby(pd.Series(keys).astype(str).to_numpy()).transform("median").to_numpy()
    total = float(ape.sum())
    by_ratio = {}
    for lo, hi in RATIO_BINS:
        m = (r >= lo) & (r < hi)
        by_ratio[f"[{lo:g}, {hi:g})"] = {"programs": float(m.mean()), "error_share": float(ape[m].sum() / total)}
    kinds = sub["schedule_kind"].to_numpy()
    by_kind = {k: {"programs": int((kinds == k).sum()), "mape": float(ape[kinds == k].mean())}
               for k in sorted(set(kinds))}
    fam = np.array([family(n) for n in sub["task_name"]])
    fams = []
    for f in sorted(set(fam)):
        m = fam == f
        fams.append({"family": f, "programs": int(m.sum()), "mape": float(ape[m].mean()),
                     "error_share": float(ape[m].sum() / total)})
    fams.sort(key=lambda d: -d["error_share"])
    return {"programs": int(len(idx)), "mape": float(ape.mean()), "median_ape": float(np.median(ape)),
            "p90_ape": float(np.quantile(ape, 0.9)),
            "task_median_oracle_mape": float(np.mean(np.abs(np.exp(logs) / t - 1))),
            "by_ratio": by_ratio, "by_kind": by_kind, "families": fams[:top]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled dataset)")
    ap.add_argument("--train-sample", type=int, default=15000, help="training programs to score (seeded sample)")
    ap.add_argument("--top", type=int, default=8, help="operator families to list")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.errors import PerfcastError
    from perfcast.eval.workflow import own_split

    if a.train_sample < 1:
        raise PerfcastError(f"--train-sample {a.train_sample} scores no training program; pass 1 or more")
    m, _, df, X, name, sp = own_split(a.model, a.data)
    y = df["latency_s"].to_numpy()
    train = np.asarray(sp.train)
    sample = np.sort(np.random.default_rng(a.seed).choice(train, min(a.train_sample, len(train)), replace=False))
    out = {"split": name}
    for part, idx in (("test", np.asarray(sp.test)), ("train_sample", sample)):
        out[part] = anatomy(df, y, m.predict(X.take(idx)), idx, a.top)
    if a.json:
        print(json.dumps(out, indent=1))
        return
    for part in ("test", "train_sample"):
        d = out[part]
        print(f"{part} ({d['programs']} programs, split {name}): MAPE {100 * d['mape']:.1f} %, median "
              f"{100 * d['median_ape']:.1f} %, p90 {100 * d['p90_ape']:.1f} %; task-median oracle "
              f"{100 * d['task_median_oracle_mape']:.1f} %")
        print("  predicted / measured   programs  share of error")
        for b, v in d["by_ratio"].items():
            print(f"  {b:20s} {100 * v['programs']:8.1f} %  {100 * v['error_share']:8.1f} %")
        print("  " + ", ".join(f"{k} {v['programs']} programs MAPE {100 * v['mape']:.1f} %"
                               for k, v in d["by_kind"].items()))
        print("  operator family                                   programs   MAPE  share of error")
        for f in d["families"]:
            print(f"  {f['family'][:48]:48s} {f['programs']:9d} {100 * f['mape']:5.1f} %  "
                  f"{100 * f['error_share']:6.1f} %")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
