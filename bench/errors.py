"""Where does a model's error come from? Its test part (default: the bundled model on the split it was trained with),
grouped by operator family (the task name's first word), latency bucket, schedule kind, measurement protocol and
device: programs, MAPE, share of the total absolute error, and the median of log(predicted / measured) (below 0 =
under-predicted).

Then the question that decides what to work on: is the error an offset per task (the model misjudges what a task
costs, every program of it alike) or a misranking within a task (it misjudges which schedule of a task is fast)?
The MAPE is recomputed with each (task, device)'s median log ratio removed (the error a perfect per-task offset
would leave) and with each device's (what a perfect calibration would leave). No measuring: it reads the dataset
and cached features.

`--part train` (or `val`) asks the same of the programs the model was fitted on (or early-stopped on): a training
error close to the test error means the model under-fits (its features cannot tell the schedules apart), a much
lower one that it over-fits. `--sample N` scores N programs of the part drawn at random (seed 0).

    python bench/errors.py [--model DIR] [--data DIR] [--part test|val|train] [--sample N] [--top 12] [--json]
"""

from __future__ import annotations

import argparse
import json
import re

import numpy as np

GROUPS = ("op", "latency", "schedule_kind", "protocol", "device_key")
LATENCY_EDGES_S = (0.0, 1e-5, 1e-4, 1e-3, 1e-2, np.inf)
TWO_WORD = {"layer", "batch", "max", "avg", "adaptive", "global"}  # layer_norm, batch_norm, max_pool2d, ...


def op_family(task_name: str) -> str:
    """'fused_conv2d12_add3_relu2' -> 'conv2d', 'fused_layer_norm1' -> 'layer_norm'."""
    words = re.sub(r"\d+(?=_|$)", "", task_name.removeprefix("fused_")).split("_")
    return "_".join(words[:2]) if words[0] in TWO_WORD and len(words) > 1 else words[0]


def latency_buckets(latency_s: np.ndarray) -> np.ndarray:
    """Each latency's bucket of `LATENCY_EDGES_S` by name ('< 10 µs', '10-100 µs', ..., '>= 10000 µs')."""
    import pandas as pd

    e = LATENCY_EDGES_S
    names = [f"< {e[1] * 1e6:g} µs"] + [f"{lo * 1e6:g}-{hi * 1e6:g} µs" for lo, hi in zip(e[1:-2], e[2:-1])] + \
        [f">= {e[-2] * 1e6:g} µs"]
    return pd.cut(latency_s, e, right=False, labels=names).astype(str)


def _mape_without(log_ratio: np.ndarray, keys) -> float:
    """MAPE after removing each group's median log ratio."""
    import pandas as pd

    lr = pd.Series(log_ratio)
    centred = lr - lr.groupby(keys).transform("median").to_numpy()
    return float(np.mean(np.abs(np.exp(centred.to_numpy()) - 1)))


def breakdown(y: np.ndarray, pred: np.ndarray, frame) -> dict:
    """The tables and the offset-vs-ranking figures for test records `frame` (task_name, schedule_kind, protocol,
    device_key, workload_key), measured `y`, predicted `pred`."""
    import pandas as pd

    from perfcast.eval.metrics import mape

    ape = np.abs(pred / y - 1)
    lr = np.log(pred / y)
    d = pd.DataFrame({"op": frame["task_name"].map(op_family).to_numpy(),
                      "latency": latency_buckets(y),
                      "schedule_kind": frame["schedule_kind"].to_numpy(), "protocol": frame["protocol"].to_numpy(),
                      "device_key": frame["device_key"].to_numpy(), "ape": ape, "lr": lr})
    out = {"programs": int(len(y)), "mape": mape(y, pred), "groups": {}}
    for g in GROUPS:
        t = d.groupby(g).agg(programs=("ape", "size"), mape=("ape", "mean"), ape_sum=("ape", "sum"),
                             median_log_ratio=("lr", "median"))
        t["share"] = t.pop("ape_sum") / ape.sum()
        out["groups"][g] = {str(k): {c: (int(v) if c == "programs" else float(v)) for c, v in row.items()}
                            for k, row in t.sort_values("share", ascending=False).iterrows()}
    task = frame["workload_key"].astype(str).to_numpy() + "|" + frame["device_key"].astype(str).to_numpy()
    out["mape_without_task_offsets"] = _mape_without(lr, task)
    out["mape_without_device_offsets"] = _mape_without(lr, frame["device_key"].to_numpy())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled dataset)")
    ap.add_argument("--part", choices=("test", "val", "train"), default="test",
                    help="which part of the model's split to score (default: test)")
    ap.add_argument("--sample", type=int, default=None, help="score N programs of the part drawn at random (seed 0)")
    ap.add_argument("--top", type=int, default=12, help="rows per table (largest share of the error first)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.eval.workflow import own_split

    from perfcast.errors import PerfcastError

    m, ds, df, X, name, sp = own_split(a.model, a.data)
    idx = getattr(sp, a.part)
    if a.sample is not None:
        if a.sample < 1:
            raise PerfcastError(f"--sample {a.sample} must be a number of programs >= 1 (or leave it out for all)")
        idx = np.sort(np.random.default_rng(0).choice(idx, min(a.sample, len(idx)), replace=False))
    y = df["latency_s"].to_numpy()[idx]
    out = {"model": m.name, "split": name, "part": a.part,
           **breakdown(y, m.predict(X.take(idx)), df.iloc[idx])}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{m.name} on the {a.part} part of its {name} split: {out['programs']} programs, MAPE {out['mape']:.1%}")
    for g, rows in out["groups"].items():
        print(f"\n{g:40s} {'programs':>9s} {'MAPE':>7s} {'share':>7s} {'median log(pred/meas)':>22s}")
        for k, r in list(rows.items())[:a.top]:
            print(f"{k[:40]:40s} {r['programs']:9d} {r['mape']:7.1%} {r['share']:7.1%} {r['median_log_ratio']:+22.3f}")
    print(f"\nMAPE {out['mape']:.1%}; with each (task, device)'s median offset removed "
          f"{out['mape_without_task_offsets']:.1%}; with each device's removed "
          f"{out['mape_without_device_offsets']:.1%}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
