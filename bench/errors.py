"""Where does a model's error come from? Its test part (default: the bundled model on the split it was trained with),
grouped by operator family (the task name's first word), latency bucket, schedule kind, measurement protocol and
device: programs, MAPE, share of the total absolute error, and the median of log(predicted / measured) (below 0 =
under-predicted).

Then the question that decides what to work on: is the error an offset per task (the model misjudges what a task
costs, every program of it alike) or a misranking within a task (it misjudges which schedule of a task is fast)?
The MAPE is recomputed with each (task, device)'s median log ratio removed (the error a perfect per-task offset
would leave) and with each device's (what a perfect calibration would leave). No measuring: it reads the dataset
and cached features.

Three more figures say whether a better model or better features are needed. The *dispersion slope*: within each
(task, device), log measured regressed on log predicted (1: the predictions spread a task's schedules as much as
they should; above 1: too flat). The *shared error*: for programs measured on several devices, the correlation of
a record's log error with the program's mean log error on the other devices (near 0: the error is the device's or the
timer's; high: it is the program's, on every CPU alike, and the features miss something about the program). The
*feature collisions*: records of the dataset whose feature rows (every column loaded for the model: compact AST,
per-store, analytic, device, and assembly if it reads them) are identical to
another record's, and how far their latencies lie from their group's median (what no model on these features can
get under).

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


def _centred(x: np.ndarray, groups, stat: str) -> np.ndarray:
    """`x` minus its group's `stat` ('median', 'mean')."""
    import pandas as pd

    return x - pd.Series(x).groupby(groups).transform(stat).to_numpy()


def _mape_without(log_ratio: np.ndarray, keys) -> float:
    """MAPE after removing each group's median log ratio."""
    return float(np.mean(np.abs(np.exp(_centred(log_ratio, keys, "median")) - 1)))


def dispersion_slope(log_pred: np.ndarray, log_y: np.ndarray, groups) -> float:
    """Least-squares slope of log measured on log predicted, each centred on its group's mean."""
    cy, cp = _centred(log_y, groups, "mean"), _centred(log_pred, groups, "mean")
    return float((cp * cy).sum() / (cp * cp).sum())


def shared_error(log_ratio: np.ndarray, program, device) -> dict:
    """Correlation of each (program, device)'s log error with the mean of the same program's on the other devices,
    over the programs of two or more devices."""
    import pandas as pd

    d = pd.DataFrame({"p": np.asarray(program).astype(str), "dev": np.asarray(device).astype(str), "r": log_ratio})
    d = d.groupby(["p", "dev"], as_index=False)["r"].mean()
    k = d.groupby("p")["r"].transform("size").to_numpy()
    multi = k >= 2
    if multi.sum() < 3:
        return {"programs": int(d.loc[multi, "p"].nunique()), "correlation": float("nan")}
    s = d.groupby("p")["r"].transform("sum").to_numpy()
    r = d["r"].to_numpy()
    other = (s - r)[multi] / (k[multi] - 1)
    return {"programs": int(d.loc[multi, "p"].nunique()), "correlation": float(np.corrcoef(r[multi], other)[0, 1])}


def feature_collisions(X, y: np.ndarray) -> dict:
    """Records whose every feature column equals another record's: how many, and their latencies' mean absolute
    relative distance to their group's median."""
    import hashlib

    import pandas as pd

    def row_hash(i: int) -> str:
        h = hashlib.blake2b(digest_size=12)
        parts = (X.leaves[i], X.ordering[i], X.stores[i], X.analytic[i], X.device[i]) + \
            (() if X.asm is None else (X.asm[i],))
        for a in parts:
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()

    key = pd.Series([row_hash(i) for i in range(len(X))])
    size = key.groupby(key).transform("size").to_numpy()
    med = pd.Series(y).groupby(key).transform("median").to_numpy()
    g = size >= 2
    return {"records": int(len(X)), "in_groups": int(g.sum()),
            "mape_to_group_median": float(np.mean(np.abs(med[g] / y[g] - 1))) if g.any() else float("nan")}


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
    out["dispersion_slope"] = dispersion_slope(np.log(pred), np.log(y), task)
    out["shared_error"] = shared_error(lr, frame["program_hash"].to_numpy(), frame["device_key"].to_numpy())
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

    from perfcast.errors import PerfcastError
    from perfcast.eval.workflow import own_split

    m, ds, df, X, name, sp = own_split(a.model, a.data)
    idx = getattr(sp, a.part)
    if a.sample is not None:
        if a.sample < 1:
            raise PerfcastError(f"--sample {a.sample} must be a number of programs >= 1 (or leave it out for all)")
        idx = np.sort(np.random.default_rng(0).choice(idx, min(a.sample, len(idx)), replace=False))
    y = df["latency_s"].to_numpy()[idx]
    out = {"model": m.name, "split": name, "part": a.part,
           **breakdown(y, m.predict(X.take(idx)), df.iloc[idx]),
           "feature_collisions": feature_collisions(X, df["latency_s"].to_numpy())}
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
    sh, fc = out["shared_error"], out["feature_collisions"]
    print(f"dispersion slope within each (task, device) {out['dispersion_slope']:.3f}; shared error: a record's log "
          f"error vs the same program's on other devices, correlation {sh['correlation']:.3f} "
          f"({sh['programs']} programs)")
    print(f"feature collisions: {fc['in_groups']} of the dataset's {fc['records']} records share every feature column "
          f"with another; their latencies lie {fc['mape_to_group_median']:.1%} from their group's median")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
