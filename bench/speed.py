"""Speed of `cdmpp` and `xgb` on this machine: training throughput and the latency of predicting 512 programs; and
the prediction latency of the bundled model (an ensemble of cdmpp, mlp and lgbm, loaded as shipped; from TIR that
includes building each program for its assembly when the model reads it, over the cores).

    python bench/speed.py [--programs 512] [--epochs 5] [--json]

- training: samples per second (cdmpp: training samples x epochs / time, validation included; xgb: training
  samples / time of one fit with its default 2000 rounds and early stopping) on the bundled by_network split;
- prediction of 512 programs in one batch: with feature extraction (TIR programs in, rebuilt beforehand from the
  records' traces) and without it (cached features in), median of 5 runs, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=512)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import numpy as np

    from perfcast._tvm.util import apply_trace
    from perfcast.eval.workflow import load_data, make_split
    from perfcast.features.cache import _task_module
    from perfcast.models import get_model, load_model

    bundled = load_model()
    ds, df, X = load_data(None, progress=not a.json, asm=bundled.needs_asm)  # the bundled model may read assembly
    sp = make_split(df, "by_network", 0, None)
    y = df["latency_s"].to_numpy()
    rng = np.random.default_rng(0)
    pick = rng.choice(sp.test, size=min(a.programs, len(sp.test)), replace=False)
    sub = df.iloc[pick]
    tasks = ds.read("tasks", ["workload_key", "tir_script"]).to_pydict()
    scripts = dict(zip(tasks["workload_key"], tasks["tir_script"]))
    recs = ds.read("records", ["record_id", "trace_json", "tir_script"]).to_pandas().set_index("record_id")
    mods, programs = {}, []
    for rid, key in zip(sub["record_id"], sub["workload_key"]):
        tj = recs.at[rid, "trace_json"]
        if tj:
            mods.setdefault(key, _task_module(scripts[key]))
            programs.append(apply_trace(mods[key], tj))
        else:
            programs.append(_task_module(recs.at[rid, "tir_script"]))

    out = {"programs": len(programs), "train_samples": int(len(sp.train))}
    for name, params in (("cdmpp", {"epochs": a.epochs, "patience": a.epochs + 1}), ("xgb", {})):
        t = time.time()
        m = get_model(name, **params).fit(X.take(sp.train), y[sp.train], X.take(sp.val), y[sp.val])
        dt = time.time() - t
        n_epochs = m.info_["epochs"] if name == "cdmpp" else 1
        t_no, t_with = _predict_seconds(m, X.take(pick), programs)
        out[name] = {"train_samples_per_s": len(sp.train) * n_epochs / dt, "train_seconds": dt,
                     "predict_ms_without_features": t_no * 1e3, "predict_ms_with_features": t_with * 1e3,
                     "features_ms_per_program": (t_with - t_no) * 1e3 / len(programs)}
        if not a.json:
            o = out[name]
            print(f"{name:6s} train {o['train_samples_per_s']:9.0f} samples/s | predict {len(programs)} programs: "
                  f"{o['predict_ms_without_features']:8.1f} ms (features cached), "
                  f"{o['predict_ms_with_features']:8.1f} ms (from TIR, {o['features_ms_per_program']:.1f} ms/program "
                  "for features)", flush=True)
    t_no, t_with = _predict_seconds(bundled, X.take(pick), programs)
    out["bundled"] = {"model": bundled.name, "predict_ms_without_features": t_no * 1e3,
                      "predict_ms_with_features": t_with * 1e3}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"bundled ({bundled.name}) predict {len(programs)} programs: {t_no * 1e3:8.1f} ms (features cached), "
              f"{t_with * 1e3:8.1f} ms (from TIR)")
        print(f"cdmpp / xgb prediction time (features cached): "
              f"{out['cdmpp']['predict_ms_without_features'] / out['xgb']['predict_ms_without_features']:.2f}")


def _predict_seconds(m, Xs, programs) -> tuple[float, float]:
    """Median seconds to predict the programs from cached features (5 runs) and from TIR (3 runs)."""
    from perfcast.features.cache import features_of_programs

    t_no = statistics.median(_timed(lambda: m.predict(Xs)) for _ in range(5))
    t_with = statistics.median(_timed(lambda: m.predict(features_of_programs(programs, "local", asm=m.needs_asm)))
                               for _ in range(3))
    return t_no, t_with


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
