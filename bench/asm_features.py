"""What the assembly features add: the same model with and without them, on the same records, split and seed.

`--model lgbm` (default) is the bundled ensemble's tree member (`lgbm`, `features=program`, latency per unit of
work, default kernels weighted 10×), trained once on its program vector and once with the 55 assembly columns
appended (`features=program_asm`, `perfcast.features.asm`): the instruction counts of what LLVM made of each
program, over all its code and over its innermost loops. `--model cdmpp` is the ensemble's CDMPP member
(`use_analytic=True`), once as it is and once with the columns in its analytic MLP (`use_asm=True`); `--model mlp`
the TensetMLP member, with the columns beside the device features its head reads. Both are scored on the by_network
split's held-out networks.

Building every program of the bundled dataset for its assembly takes hours, so the bench samples a device's records:
per task TVM's default kernel plus random others, `--per-train` of a training task and `--per-test` of a held-out
one (seeded), and computes only their assembly features (cached beside the dataset: the first run builds ~24,000
programs, ~55 min on 2 cores; later runs take ~2 min). No measuring.

    python bench/asm_features.py [--model lgbm|cdmpp|mlp] [--device 'local@AMD EPYC/znver4'] [--per-train 15]
                                 [--per-test 30] [--seeds 0 1] [--json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

DEVICE = "local@AMD EPYC/znver4"
# model -> its parameters without and with the assembly features
RECIPES = {"lgbm": ({"features": "program", "target_scale": "work"},
                    {"features": "program_asm", "target_scale": "work"}),
           "cdmpp": ({"use_analytic": True}, {"use_analytic": True, "use_asm": True}),
           "mlp": ({}, {"use_asm": True})}


METRICS = ("mape", "kendall_tau", "top1")


def run_entry(test: dict) -> dict:
    """A run's figures from a `perfcast.eval.workflow.scores` result: the overall `METRICS`, MAPE per network."""
    return {**{k: test["overall"][k] for k in METRICS},
            "per_network": {n: v["mape"] for n, v in test["per_network"].items()}}


def mean_runs(runs: list[dict], key: str, metrics=METRICS) -> dict:
    """{value of `key`: {metric: its mean over the runs with that value}}, in the runs' order."""
    values = dict.fromkeys(x[key] for x in runs)
    return {v: {k: float(np.mean([x[k] for x in runs if x[key] == v])) for k in metrics} for v in values}


def run_text(x: dict) -> str:
    """"MAPE ..  tau ..  top-1 .." of a run entry or a mean."""
    return f"MAPE {x['mape']:.1%}  tau {x['kendall_tau']:.3f}  top-1 {x['top1']:.3f}"


def nets_text(x: dict) -> str:
    return ", ".join(f"{n} {v:.1%}" for n, v in x["per_network"].items())


def sample(df, per_train: int, per_test: int, seed: int = 0):
    """Positional rows of `df` kept: per task its default kernels, then random others up to `per_train`
    (`per_test` for a task of a held-out network)."""
    from perfcast.eval.splits import held_out_task_mask

    test = held_out_task_mask(df)
    rng = np.random.default_rng(seed)
    keep = []
    for (_, is_test), g in df.groupby([df["workload_key"], test], sort=True):
        n = per_test if is_test else per_train
        pos = df.index.get_indexer(g.index)
        dflt = pos[(g["schedule_kind"] == "default").to_numpy()]
        other = pos[(g["schedule_kind"] != "default").to_numpy()]
        keep += list(dflt) + list(other[rng.permutation(len(other))[:max(0, n - len(dflt))]])
    return np.sort(np.asarray(keep, dtype=np.int64))


def sampled_records(data, device: str, per_train: int, per_test: int):
    """(dataset, records frame) of `device`'s records of `data` (None: the bundled dataset), `sample`d; one-line
    errors for a device without records or a per-task count below 1."""
    from perfcast import paths
    from perfcast.data.frame import records_frame
    from perfcast.data.store import Dataset
    from perfcast.errors import PerfcastError

    for flag, v in (("per-train", per_train), ("per-test", per_test)):
        if v < 1:
            raise PerfcastError(f"--{flag} {v} must be at least 1 program per task")
    ds = Dataset(data if data is not None else paths.bundled_dataset_dir())
    df = records_frame(ds)
    known = sorted(df["device_key"].unique())
    if device not in known:
        raise PerfcastError(f"device {device!r} has no records in {str(ds.root)!r}; pass --device one of {known}")
    df = df[df["device_key"] == device].reset_index(drop=True)
    return ds, df.iloc[sample(df, per_train, per_test)].reset_index(drop=True)


def main(argv=None) -> None:
    from perfcast.errors import PerfcastError
    from perfcast.eval.metrics import summarize
    from perfcast.eval.workflow import make_split, train
    from perfcast.features.asm_cache import dataset_asm
    from perfcast.features.cache import dataset_features

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled one)")
    ap.add_argument("--model", default="lgbm", help=f"one of {', '.join(RECIPES)} (default lgbm)")
    ap.add_argument("--device", default=DEVICE, help=f"device key of the records used (default {DEVICE!r})")
    ap.add_argument("--per-train", type=int, default=15, help="programs per training task (default 15)")
    ap.add_argument("--per-test", type=int, default=30, help="programs per held-out task (default 30)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="split / model seeds (default 0 1)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    a = ap.parse_args(argv)
    if a.model not in RECIPES:
        raise PerfcastError(f"--model {a.model!r} is not one of {', '.join(RECIPES)}; pick one of them")
    ds, df = sampled_records(a.data, a.device, a.per_train, a.per_test)
    X = dataset_features(ds, df, progress=not a.json)
    X.asm = dataset_asm(ds, df, progress=not a.json)

    out = {"device": a.device, "model": a.model, "records": len(df), "tasks": int(df["workload_key"].nunique()),
           "runs": []}
    for seed in a.seeds:
        sp = make_split(df, "by_network", seed, None)  # the split train() makes: its held-out default kernels
        dflt = sp.test[(df["schedule_kind"].to_numpy()[sp.test] == "default")]
        for feats, params in zip(("without", "with"), RECIPES[a.model]):
            r = train(model=a.model, split="by_network", seed=seed, loaded=(ds, df, X), progress=False,
                      params=dict(params))
            pred = r["estimator"].predict(X.take(dflt))
            t = r["test"]
            out["runs"].append({"seed": seed, "features": feats, **run_entry(t),
                                "default_kernels_mape": summarize(df["latency_s"].to_numpy()[dflt], pred)["mape"]})
    out["mean"] = mean_runs(out["runs"], "features", METRICS + ("default_kernels_mape",))
    out["mape_ratio_with_to_without"] = out["mean"]["with"]["mape"] / out["mean"]["without"]["mape"]
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{a.device}: {out['records']} records of {out['tasks']} tasks, by_network split, {a.model} member")
    for x in out["runs"]:
        print(f"  seed {x['seed']} {x['features'] + ' asm':12s} {run_text(x)}  "
              f"default kernels {x['default_kernels_mape']:.1%}  ({nets_text(x)})")
    for f, v in out["mean"].items():
        print(f"  mean {f + ' asm':12s} {run_text(v)}  "
              f"default kernels {v['default_kernels_mape']:.1%}")
    print(f"  MAPE with / without the assembly features: {out['mape_ratio_with_to_without']:.2f}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
