"""How much of a model's test error is its labels: test programs timed again under a newer measurement protocol.

    python bench/retimed.py [--data DIR] [--model DIR] [--since ISO] [--json]

A program timed again under a newer protocol (`perfcast collect` meeting a program the dataset has under an older one;
README, Measurement protocol) keeps both records: readers use the newest, the older one is superseded. The model
(default: the bundled one) predicts the test part of its own split of `--data` (default: the bundled dataset) —
exactly the programs and labels `perfcast eval` scores — and the bench prints, per device, the test programs with a
superseded label (with `--since`, an ISO time in UTC such as 2026-12-01T19:55: only those superseded by a record
timed then or later, i.e. by one round): how the superseded labels compare with the new ones (median old / new, mean
|old / new - 1|, share within 10 %) and the model's MAPE against each, the same ratios of the re-timed programs outside
the test part (which the model may have trained on); then the whole test part's metrics
(`perfcast.eval.metrics.summarize`) with the current labels (what `perfcast eval` prints) and as it was before the
round: those superseded labels put back and the programs first timed since `--since` left out, same predictions.
A round that timed only programs outside the test part prints their ratios (the test part's figures then stay as
they were). No measuring: the records are the measurements.
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="dataset directory (default: bundled)")
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--since", default=None,
                    help="ISO time the re-timing round began: test programs with no older record first timed then "
                         "or later are new, left out of the before part (default: none left out)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.devices.base import device_key_of_json
    from perfcast.errors import PerfcastError
    from perfcast.eval.metrics import mape, summarize
    from perfcast.eval.workflow import _default_split, make_split, open_records
    from perfcast.features.asm_cache import dataset_asm
    from perfcast.features.cache import dataset_features
    from perfcast.models import load_model

    import pandas as pd

    since = None
    if a.since:
        try:
            since = pd.Timestamp(a.since)
        except ValueError as e:
            raise PerfcastError(f"--since {a.since!r} is not a time; give ISO 8601 in UTC, e.g. "
                                "2026-12-01T19:55") from e
        since = since.tz_localize("UTC") if since.tzinfo is None else since
    model = load_model(a.model)
    ds, df = open_records(a.data)  # not own_split: it reads every record's features, the bench needs the test part's
    name, params, seed = _default_split(model, ds)
    sp = make_split(df, name, seed, params)
    test = df.iloc[sp.test].reset_index(drop=True)

    key = ["workload_key", "device_key", "program_hash"]
    raw = ds.read("records", ["record_id", "workload_key", "program_hash", "device_spec_json", "protocol",
                              "latency_s", "status", "timestamp"]).to_pandas()
    raw = raw[raw["status"] == "ok"]
    raw["timestamp"] = pd.to_datetime(raw["timestamp"], utc=True, format="ISO8601")
    specs = raw["device_spec_json"]
    raw["device_key"] = specs.map({j: device_key_of_json(j) for j in specs.unique()})
    # per record of the dataset (training and test parts): its newest superseded record, if any
    prev = df[key + ["protocol"]].merge(raw[key + ["protocol", "latency_s", "record_id", "device_spec_json"]].rename(
        columns={"protocol": "old_protocol", "latency_s": "old_s", "record_id": "old_id",
                 "device_spec_json": "old_spec"}), on=key, how="left")
    prev = prev[prev["old_protocol"] < prev["protocol"]]
    prev = prev.sort_values("old_protocol").drop_duplicates(key, keep="last")
    prev = df[key].merge(prev.drop(columns=["protocol"]), on=key, how="left")
    retimed_all = prev["old_protocol"].notna().to_numpy().copy()
    if since is not None:  # only labels superseded by the round: records timed again before it are as they were
        stamp = df[key + ["protocol"]].merge(raw[key + ["protocol", "timestamp"]], on=key + ["protocol"],
                                             how="left").drop_duplicates(key)["timestamp"]
        retimed_all &= (stamp >= since).to_numpy()
    outside = np.setdiff1d(np.flatnonzero(retimed_all), sp.test)  # re-timed programs the model may have trained on
    ratio_out = prev["old_s"].to_numpy()[outside] / df["latency_s"].to_numpy()[outside]
    retimed = retimed_all[sp.test]
    prev = prev.iloc[sp.test].reset_index(drop=True)
    if not retimed.any() and not len(outside):  # a round of training programs only: their ratios still print
        raise PerfcastError(f"no program of {str(ds.root)!r} has a superseded label; time its programs again "
                            "under the current protocol first (`perfcast collect` with the commands that collected "
                            "them, `--out` the dataset)")
    first = raw.groupby(key)["timestamp"].min()
    new_prog = np.zeros(len(test), bool)
    if since is not None:
        new_prog = (test.join(first, on=key)["timestamp"] >= since).to_numpy() & ~retimed

    def predict(rows):
        X = dataset_features(ds, rows, progress=True)
        if model.needs_asm:
            X.asm = dataset_asm(ds, rows, progress=True)
        return model.predict(X)

    # the re-timed programs also through their superseded records (the device vector of the probe that timed them)
    old_rows = test[retimed].copy()
    old_rows["record_id"] = prev.loc[retimed, "old_id"].to_numpy()
    old_rows["device_spec_json"] = prev.loc[retimed, "old_spec"].to_numpy()
    pred = predict(test)
    pred_before = pred.copy()
    if retimed.any():
        pred_before[retimed] = predict(old_rows)
    y = test["latency_s"].to_numpy()
    y_old = np.where(retimed, prev["old_s"].to_numpy(), y)

    devices = {}
    for d in sorted(set(test.loc[retimed, "device_key"])):
        m = retimed & (test["device_key"] == d).to_numpy()
        r = y_old[m] / y[m]
        devices[d] = {"programs": int(m.sum()), "test_programs": int((test["device_key"] == d).sum()),
                      "median_old_over_new": float(np.median(r)),
                      "mean_abs_ratio_minus_1": float(np.mean(np.abs(r - 1))),
                      "within_10pct": float(np.mean(np.abs(r - 1) <= 0.10)),
                      "mape_old": mape(y_old[m], pred_before[m]), "mape_new_labels": mape(y[m], pred_before[m]),
                      "mape_new": mape(y[m], pred[m]),
                      "median_prediction_new_over_old_record": float(np.median(pred[m] / pred_before[m]))}
    keys, w = test["workload_key"].to_numpy(), test["task_weight"].to_numpy()
    keep = ~new_prog
    out = {"split": name, "test_programs": len(test), "retimed": int(retimed.sum()),
           "retimed_outside_test": {d: {"programs": int((dk == d).sum()),
                                        "median_old_over_new": float(np.median(ratio_out[dk == d])),
                                        "mean_abs_ratio_minus_1": float(np.mean(np.abs(ratio_out[dk == d] - 1)))}
                                    for dk in [df["device_key"].to_numpy()[outside]] for d in sorted(set(dk))},
           "new_programs": int(new_prog.sum()), "per_device": devices,
           "before": summarize(y_old[keep], pred_before[keep], keys[keep], w[keep]),
           "new_labels": summarize(y[keep], pred_before[keep], keys[keep], w[keep]),
           "current": summarize(y, pred, keys, w)}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{name} test part: {len(test):,} programs; {out['retimed']:,} with a superseded label, "
          f"{out['new_programs']:,} first timed since {a.since}")
    print("per device: the re-timed test programs (n, of all its test programs)")
    print(f"{'device':<41} {'n/test':>11} {'old/new':>7} {'|r-1|':>6} {'<=10%':>6} {'MAPE old':>8} {'new':>6} "
          f"{'new rec':>7} {'pred ratio':>10}")
    for d, v in devices.items():
        print(f"{d:<41} {v['programs']:>5}/{v['test_programs']:<5} {v['median_old_over_new']:>7.3f} "
              f"{v['mean_abs_ratio_minus_1']:>6.3f} {v['within_10pct']:>6.2f} {100 * v['mape_old']:>7.1f}% "
              f"{100 * v['mape_new_labels']:>5.1f}% {100 * v['mape_new']:>6.1f}% "
              f"{v['median_prediction_new_over_old_record']:>10.3f}")
    for d, v in out["retimed_outside_test"].items():
        print(f"outside the test part, {d}: {v['programs']:,} re-timed programs, old / new median "
              f"{v['median_old_over_new']:.3f}, mean |r-1| {v['mean_abs_ratio_minus_1']:.3f}")
    for k, what in (("before", "before the round (superseded labels and records, its new programs left out)"),
                    ("new_labels", "the same programs and predictions, current labels"),
                    ("current", "all, current labels and records (what perfcast eval prints)")):
        s = out[k]
        print(f"{what}: {s['n']:,} programs, MAPE {100 * s['mape']:.1f} %, top-1 {s['top1']:.3f}, "
              f"Kendall tau {s['kendall_tau']:.3f}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
