"""Programs a search found, predicted: is a model biased on the schedules meta-schedule's evolutionary search measures
(what `perfcast predict --schedules tuned:DB` compiles)? The collector's random schedules and TVM's default kernels
are most of the training data; a tuned network is made of each task's best searched program.

For each network's tuning database (`--tuned-dir/NETWORK`, as `perfcast tune` and `bench/e2e.py` write them), every
tuning record is predicted and compared with its measured run_secs (median). Prints per network and model:
- all records: MAPE and the median of predicted / measured (1.0 = unbiased; above 1 = predicted too slow);
- each task's best record (the program a tuned compile uses): median ratio and the time-weighted ratio
  sum(predicted) / sum(measured), which a tuned whole-network prediction without the selection-aware correction
  inherits, and the same with each best predicted as the fastest of its task's records (`perfcast.e2e.selection`,
  sigma `--selection-sigma`, what `perfcast predict --schedules tuned:DB` does);
- the median ratio by the record's measured rank within its task (fastest 10 %, 10-25 %, 25-50 %, 50-75 %,
  slowest 25 %; tasks with at least 5 records): a model that cannot tell a task's schedules apart predicts the fast
  ones too slow and the slow ones too fast;
- regret as a cost model: the measured time of the program the model ranks first in each task, summed over tasks,
  over the sum of the best (1.00 = always picks the best).
No measuring: the databases' run_secs are the measurements (perfcast's collector timer agrees with meta-schedule's
runner on them: median ratio 0.99 over 40 resnet50 records on the znver4 host). `--baseline DIR` scores a second
model (e.g. the bundled one before a retraining) in the same run.

    python bench/searched.py [--tuned-dir runs/e2e-tuned] [--networks resnet50,mobilenet_v2,bert_tiny]
                             [--model DIR] [--baseline DIR] [--device local] [--json]
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

BINS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)


def load_database(db: str, device: str, asm: bool = False):
    """(features of every valid record's program, measured s, task ids) of a meta-schedule JSON database."""
    import tvm_ffi

    from perfcast.data.importer import database_records
    from perfcast.features.cache import features_of_programs

    progs, meas, task = [], [], []
    for r in database_records(db):
        if not r.measured:
            continue  # failed to build or run: no measurement
        progs.append(r.program())
        meas.append(r.measured_s)
        task.append(int(tvm_ffi.structural_hash(r.workload_mod)))  # tvm.ir has no structural_hash in 0.27
    if not progs:
        raise SystemExit(f"{db!r} has no tuning record with valid run_secs; tune with `perfcast tune NET --out {db}`")
    return features_of_programs(progs, device, asm=asm), np.array(meas), np.array(task)


def score(pred: np.ndarray, y: np.ndarray, task: np.ndarray, sigma: float) -> dict:
    from perfcast.e2e.selection import fastest_of
    from perfcast.eval.metrics import mape

    r = pred / y
    best, chosen, selected, q = [], [], [], np.full(len(y), np.nan)
    for t in np.unique(task):
        idx = np.flatnonzero(task == t)
        best.append(idx[np.argmin(y[idx])])
        selected.append(fastest_of(pred[idx], sigma) if sigma > 0 else pred[idx[np.argmin(y[idx])]])
        chosen.append(idx[np.argmin(pred[idx])])
        if len(idx) >= 5:
            q[idx] = (np.argsort(np.argsort(y[idx])) + 1) / len(idx)  # measured rank within the task, in (0, 1]
    best, chosen = np.array(best), np.array(chosen)
    by_rank = []
    for lo, hi in zip(BINS[:-1], BINS[1:]):
        m = (q > lo) & (q <= hi)
        by_rank.append(float(np.median(r[m])) if m.any() else None)
    return {"records": int(len(y)), "tasks": int(len(best)), "mape": mape(y, pred),
            "median_ratio": float(np.median(r)), "best_median_ratio": float(np.median(r[best])),
            "best_time_weighted_ratio": float(pred[best].sum() / y[best].sum()),
            "best_selected_time_weighted_ratio": float(np.sum(selected) / y[best].sum()),
            "ratio_by_measured_rank": by_rank, "regret": float(y[chosen].sum() / y[best].sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tuned-dir", default="runs/e2e-tuned", help="one meta-schedule database per network below it")
    ap.add_argument("--networks", default="resnet50,mobilenet_v2,bert_tiny")
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--baseline", default=None, help="a second model directory scored beside it")
    ap.add_argument("--device", default="local", help="device the databases were measured on")
    ap.add_argument("--selection-sigma", type=float, default=None, help="sigma of the fastest-of prediction "
                    "(default: each model's fitted one, `perfcast.e2e.selection.model_sigma`)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.e2e.selection import check_sigma, model_sigma
    from perfcast.models import load_model

    models = {"model": load_model(a.model)}
    if a.baseline:
        models["baseline"] = load_model(a.baseline)
    sigma = {k: model_sigma(m) if a.selection_sigma is None else check_sigma(a.selection_sigma)
             for k, m in models.items()}
    out = {}
    for net in [n for n in a.networks.split(",") if n]:
        db = os.path.join(a.tuned_dir, net)
        if not os.path.isdir(db):
            raise SystemExit(f"no tuning database {db!r}; write one with `perfcast tune {net} --out {db}` "
                             "(or run bench/e2e.py --schedules tuned)")
        X, y, task = load_database(db, a.device, asm=any(m.needs_asm for m in models.values()))
        out[net] = {k: {**score(m.predict(X), y, task, sigma[k]), "selection_sigma": sigma[k]}
                    for k, m in models.items()}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    names = [f"{lo:.0%}-{hi:.0%}" for lo, hi in zip(BINS[:-1], BINS[1:])]
    print(f"predicted / measured of searched programs; by measured rank within the task: {' '.join(names)}")
    for net, per in out.items():
        for k, s in per.items():
            ranks = " ".join("  -  " if v is None else f"{v:5.2f}" for v in s["ratio_by_measured_rank"])
            print(f"{net:13s} {k:8s} {s['records']:5d} rec {s['tasks']:3d} tasks  MAPE {s['mape']:6.1%}  median "
                  f"{s['median_ratio']:.2f}  best: median {s['best_median_ratio']:.2f} time-weighted "
                  f"{s['best_time_weighted_ratio']:.2f} (fastest-of, sigma {s['selection_sigma']:g}: "
                  f"{s['best_selected_time_weighted_ratio']:.2f})  "
                  f"by rank {ranks}  regret {s['regret']:.2f}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
