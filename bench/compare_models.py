"""Two models on the same test programs, with one device's programs apart from the others': the check behind
adopting a model retrained with a new device's records (docs/measured-figures.md, znver5 2026-11-30 20:54).

Both models predict the test part of MODEL's own split of the bundled dataset (by_network: the held-out networks'
tasks on every device); printed per model: MAPE, top-1, Kendall τ etc. (`perfcast.eval.metrics.summarize`) on the
`--device` programs, on all the others and on all, then MAPE per held-out network and per schedule kind on both
parts. No measuring: the records are the measurements.

    python bench/compare_models.py MODEL [--baseline DIR] [--device 'local@AMD EPYC/znver5'] [--json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="model directory whose split decides the test programs")
    ap.add_argument("--baseline", default=None, help="the other model (default: the bundled one)")
    ap.add_argument("--device", default="local@AMD EPYC/znver5", help="device key scored apart")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.errors import PerfcastError
    from perfcast.eval.metrics import summarize
    from perfcast.eval.workflow import own_split
    from perfcast.models import load_model

    baseline = load_model(a.baseline)
    model, _, df, X, name, sp = own_split(a.model, asm=baseline.needs_asm or None)
    models = {"baseline": baseline, "model": model}
    params, t = sp.params, sp.test
    sub = df.iloc[t]
    y = df["latency_s"].to_numpy()[t]
    keys, w = sub["workload_key"].to_numpy(), sub["task_weight"].to_numpy()
    apart = sub["device_key"].to_numpy() == a.device
    if not apart.any():
        raise PerfcastError(f"the test part has no program of {a.device!r}; pass --device with a device key of "
                            "the bundled data (`perfcast data summary`)")
    parts = {"device": apart, "others": ~apart, "all": np.ones(len(t), bool)}
    kind = sub["schedule_kind"].to_numpy()
    out = {"split": name, "device": a.device, "test": int(len(t)), "device_test": int(apart.sum())}
    for label, m in models.items():
        p = m.predict(X.take(t))
        r = {k: {**{s: round(float(v), 4) for s, v in summarize(y[mk], p[mk], keys[mk], w[mk]).items()},
                 "n": int(mk.sum())} for k, mk in parts.items()}
        for part in ("device", "others"):
            groups = {net: sub["networks"].map(lambda ns, net=net: net in ns).to_numpy()
                      for net in sorted(params.get("test_networks") or [])}
            groups.update({k: kind == k for k in ("default", "random")})
            r[part]["mape_by"] = {g: round(float(np.mean(np.abs(p[mk & parts[part]] / y[mk & parts[part]] - 1))), 4)
                                  for g, mk in groups.items() if (mk & parts[part]).any()}
        out[label] = r
    if a.json:
        print(json.dumps(out))
        return
    print(f"{name} test programs: {out['test']}, {out['device_test']} of them on {a.device}")
    for label in models:
        for part in ("device", "others", "all"):
            s = out[label][part]
            print(f"{label:8s} {part:6s} n={s['n']:6d}  MAPE {s['mape']:.2%}  top-1 {s['top1']:.3f}  "
                  f"tau {s['kendall_tau']:.3f}  +-10% {s['acc_10']:.3f}"
                  + (f"  {out[label][part]['mape_by']}" if part != "all" else ""))


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
