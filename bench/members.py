"""An ensemble's members, one by one, where the gate decides: MAPE of each member, of their equal-weight and gated
geometric means, of the final prediction (with the residual stage) and of the best-member oracle, per gate region.

On the model's own split (default: the bundled ensemble, by_network) for its validation part (whole tasks held out
of training, where the gate's weights were fitted: an in-sample figure for the gate) and its test part (the held-out
networks' tasks: out of sample for everything). Regions are `perfcast.models.ensemble.annotation_region`: 0 = no
parallel and no vectorized loop (TVM's untuned default CPU kernels and few others), 1 = vectorized only, 2 = parallel
only, 3 = both. The oracle takes, per program, the member closest to the measurement: the floor of any gate that
picks or weighs members (not reachable without the measurement). The table also lists the gate's weights.

`--stack` asks whether that room is reachable from what the validation tasks teach: a LightGBM fitted on the
validation programs (L1 loss; inputs the members' log predictions, their pairwise differences, the gate region and
the analytic features) to the log error of the final prediction, then added to it on the test programs.

No measuring: it reads the dataset and the cached features.

    python bench/members.py [--model DIR] [--data DIR] [--stack] [--json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def log_mape(log_pred: np.ndarray, log_y: np.ndarray) -> float:
    """`perfcast.eval.metrics.mape` of predictions and measurements given as logs (NaN for no programs)."""
    from perfcast.eval.metrics import mape

    return mape(np.exp(log_y), np.exp(log_pred)) if len(log_y) else float("nan")


def stack_inputs(X, logs: np.ndarray) -> np.ndarray:
    """(n, members + pairs + 1 + analytic) inputs of the `--stack` check, from the members' log predictions."""
    from itertools import combinations

    from perfcast.models.ensemble import annotation_region

    diffs = [logs[:, i] - logs[:, j] for i, j in combinations(range(logs.shape[1]), 2)]
    return np.column_stack([logs, *diffs, annotation_region(X), np.asarray(X.analytic)])


def stacked_test_mape(val: dict, test: dict, seed: int = 0) -> float:
    """Test MAPE of the final prediction corrected by a LightGBM stacker fitted on the validation programs (`val`,
    `test`: `member_logs` results)."""
    import lightgbm as lgb

    st = lgb.LGBMRegressor(n_estimators=300, learning_rate=0.03, num_leaves=7, min_child_samples=50, subsample=0.8,
                           subsample_freq=1, colsample_bytree=0.8, objective="l1", random_state=seed, n_jobs=2,
                           verbose=-1).fit(stack_inputs(val["X"], val["logs"]), val["ly"] - val["final"])
    return log_mape(test["final"] + st.predict(stack_inputs(test["X"], test["logs"])), test["ly"])


def member_logs(m, X, y: np.ndarray) -> dict:
    """The members' log predictions (n, members), the final log prediction and the log measurements of one part,
    each computed once."""
    return {"X": X, "logs": m._member_logs(X), "final": np.log(m.predict(X)), "ly": np.log(y)}


def part_table(m, part: dict) -> dict:
    """{region: {"n", column: MAPE}} and "all" of one part (a `member_logs` result)."""
    from perfcast.models.ensemble import N_REGIONS, annotation_region

    logs, ly = part["logs"], part["ly"]  # (n, members), (n,)
    region = annotation_region(part["X"])
    cols = {f"{i}:{mem.name}": logs[:, i] for i, mem in enumerate(m.members_)}
    cols["equal mean"] = logs.mean(axis=1)
    cols["gated mean"] = (logs * m.gate_table()[region]).sum(axis=1)
    cols["final"] = part["final"]
    cols["oracle"] = logs[np.arange(len(ly)), np.argmin(np.abs(logs - ly[:, None]), axis=1)]
    out = {}
    for key, sel in [("all", np.ones(len(ly), bool))] + [(str(r), region == r) for r in range(N_REGIONS)]:
        if sel.any():
            out[key] = {"n": int(sel.sum()), **{c: log_mape(v[sel], ly[sel]) for c, v in cols.items()}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="ensemble directory (default: the bundled model)")
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled dataset)")
    ap.add_argument("--stack", action="store_true", help="also fit a stacker on validation, score it on test")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.errors import PerfcastError
    from perfcast.eval.workflow import own_split

    m, ds, df, X, name, sp = own_split(a.model, a.data)
    if not hasattr(m, "members_"):
        raise PerfcastError(f"model {a.model or 'bundled'} is a {m.name!r}, not an ensemble; pass --model DIR of one")
    y = df["latency_s"].to_numpy()
    out = {"model": a.model or "bundled", "split": name, "gate": getattr(m, "gate_", None), "parts": {}}
    parts = {part: member_logs(m, X.take(rows), y[rows]) for part, rows in (("val", sp.val), ("test", sp.test))}
    for part, p in parts.items():
        out["parts"][part] = part_table(m, p)
    if a.stack:
        out["stacked_test_mape"] = stacked_test_mape(parts["val"], parts["test"])
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"model {out['model']}, split {name}; gate weights per region: {out['gate']}")
    for part, tab in out["parts"].items():
        cols = [c for c in tab["all"] if c != "n"]
        print(f"\n{part}: MAPE % by region (0: no parallel, no vector loop; 3: both)")
        print(f"{'region':>7} {'n':>7} " + " ".join(f"{c:>12}" for c in cols))
        for r, row in tab.items():
            print(f"{r:>7} {row['n']:>7} " + " ".join(f"{100 * row[c]:>12.1f}" for c in cols))
    if a.stack:
        final = out["parts"]["test"]["all"]["final"]
        print(f"\ntest MAPE of the final prediction corrected by a stacker fitted on validation: "
              f"{100 * out['stacked_test_mape']:.1f} % (final alone: {100 * final:.1f} %)")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (e.g. --model of a non-ensemble): one line, as the CLI says it
