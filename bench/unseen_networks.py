"""Networks a model never saw: its error on the programs of zoo networks that joined the data after it was trained.

    python bench/unseen_networks.py [--networks a,b,c] [--model DIR] [--data DIR] [--device KEY] [--json]

The by_network split holds out three networks chosen long ago; a network that joined the dataset after the model was
trained is a fresh held-out network, and the only kind a user meets. The bench scores the model (default: the bundled
one) on every stored program of the given networks' tasks (default: every network of the dataset that the model
neither trained on, by its info's `train_networks`, nor holds out as a test network of its split; none left is an
error naming the fix), on each device that timed a task only they have (default), and sorts the tasks in three kinds:

- `new`: tasks no other network of the dataset has: no model trained before the networks joined saw them;
- `test-shared`: tasks a test network of the model's own split also has (never in its training part);
- `train-shared`: tasks a training network also has: the model may have trained on these very programs.

It prints, per network and kind, programs, tasks, MAPE, median predicted / measured, Kendall tau within tasks and the
top-1 score (`perfcast.eval.metrics.summarize`, task weights of the dataset). A model that trained on programs of
these networks (its info's `train_networks`, which `perfcast train` records) is refused: it would score its own
training programs. Hold the networks out with `perfcast train --split by_network --param test_networks=...`, or score
a model from before they joined (the bundled model of commit 1719c9e never saw the fifty-ninth round's three). No
measuring: the records are the measurements.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

KINDS = ("new", "test-shared", "train-shared")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--networks", default=None, help="comma-separated network names of the dataset (default: "
                    "those the model never trained on, outside its test split)")
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--data", default=None, help="dataset directory (default: bundled)")
    ap.add_argument("--device", default=None, help="a device key of the dataset (default: every device that timed "
                                                   "a task only these networks have)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.errors import PerfcastError
    from perfcast.eval.metrics import summarize
    from perfcast.eval.workflow import _default_split, open_records
    from perfcast.features.asm_cache import dataset_asm
    from perfcast.features.cache import dataset_features
    from perfcast.models import load_model

    model = load_model(a.model)
    seen = (getattr(model, "info_", None) or {}).get("train_networks")
    ds, df = open_records(a.data)
    known = sorted({n for nets in df["networks"] for n in nets})
    split_name, params, _ = _default_split(model, ds)
    test_nets = set(params.get("test_networks", [])) if split_name == "by_network" else set()
    if a.networks is None:
        if seen is None:
            raise PerfcastError(f"model {a.model or 'bundled'!r} does not record its training networks: name the "
                                "networks to score with --networks a,b,c")
        wanted = [n for n in known if n not in seen and n not in test_nets]
        if not wanted:
            raise PerfcastError(f"model {a.model or 'bundled'!r} trained on every network of {str(ds.root)!r} "
                                "outside its test split: score an older model (--model DIR, e.g. `git worktree add` "
                                "of a commit before the networks joined) or collect a new network first "
                                "(`perfcast collect -n NAME --out DIR`)")
    else:
        wanted = [n.strip() for n in a.networks.split(",") if n.strip()]
    if seen is not None and set(wanted) & set(seen):
        trained = sorted(set(wanted) & set(seen))
        raise PerfcastError(f"model {a.model or 'bundled'!r} trained on {sum(seen[n] for n in trained):,} programs "
                            f"of {trained} (its train_networks): score one trained without them (`perfcast train "
                            "--split by_network --param test_networks=...`) or pick other --networks")
    if seen is None:
        print("note: the model does not record its training networks; scoring as if it never saw these",
              file=sys.stderr)
    unknown = [n for n in wanted if n not in known]
    if not wanted or unknown:
        raise PerfcastError(f"--networks {a.networks!r}: no records of {unknown or wanted} in {str(ds.root)!r}; "
                            f"collect them first (`perfcast collect -n NAME --out DIR`) or pick among {known}")
    nets = df["networks"]
    mine = nets.map(lambda t: bool(set(t) & set(wanted))).to_numpy()
    kind = np.where(nets.map(lambda t: set(t) <= set(wanted)), "new",
                    np.where(nets.map(lambda t: bool(set(t) & test_nets)), "test-shared", "train-shared"))
    if a.device and a.device not in set(df["device_key"]):
        raise PerfcastError(f"--device {a.device!r} has no records in {str(ds.root)!r}; give one of "
                            f"{sorted(set(df['device_key']))}")
    devices = [a.device] if a.device else sorted(set(df.loc[mine & (kind == "new"), "device_key"]))
    if not devices:
        raise PerfcastError(f"no device of {str(ds.root)!r} timed a task only {wanted} have; give --device, one of "
                            f"{sorted(set(df['device_key']))}")
    rows = mine & df["device_key"].isin(devices).to_numpy()
    sub, kind = df[rows].reset_index(drop=True), kind[rows]
    X = dataset_features(ds, sub, progress=True)
    if model.needs_asm:
        X.asm = dataset_asm(ds, sub, progress=True)
    pred = model.predict(X)
    y = sub["latency_s"].to_numpy()

    def score(m: np.ndarray) -> dict:
        s = summarize(y[m], pred[m], sub["workload_key"].to_numpy()[m], sub["task_weight"].to_numpy()[m])
        s.update(tasks=int(sub.loc[m, "workload_key"].nunique()),
                 median_pred_over_meas=float(np.median(pred[m] / y[m])))
        return s

    out = {"model": a.model or "bundled", "split": split_name, "devices": devices, "networks": {}}
    for net in [*wanted, "all"]:
        of = np.ones(len(sub), bool) if net == "all" else sub["networks"].map(lambda t: net in t).to_numpy()
        out["networks"][net] = {k: score(of & _mask(kind, k)) for k in (*KINDS, "unseen", "every")
                                if (of & _mask(kind, k)).any()}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"model {out['model']} ({split_name} split, test networks {sorted(test_nets)}), devices {devices}")
    print(f"{'network':<20} {'kind':<13} {'programs':>8} {'tasks':>5} {'MAPE':>6} {'pred/meas':>9} {'tau':>5} "
          f"{'top-1':>5}")
    for net, by_kind in out["networks"].items():
        for k, s in by_kind.items():
            print(f"{net:<20} {k:<13} {s['n']:>8,} {s['tasks']:>5} {100 * s['mape']:>5.1f}% "
                  f"{s['median_pred_over_meas']:>9.3f} {s['kendall_tau']:>5.3f} {s['top1']:>5.3f}")


def _mask(kind: np.ndarray, k: str) -> np.ndarray:
    """Rows of kind `k`; `unseen` = new or test-shared (never in the training part), `every` = all rows."""
    if k == "unseen":
        return (kind == "new") | (kind == "test-shared")
    return np.ones(len(kind), bool) if k == "every" else kind == k


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
