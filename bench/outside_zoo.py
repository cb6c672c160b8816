"""Operators from outside the zoo, tuned with TVM meta-schedule on this machine, predicted by a perfcast model.

For each operator: `ms.tune_tir` (evolutionary search with TVM's own XGBoost cost model, real measurements through
meta-schedule's LocalRunner) writes a JSON database; `perfcast.eval.workflow.predict_records` predicts every tuning
record; we print MAPE, median error and Kendall τ between predicted and measured, per operator and model, and the
measured time of the program each model ranks first.

    python bench/outside_zoo.py [--model DIR] [--trials 64] [--ops NAME,...] [--device D] [--compare DIR]
                                [--work DIR] [--calibrate] [--json]

`--device local:mcpu=NAME,threads=N` tunes (and predicts) for another code-generation target of this CPU;
`--compare DIR` (repeatable) scores another model (e.g. one `perfcast adapt` made for that device) on the same
databases; `--work DIR` keeps the databases and reuses them on the next run (no tuning, no measuring then).
`--calibrate` times 40 stored programs of the device after tuning (`perfcast calibrate`) and scales every
prediction by today's speed ratio, as `perfcast predict-records --calibrate` does; the uncalibrated MAPE is kept
beside. With `--json`, stdout is only the JSON (meta-schedule's tuning log goes to stderr).

Keep the machine quiet: tuning measures real kernels.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile


def operators():
    from tvm import te, tirx

    def batch_matmul():  # (4, 96, 80) x (4, 80, 112): not a shape of any zoo network
        a = te.placeholder((4, 96, 80), name="A")
        b = te.placeholder((4, 80, 112), name="B")
        k = te.reduce_axis((0, 80), "k")
        c = te.compute((4, 96, 112), lambda n, i, j: te.sum(a[n, i, k] * b[n, k, j], axis=k), name="C")
        return [a, b, c]

    def depthwise7x7():  # ConvNeXt-style 7x7 depthwise conv, 96 channels, 28x28 (the zoo has 3x3 and 5x5)
        x = te.placeholder((1, 96, 34, 34), name="X")
        w = te.placeholder((96, 1, 7, 7), name="W")
        ry, rx = te.reduce_axis((0, 7), "ry"), te.reduce_axis((0, 7), "rx")
        y = te.compute((1, 96, 28, 28), lambda n, c, h, v: te.sum(x[n, c, h + ry, v + rx] * w[c, 0, ry, rx],
                                                                  axis=[ry, rx]), name="Y")
        return [x, w, y]

    def conv1d():  # a 1-D convolution (audio / sequence models), 64 -> 128 channels, kernel 5, length 256
        x = te.placeholder((1, 64, 260), name="X")
        w = te.placeholder((128, 64, 5), name="W")
        rc, rk = te.reduce_axis((0, 64), "rc"), te.reduce_axis((0, 5), "rk")
        y = te.compute((1, 128, 256), lambda n, o, t: te.sum(x[n, rc, t + rk] * w[o, rc, rk], axis=[rc, rk]),
                       name="Y")
        return [x, w, y]

    def rms_norm():  # RMSNorm over 768 features of 128 tokens (LLaMA-style; the zoo has LayerNorm)
        x = te.placeholder((128, 768), name="X")
        g = te.placeholder((768,), name="G")
        k = te.reduce_axis((0, 768), "k")
        ss = te.compute((128,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="SS")
        y = te.compute((128, 768), lambda i, j: x[i, j] * g[j] / te.sqrt(ss[i] / 768.0 + 1e-6), name="Y")
        return [x, g, y]

    import tvm

    return {name: tvm.IRModule({"main": te.create_prim_func(f())}) for name, f in
            (("batch_matmul", batch_matmul), ("depthwise7x7", depthwise7x7), ("conv1d", conv1d),
             ("rms_norm", rms_norm))}


@contextlib.contextmanager
def stdout_to_stderr():
    """File descriptor 1 points at stderr meanwhile: meta-schedule's logger (and TVM's C++ log) write there."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def tune(mod, work_dir: str, trials: int, device: str = "local", cost_model="xgb", seed: int = 0):
    """`ms.tune_tir` of `mod` into the JSON database `work_dir`, as `perfcast tune` searches (isolated builder,
    pinned runner, rounds of 16), steered by `cost_model` (meta-schedule's name or a cost model object, e.g.
    `perfcast.search.perfcast_cost_model()`). Returns the database."""
    from tvm.s_tir import meta_schedule as ms

    from perfcast.devices import get_device
    from perfcast.e2e.schedules import drop_unnamed_ms_log_handlers, isolated_builder, pinned_run_evaluator

    spec = get_device(device)
    os.environ["TVM_NUM_THREADS"] = str(spec.threads)
    if hasattr(os, "sched_setaffinity") and spec.threads < len(os.sched_getaffinity(0)):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[-spec.threads:])  # as the collector measures it
    drop_unnamed_ms_log_handlers()
    runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=5,
                                                                               min_repeat_ms=20),
                                   f_run_evaluator=pinned_run_evaluator)
    with isolated_builder() as builder:
        return ms.tune_tir(mod, spec.target(), work_dir, max_trials_global=trials, num_trials_per_iter=16,
                           builder=builder, runner=runner, num_tuning_cores=1, seed=seed, cost_model=cost_model)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--ops", default=None, help="comma-separated subset of: batch_matmul,depthwise7x7,conv1d,rms_norm")
    ap.add_argument("--work", default=None, help="keep the tuning databases here (reused when present)")
    ap.add_argument("--device", default="local", help="device to tune and predict for")
    ap.add_argument("--compare", action="append", default=[],
                    help="another model directory scored on the same databases (repeatable)")
    ap.add_argument("--calibrate", action="store_true",
                    help="scale predictions by today's speed ratio of the device (perfcast calibrate)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import numpy as np
    from scipy.stats import kendalltau

    from perfcast.eval.workflow import predict_records

    ops = operators()
    names = a.ops.split(",") if a.ops else list(ops)
    root = a.work or tempfile.mkdtemp(prefix="perfcast-outside-zoo-")
    for name in names:  # tune first: the calibration below should see the machine as the predictions are scored
        work = os.path.join(root, name)
        if not os.path.exists(os.path.join(work, "database_tuning_record.json")):
            os.makedirs(work, exist_ok=True)
            with stdout_to_stderr() if a.json else contextlib.nullcontext():
                tune(ops[name], work, a.trials, a.device)
    ratio = None
    if a.calibrate:
        from perfcast.collect.calibrate import speed_ratio_or_note

        ratio, note = speed_ratio_or_note(a.device)
        print(f"speed ratio {ratio}{'; ' + note if note else ''}", file=sys.stderr, flush=True)
    out = {}
    for name in names:
        work = os.path.join(root, name)
        for label, model in [("model", a.model)] + [(f"compare {c}", c) for c in a.compare]:
            rows = [r for r in predict_records(work, model, a.device, speed_ratio=ratio) if "measured_s" in r]
            p = np.array([r["predicted_s"] for r in rows])
            m = np.array([r["measured_s"] for r in rows])
            err = np.abs(p - m) / m
            key = name if label == "model" else f"{name} ({label})"
            out[key] = {"programs": len(rows), "mape": float(err.mean()), "median_error": float(np.median(err)),
                        "kendall_tau": float(kendalltau(p, m).statistic), "best_measured_s": float(m.min()),
                        "measured_of_predicted_best_s": float(m[np.argmin(p)]),
                        "median_predicted_over_measured": float(np.median(p / m))}
            if ratio is not None:
                p0 = np.array([r["uncalibrated_predicted_s"] for r in rows])
                out[key].update(speed_ratio=ratio, uncalibrated_mape=float(np.mean(np.abs(p0 - m) / m)))
            if not a.json:
                o = out[key]
                print(f"{key:24s} {o['programs']:4d} programs  MAPE {o['mape']:.1%}  median {o['median_error']:.1%}  "
                      f"Kendall τ {o['kendall_tau']:.2f}  predicted/measured {o['median_predicted_over_measured']:.2f}"
                      f"  best {o['best_measured_s'] * 1e6:.1f} µs, predicted-best "
                      f"{o['measured_of_predicted_best_s'] * 1e6:.1f} µs"
                      + (f"  (uncalibrated MAPE {o['uncalibrated_mape']:.1%})" if ratio is not None else ""),
                      flush=True)
    if a.json:
        print(json.dumps(out))
    else:
        for label in ["model"] + [f"compare {c}" for c in a.compare]:
            sel = [o for k, o in out.items() if (k in names if label == "model" else k.endswith(f"({label})"))]
            if sel:
                print(f"{label}: mean MAPE {np.mean([o['mape'] for o in sel]):.1%}, mean τ "
                      f"{np.mean([o['kendall_tau'] for o in sel]):.2f}")
        print(f"databases in {root}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
