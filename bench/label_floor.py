"""How much of a model's test error is the labels' own? Its test programs of this CPU timed again, twice.

    python bench/label_floor.py [--model DIR] [--data DIR] [--device local] [--part test|val|train] [--n 300]
                                [--seed 0] [--csv OUT.csv] [--json]

The model (default: the bundled one) predicts a sample of the test part of its own split (what `perfcast eval`
scores; `--part train` or `val`: the programs it was fitted or early-stopped on, to tell the error it cannot fit
from the error of new tasks, without the labels' noise in either) measured on `--device`'s CPU (default: this
machine), and the collector's runner times those programs now in two passes (pass B in reverse order), as
`bench/timing_repeatability.py` does. Every label is one sitting's reading
of a program; today's passes are another sitting's. The day's speed (the median now / stored, what `perfcast
calibrate` measures) is divided out of today's readings, so what is left between them and the stored labels is the
per-program part of the timer's noise between sittings, which no model can predict.

Printed:
- the labels' floor: the MAPE of today's reading (the mean of the two passes' logs, divided by the day's speed) as a
  prediction of the stored label — a model that knew every program's latency as timed today would score about this
  against the labels, and a model that knew the latency as timed on the day of the label would score 0;
- the model's MAPE against the stored labels (what `perfcast eval` says of these programs) and against today's;
- the log-error decomposition (`perfcast.eval.metrics.label_noise_split`): with e_s = log(pred / stored) and e_t =
  log(pred / today), E[e_s e_t] is the model's own squared error (the part both sittings agree on: the error against
  the latency the timer reads on average), E[e_s^2] - E[e_s e_t] the stored labels' noise; each as a root mean square
  and as the MAPE a log-normal error of that size gives, and the model's share of the squared error (1: the labels'
  noise costs the model nothing).
Per schedule kind too. Keep the machine quiet while it measures (~2 min per 100 programs and pass).
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def split(pred: np.ndarray, stored: np.ndarray, today: np.ndarray) -> dict:
    """`label_noise_split` of the programs both of today's passes timed."""
    from perfcast.eval import label_noise_split

    m = np.isfinite(today)
    return label_noise_split(stored[m], today[m], pred[m]) if m.any() else {"n": 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--data", default=None, help="dataset directory (default: bundled)")
    ap.add_argument("--device", default="local", help="a local device id (its CPU must be this machine's)")
    ap.add_argument("--part", choices=("test", "val", "train"), default="test",
                    help="which part of the model's split to draw from (default: test)")
    ap.add_argument("--n", type=int, default=300, help="programs to time again")
    ap.add_argument("--seed", type=int, default=0, help="which programs are drawn")
    ap.add_argument("--csv", default=None, help="write every program's labels and prediction here")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import pandas as pd

    from perfcast.collect.calibrate import time_stored
    from perfcast.collect.measure import MeasureConfig
    from perfcast.collect.worker import IsolatedRunner
    from perfcast.devices import get_device, require_local
    from perfcast.devices.base import device_key
    from perfcast.errors import PerfcastError
    from perfcast.eval.metrics import mape
    from perfcast.eval.workflow import _default_split, make_split, open_records
    from perfcast.features.asm_cache import dataset_asm
    from perfcast.features.cache import dataset_features
    from perfcast.models import load_model

    if a.n < 10:
        raise PerfcastError(f"--n {a.n} is too few programs to split an error into two parts; give 10 or more")
    spec = get_device(a.device)
    require_local(spec, "bench/label_floor.py")
    dkey = device_key(spec)
    model = load_model(a.model)
    ds, df = open_records(a.data)
    name, params, seed = _default_split(model, ds)
    sp = make_split(df, name, seed, params)
    test = df.iloc[getattr(sp, a.part)]
    test = test[test["device_key"] == dkey]
    if test.empty:
        raise PerfcastError(f"the {name} {a.part} part of {str(ds.root)!r} has no program measured on {dkey!r}; run "
                            "this bench on a CPU the part has (`perfcast eval --json` lists the test part's)")
    test = test.sample(min(a.n, len(test)), random_state=a.seed).reset_index(drop=True)

    X = dataset_features(ds, test, progress=True)
    if model.needs_asm:
        X.asm = dataset_asm(ds, test, progress=True)
    pred = np.asarray(model.predict(X), float)

    text = ds.read("records", ["record_id", "tir_script"]).to_pandas().drop_duplicates("record_id")
    scripts = list(test[["record_id"]].merge(text, on="record_id", how="left")["tir_script"])
    fwd = list(range(len(scripts)))
    with IsolatedRunner(spec.threads, MeasureConfig(), workers=2, per_worker=6) as run:
        pass_a = time_stored(run, scripts, spec.target_json, fwd)
        pass_b = time_stored(run, scripts, spec.target_json, fwd[::-1])
        gate = run.host.stats()
    stored = test["latency_s"].to_numpy(float)
    today_raw = np.exp((np.log(pass_a) + np.log(pass_b)) / 2)  # NaN where either pass failed
    day = float(np.nanmedian(today_raw / stored))  # the day's speed: now / stored
    today = today_raw / day
    ok = np.isfinite(pass_a) & np.isfinite(pass_b)
    out = {"model": a.model or "bundled", "split": name, "part": a.part, "device_key": dkey, "programs": len(test),
           "timed_ok": int(ok.sum()), "day_speed_now_over_stored": day,
           "pass_b_vs_pass_a_mape": mape(pass_a[ok], pass_b[ok]),
           "stored_protocols": {str(k): int(v) for k, v in test["protocol"].value_counts().items()},
           "overall": split(pred, stored, today),
           "per_schedule_kind": {k: split(pred[m], stored[m], today[m])
                                 for k in sorted(test["schedule_kind"].unique())
                                 for m in [(test["schedule_kind"] == k).to_numpy()]},
           "host_gate": {k: gate[k] for k in ("rounds", "retimed") if k in gate}}
    if a.csv:
        pd.DataFrame({"record_id": test["record_id"], "task_name": test["task_name"],
                      "schedule_kind": test["schedule_kind"], "stored_s": stored, "pass_a_s": pass_a,
                      "pass_b_s": pass_b, "predicted_s": pred}).to_csv(a.csv, index=False)
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['timed_ok']} of {len(test)} {name} {a.part} programs of {dkey} timed again twice "
          f"(pass B vs A: MAPE {100 * out['pass_b_vs_pass_a_mape']:.1f} %); the day's speed now / stored {day:.3f}")
    print(f"{'part':<10} {'n':>5} {'floor':>7} {'model vs stored':>16} {'vs today':>9} {'model rms':>10} "
          f"{'(as MAPE)':>10} {'label rms':>10} {'(as MAPE)':>10} {'model share':>12}")
    for part, d in [("all", out["overall"])] + list(out["per_schedule_kind"].items()):
        if not d["n"]:
            continue
        print(f"{part:<10} {d['n']:>5} {100 * d['floor_mape']:>6.1f}% {100 * d['model_mape']:>15.1f}% "
              f"{100 * d['model_mape_again']:>8.1f}% {d['model_rms']:>10.3f} {100 * d['model_rms_as_mape']:>9.1f}% "
              f"{d['label_noise_rms']:>10.3f} {100 * d['label_noise_rms_as_mape']:>9.1f}% "
              f"{d['model_share']:>12.2f}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
