"""Is a model biased? Predicted / measured latency on the model's own split (default: the bundled model, by_network):
its test part (networks it never trained on) and its training part, each by schedule kind (TVM default kernel vs
random schedule), on one device (default: this machine's `local`).

Prints, per group: programs, MAPE, the median of predicted / measured (1.0 = unbiased; below 1 = under-predicted)
and the time-weighted ratio sum(predicted) / sum(measured), which a whole-network sum inherits. Then what one
scalar calibration fitted on the validation part (median measured / predicted) would do to the test part's MAPE and
median ratio, and the `--worst N` default kernels of the training part with the lowest predicted / measured (with
ns per FLOP: TVM's unscheduled kernels differ most there). No measuring: it reads the dataset and cached features.

    python bench/bias.py [--model DIR] [--data DIR] [--device local] [--worst 8] [--task matmul] [--json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def _group(m, X, y, idx) -> dict:
    from perfcast.eval.metrics import mape

    pred = m.predict(X.take(idx))
    return {"programs": int(len(idx)), "mape": mape(y[idx], pred), "median_ratio": float(np.median(pred / y[idx])),
            "time_weighted_ratio": float(pred.sum() / y[idx].sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled dataset)")
    ap.add_argument("--device", default="local", help="device id or device key of the records to look at")
    ap.add_argument("--worst", type=int, default=8, help="list this many most under-predicted default kernels")
    ap.add_argument("--task", default="", help="only list kernels whose task name contains this (e.g. matmul)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.eval.metrics import mape
    from perfcast.eval.workflow import own_split, records_of_device

    m, ds, df, X, name, sp = own_split(a.model, a.data)  # the parts the model was trained with
    y = df["latency_s"].to_numpy()
    key, on_dev = records_of_device(df, a.device)  # `local`: this CPU's records
    default = (df["schedule_kind"] == "default").to_numpy()
    out = {"model": m.name, "split": name, "device_key": key, "groups": {}}
    for part, rows in (("test", sp.test), ("train", sp.train)):
        for kind, kmask in (("default kernels", default), ("random schedules", ~default)):
            idx = rows[on_dev[rows] & kmask[rows]]
            if len(idx):
                out["groups"][f"{part} part, {kind}"] = _group(m, X, y, idx)

    factor = float(np.median(y[sp.val] / m.predict(X.take(sp.val))))
    pt = m.predict(X.take(sp.test))
    out["calibration"] = {"factor": factor, "test_mape": mape(y[sp.test], pt),
                          "test_mape_calibrated": mape(y[sp.test], pt * factor),
                          "test_median_ratio": float(np.median(pt / y[sp.test])),
                          "test_median_ratio_calibrated": float(np.median(pt * factor / y[sp.test]))}

    named = df["task_name"].str.contains(a.task, regex=False).to_numpy()
    idx = sp.train[on_dev[sp.train] & default[sp.train] & named[sp.train]]
    pred = m.predict(X.take(idx))
    flops = {r["workload_key"]: r["flops"] for r in ds.read("tasks", ["workload_key", "flops"]).to_pylist()}
    order = np.argsort(pred / y[idx])[:a.worst]
    out["worst_default_kernels"] = [
        {"task": df["task_name"].iat[idx[i]], "networks": list(df["networks"].iat[idx[i]]),
         "measured_s": float(y[idx[i]]), "predicted_s": float(pred[i]),
         "measured_ns_per_flop": float(y[idx[i]] / max(flops.get(df["workload_key"].iat[idx[i]], 0.0), 1.0) * 1e9)}
        for i in order]
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{m.name} on its {name} split, records of {key}")
    for k, v in out["groups"].items():
        print(f"  {k:28s} {v['programs']:6d} programs  MAPE {v['mape']:6.1%}  median pred/meas "
              f"{v['median_ratio']:.3f}  time-weighted {v['time_weighted_ratio']:.3f}")
    c = out["calibration"]
    print(f"calibration by the validation part's median measured/predicted ({c['factor']:.3f}), whole test part: "
          f"MAPE {c['test_mape']:.1%} -> {c['test_mape_calibrated']:.1%}, median pred/meas "
          f"{c['test_median_ratio']:.3f} -> {c['test_median_ratio_calibrated']:.3f}")
    print("most under-predicted default kernels of the training part:")
    for w in out["worst_default_kernels"]:
        print(f"  {w['task'][:30]:30s} {','.join(w['networks'])[:24]:24s} measured {w['measured_s'] * 1e3:9.3f} ms  "
              f"predicted {w['predicted_s'] * 1e3:9.3f} ms  {w['measured_ns_per_flop']:.2f} ns/FLOP")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a bad --device, --model or --data: one line, as the CLI says it
