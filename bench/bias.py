"""Is a model biased on the programs of networks it never trained on? Predicted / measured latency on the
held-out networks (resnet50, mobilenet_v2, bert_tiny) and, for comparison, on the training networks, split by
schedule kind (TVM default kernel vs random schedule), on one device (default: this machine's `local` records).

Prints, per group: programs, MAPE, the median of predicted / measured (1.0 = unbiased; below 1 = under-predicted),
and the time-weighted ratio sum(predicted) / sum(measured), which is what a whole-network sum inherits. No
measuring: it reads the bundled dataset (or --data) and the model's cached features.

    python bench/bias.py [--model DIR] [--data DIR] [--device-key SUBSTRING] [--json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled dataset)")
    ap.add_argument("--device-key", default="AMD", help="only `local` records whose device key contains this")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.eval.workflow import HELD_OUT, load_data
    from perfcast.models import load_model

    _, df, X = load_data(a.data, progress=False)
    m = load_model(a.model)
    y = df["latency_s"].to_numpy()
    dev = ((df["device_id"] == "local") & df["device_key"].str.contains(a.device_key, regex=False)).to_numpy()
    held = df["networks"].map(lambda ns: bool(set(ns) & set(HELD_OUT))).to_numpy()
    default = (df["schedule_kind"] == "default").to_numpy()
    out = {}
    for nets, hmask in (("held-out networks", held), ("training networks only", ~held)):
        for kind, kmask in (("default kernels", default), ("random schedules", ~default)):
            idx = np.flatnonzero(dev & hmask & kmask)
            if len(idx) == 0:
                continue
            pred = m.predict(X.take(idx))
            ratio = pred / y[idx]
            out[f"{nets}, {kind}"] = {"programs": int(len(idx)), "mape": float(np.mean(np.abs(ratio - 1))),
                                      "median_ratio": float(np.median(ratio)),
                                      "time_weighted_ratio": float(pred.sum() / y[idx].sum())}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    for k, v in out.items():
        print(f"{k:45s} {v['programs']:6d} programs  MAPE {v['mape']:6.1%}  median pred/meas {v['median_ratio']:.3f}"
              f"  time-weighted {v['time_weighted_ratio']:.3f}")


if __name__ == "__main__":
    main()
