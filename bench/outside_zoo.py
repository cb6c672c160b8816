"""Operators from outside the zoo, tuned with TVM meta-schedule on this machine, predicted by a perfcast model.

For each operator: `ms.tune_tir` (evolutionary search with TVM's own XGBoost cost model, real measurements through
meta-schedule's LocalRunner) writes a JSON database; `perfcast.eval.workflow.predict_records` predicts every tuning
record; we print MAPE, median error and Kendall τ between predicted and measured, per operator and model, and the
measured time of the program each model ranks first.

    python bench/outside_zoo.py [--model DIR] [--trials 64] [--ops NAME,...] [--device D] [--compare DIR]
                                [--geomean] [--min-programs N] [--work DIR] [--calibrate] [--json]

`--ops` picks operators by name; the default is the first four (batch_matmul, depthwise7x7, conv1d, rms_norm),
`--ops all` adds the rest (2026-11-30: grouped, dilated and 3-D convolutions, attention scores, softmax, a 5x5 max
pool, a tanh GELU, GroupNorm, a head transpose and an int8 x int8 -> int32 matmul; 2026-12-05: a dense layer with
bias and GELU, a channels-last convolution, an L2 row normalisation; later that day a depthwise 1-D convolution, a
3-D average pool and a row-wise log-sum-exp; 2026-12-07: a matrix-vector product, a 1x7 convolution, a GEMM
reading its first operand transposed and an InstanceNorm). A database whose programs use
element types the model never trained on (the int8 one) is marked `unseen_dtypes`: the model warns on those.

`--device local:mcpu=NAME,threads=N` tunes (and predicts) for another code-generation target of this CPU;
`--compare DIR` (repeatable) scores another model (e.g. one `perfcast adapt` made for that device) on the same
databases, and each operator's entry then says how far the models' predictions of one program lie apart (median
of max / min); `--geomean` also scores the geometric mean of all the models' predictions (e.g. the same recipe
trained with three seeds: README, Programs outside the training data); `--min-programs N` leaves databases with
fewer programs out of the summary's mean. `--work DIR` keeps the databases and reuses them on the next run (no
tuning, no measuring then).
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

    # the wider set (2026-11-30): other layer kinds, shapes and one quantized kernel, none of them a zoo task
    def grouped_conv():  # ResNeXt 3x3, 128 channels in 32 groups, 28x28
        x = te.placeholder((1, 128, 30, 30), name="X")
        w = te.placeholder((128, 4, 3, 3), name="W")
        rc, ry, rx = te.reduce_axis((0, 4), "rc"), te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
        y = te.compute((1, 128, 28, 28), lambda n, o, h, v: te.sum(
            x[n, (o // 4) * 4 + rc, h + ry, v + rx] * w[o, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
        return [x, w, y]

    def dilated_conv():  # DeepLab 3x3 dilation 2, 64 -> 64, 32x32
        x = te.placeholder((1, 64, 36, 36), name="X")
        w = te.placeholder((64, 64, 3, 3), name="W")
        rc, ry, rx = te.reduce_axis((0, 64), "rc"), te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
        y = te.compute((1, 64, 32, 32), lambda n, o, h, v: te.sum(
            x[n, rc, h + 2 * ry, v + 2 * rx] * w[o, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
        return [x, w, y]

    def conv3d():  # video 3x3x3, 16 -> 32 channels, 8x28x28
        x = te.placeholder((1, 16, 10, 30, 30), name="X")
        w = te.placeholder((32, 16, 3, 3, 3), name="W")
        rc = te.reduce_axis((0, 16), "rc")
        rd, ry, rx = te.reduce_axis((0, 3), "rd"), te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
        y = te.compute((1, 32, 8, 28, 28), lambda n, o, d, h, v: te.sum(
            x[n, rc, d + rd, h + ry, v + rx] * w[o, rc, rd, ry, rx], axis=[rc, rd, ry, rx]), name="Y")
        return [x, w, y]

    def attn_scores():  # q @ k^T, 6 heads, 96 tokens, 48 per head
        q = te.placeholder((6, 96, 48), name="Q")
        k = te.placeholder((6, 96, 48), name="K")
        r = te.reduce_axis((0, 48), "r")
        s = te.compute((6, 96, 96), lambda h, i, j: te.sum(q[h, i, r] * k[h, j, r], axis=r), name="S")
        return [q, k, s]

    def softmax():  # softmax over 1000 classes, batch 24
        x = te.placeholder((24, 1000), name="X")
        k1, k2 = te.reduce_axis((0, 1000), "k1"), te.reduce_axis((0, 1000), "k2")
        mx = te.compute((24,), lambda i: te.max(x[i, k1], axis=k1), name="MX")
        ex = te.compute((24, 1000), lambda i, j: te.exp(x[i, j] - mx[i]), name="EX")
        sm = te.compute((24,), lambda i: te.sum(ex[i, k2], axis=k2), name="SM")
        y = te.compute((24, 1000), lambda i, j: ex[i, j] / sm[i], name="Y")
        return [x, y]

    def maxpool5():  # YOLO SPP 5x5 stride 1 max pool, 256 channels, 20x20
        x = te.placeholder((1, 256, 24, 24), name="X")
        ry, rx = te.reduce_axis((0, 5), "ry"), te.reduce_axis((0, 5), "rx")
        y = te.compute((1, 256, 20, 20), lambda n, c, h, v: te.max(x[n, c, h + ry, v + rx], axis=[ry, rx]),
                       name="Y")
        return [x, y]

    def gelu_tanh():  # GELU (tanh form) over 384 x 1536
        x = te.placeholder((384, 1536), name="X")
        y = te.compute((384, 1536), lambda i, j: 0.5 * x[i, j] * (1.0 + te.tanh(
            0.7978845608 * (x[i, j] + 0.044715 * x[i, j] * x[i, j] * x[i, j]))), name="Y")
        return [x, y]

    def group_norm():  # GroupNorm, 32 groups of 8 channels, 256 x 16 x 16
        x = te.placeholder((1, 256, 16, 16), name="X")
        r1c, r1y, r1x = te.reduce_axis((0, 8), "c"), te.reduce_axis((0, 16), "y"), te.reduce_axis((0, 16), "x")
        r2c, r2y, r2x = te.reduce_axis((0, 8), "c2"), te.reduce_axis((0, 16), "y2"), te.reduce_axis((0, 16), "x2")
        s1 = te.compute((1, 32), lambda n, g: te.sum(x[n, g * 8 + r1c, r1y, r1x], axis=[r1c, r1y, r1x]), name="S1")
        s2 = te.compute((1, 32), lambda n, g: te.sum(x[n, g * 8 + r2c, r2y, r2x] * x[n, g * 8 + r2c, r2y, r2x],
                                                     axis=[r2c, r2y, r2x]), name="S2")
        y = te.compute((1, 256, 16, 16), lambda n, c, h, v: (x[n, c, h, v] - s1[n, c // 8] / 2048.0) / te.sqrt(
            s2[n, c // 8] / 2048.0 - (s1[n, c // 8] / 2048.0) * (s1[n, c // 8] / 2048.0) + 1e-5), name="Y")
        return [x, y]

    def transpose_heads():  # (1, 128, 12, 64) -> (1, 12, 128, 64)
        x = te.placeholder((1, 128, 12, 64), name="X")
        y = te.compute((1, 12, 128, 64), lambda n, h, t, d: x[n, t, h, d], name="Y")
        return [x, y]

    def int8_matmul():  # quantized dense: int8 x int8 -> int32, 64 x 256 x 192
        a = te.placeholder((64, 256), name="A", dtype="int8")
        b = te.placeholder((192, 256), name="B", dtype="int8")
        k = te.reduce_axis((0, 256), "k")
        c = te.compute((64, 192), lambda i, j: te.sum(a[i, k].astype("int32") * b[j, k].astype("int32"), axis=k),
                       name="C")
        return [a, b, c]

    # three more (2026-12-05): a dense layer with its bias and GELU epilogue at widths no zoo network has, a
    # channels-last convolution (the zoo's are NCHW), a row-wise L2 normalisation
    def dense_bias_gelu():  # 200 x 333 -> 777, + bias, erf GELU
        x = te.placeholder((200, 333), name="X")
        w = te.placeholder((777, 333), name="W")
        b = te.placeholder((777,), name="B")
        k = te.reduce_axis((0, 333), "k")
        d = te.compute((200, 777), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), name="D")
        y = te.compute((200, 777), lambda i, j: 0.5 * (d[i, j] + b[j]) * (
            1.0 + te.erf((d[i, j] + b[j]) * 0.7071067811865476)), name="Y")
        return [x, w, b, y]

    def conv2d_nhwc():  # 3x3, 64 -> 96 channels, 28x28, channels last
        x = te.placeholder((1, 30, 30, 64), name="X")
        w = te.placeholder((3, 3, 64, 96), name="W")
        ry, rx, rc = te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx"), te.reduce_axis((0, 64), "rc")
        y = te.compute((1, 28, 28, 96), lambda n, h, v, o: te.sum(x[n, h + ry, v + rx, rc] * w[ry, rx, rc, o],
                                                                  axis=[ry, rx, rc]), name="Y")
        return [x, w, y]

    def l2_norm():  # each of 256 rows of 512 divided by its L2 norm
        x = te.placeholder((256, 512), name="X")
        k = te.reduce_axis((0, 512), "k")
        ss = te.compute((256,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="SS")
        y = te.compute((256, 512), lambda i, j: x[i, j] / te.sqrt(ss[i] + 1e-12), name="Y")
        return [x, y]

    # three more (2026-12-05, later): a Conformer-style depthwise 1-D convolution, a 3-D average pool, a row-wise
    # log-sum-exp (the loss of a classifier)
    def dw_conv1d():  # depthwise, 256 channels, kernel 31, length 512
        x = te.placeholder((1, 256, 542), name="X")
        w = te.placeholder((256, 1, 31), name="W")
        rk = te.reduce_axis((0, 31), "rk")
        y = te.compute((1, 256, 512), lambda n, c, t: te.sum(x[n, c, t + rk] * w[c, 0, rk], axis=rk), name="Y")
        return [x, w, y]

    def avg_pool3d():  # 2x2x2 stride 2, 32 channels, 16x32x32 -> 8x16x16
        x = te.placeholder((1, 32, 16, 32, 32), name="X")
        rd, ry, rx = te.reduce_axis((0, 2), "rd"), te.reduce_axis((0, 2), "ry"), te.reduce_axis((0, 2), "rx")
        s = te.compute((1, 32, 8, 16, 16), lambda n, c, d, h, v: te.sum(
            x[n, c, 2 * d + rd, 2 * h + ry, 2 * v + rx], axis=[rd, ry, rx]), name="S")
        y = te.compute((1, 32, 8, 16, 16), lambda n, c, d, h, v: s[n, c, d, h, v] * 0.125, name="Y")
        return [x, y]

    def logsumexp():  # log(sum(exp(x))) of each of 512 rows of 1000, max-shifted
        x = te.placeholder((512, 1000), name="X")
        k1, k2 = te.reduce_axis((0, 1000), "k1"), te.reduce_axis((0, 1000), "k2")
        mx = te.compute((512,), lambda i: te.max(x[i, k1], axis=k1), name="MX")
        se = te.compute((512,), lambda i: te.sum(te.exp(x[i, k2] - mx[i]), axis=k2), name="SE")
        y = te.compute((512,), lambda i: te.log(se[i]) + mx[i], name="Y")
        return [x, y]

    # four more (2026-12-07): a matrix-vector product (an LLM's decode step: memory-bound), an Inception-style 1x7
    # convolution, a GEMM reading its first operand transposed (a weight gradient's layout), an InstanceNorm
    def gemv():  # 2048 x 1024 weights times one vector
        w = te.placeholder((2048, 1024), name="W")
        x = te.placeholder((1024,), name="X")
        k = te.reduce_axis((0, 1024), "k")
        y = te.compute((2048,), lambda i: te.sum(w[i, k] * x[k], axis=k), name="Y")
        return [w, x, y]

    def conv1x7():  # 1x7, 128 -> 128 channels, 17x17, padded along the width only
        x = te.placeholder((1, 128, 17, 23), name="X")
        w = te.placeholder((128, 128, 1, 7), name="W")
        rc, rx = te.reduce_axis((0, 128), "rc"), te.reduce_axis((0, 7), "rx")
        y = te.compute((1, 128, 17, 17), lambda n, o, h, v: te.sum(x[n, rc, h, v + rx] * w[o, rc, 0, rx],
                                                                   axis=[rc, rx]), name="Y")
        return [x, w, y]

    def matmul_tn():  # C = A^T B: (128, 256)^T x (128, 192)
        a = te.placeholder((128, 256), name="A")
        b = te.placeholder((128, 192), name="B")
        k = te.reduce_axis((0, 128), "k")
        c = te.compute((256, 192), lambda i, j: te.sum(a[k, i] * b[k, j], axis=k), name="C")
        return [a, b, c]

    def instance_norm():  # each of 64 channels of 32 x 32 normalised by its own mean and variance
        x = te.placeholder((1, 64, 32, 32), name="X")
        r1y, r1x = te.reduce_axis((0, 32), "y"), te.reduce_axis((0, 32), "x")
        r2y, r2x = te.reduce_axis((0, 32), "y2"), te.reduce_axis((0, 32), "x2")
        s1 = te.compute((1, 64), lambda n, c: te.sum(x[n, c, r1y, r1x], axis=[r1y, r1x]), name="S1")
        s2 = te.compute((1, 64), lambda n, c: te.sum(x[n, c, r2y, r2x] * x[n, c, r2y, r2x], axis=[r2y, r2x]),
                        name="S2")
        y = te.compute((1, 64, 32, 32), lambda n, c, h, v: (x[n, c, h, v] - s1[n, c] / 1024.0) / te.sqrt(
            s2[n, c] / 1024.0 - (s1[n, c] / 1024.0) * (s1[n, c] / 1024.0) + 1e-5), name="Y")
        return [x, y]

    import tvm

    fs = dict(batch_matmul=batch_matmul, depthwise7x7=depthwise7x7, conv1d=conv1d, rms_norm=rms_norm,
              grouped_conv=grouped_conv, dilated_conv=dilated_conv, conv3d=conv3d, attn_scores=attn_scores,
              softmax=softmax, maxpool5=maxpool5, gelu_tanh=gelu_tanh, group_norm=group_norm,
              transpose_heads=transpose_heads, int8_matmul=int8_matmul, dense_bias_gelu=dense_bias_gelu,
              conv2d_nhwc=conv2d_nhwc, l2_norm=l2_norm, dw_conv1d=dw_conv1d, avg_pool3d=avg_pool3d,
              logsumexp=logsumexp, gemv=gemv, conv1x7=conv1x7, matmul_tn=matmul_tn, instance_norm=instance_norm)
    return {name: tvm.IRModule({"main": te.create_prim_func(f())}) for name, f in fs.items()}


FIRST = ("batch_matmul", "depthwise7x7", "conv1d", "rms_norm")  # the default set (since 2026-11-29)
ALL = FIRST + ("grouped_conv", "dilated_conv", "conv3d", "attn_scores", "softmax", "maxpool5", "gelu_tanh",
               "group_norm", "transpose_heads", "int8_matmul", "dense_bias_gelu", "conv2d_nhwc", "l2_norm",
               "dw_conv1d", "avg_pool3d", "logsumexp", "gemv", "conv1x7", "matmul_tn", "instance_norm")


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
    from perfcast.e2e.schedules import drop_unnamed_ms_log_handlers, isolated_builder, tuning_runner

    spec = get_device(device)
    os.environ["TVM_NUM_THREADS"] = str(spec.threads)
    if hasattr(os, "sched_setaffinity") and spec.threads < len(os.sched_getaffinity(0)):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[-spec.threads:])  # as the collector measures it
    drop_unnamed_ms_log_handlers()
    with isolated_builder() as builder:
        return ms.tune_tir(mod, spec.target(), work_dir, max_trials_global=trials, num_trials_per_iter=16,
                           builder=builder, runner=tuning_runner(), num_tuning_cores=1, seed=seed,
                           cost_model=cost_model)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--ops", default=None, help="comma-separated operator names, or 'all' (default: "
                    f"{','.join(FIRST)}); all: {','.join(ALL)}")
    ap.add_argument("--work", default=None, help="keep the tuning databases here (reused when present)")
    ap.add_argument("--device", default="local", help="device to tune and predict for")
    ap.add_argument("--compare", action="append", default=[],
                    help="another model directory scored on the same databases (repeatable)")
    ap.add_argument("--calibrate", action="store_true",
                    help="scale predictions by today's speed ratio of the device (perfcast calibrate)")
    ap.add_argument("--geomean", action="store_true",
                    help="also score the geometric mean of all the models' predictions (needs --compare)")
    ap.add_argument("--min-programs", type=int, default=1,
                    help="the summary's mean MAPE counts only databases with at least this many programs")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.geomean and not a.compare:
        from perfcast.errors import PerfcastError

        raise PerfcastError("--geomean averages several models: add --compare DIR (e.g. the same recipe, another seed)")

    import numpy as np
    from scipy.stats import kendalltau

    from perfcast.eval.workflow import predict_records

    ops = operators()
    names = list(ops) if a.ops == "all" else a.ops.split(",") if a.ops else list(FIRST)
    unknown = [n for n in names if n not in ops]
    if unknown:
        from perfcast.errors import PerfcastError

        raise PerfcastError(f"unknown operator(s) {', '.join(unknown)}; known: {', '.join(ops)} (or --ops all)")
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
    models = [("model", a.model)] + [(f"compare {c}", c) for c in a.compare]
    labels = [label for label, _ in models] + (["geomean"] if a.geomean else [])
    for name in names:
        work = os.path.join(root, name)
        preds, uncal, unseen = {}, {}, {}
        for label, model in models:
            rows = [r for r in predict_records(work, model, a.device, speed_ratio=ratio) if "measured_s" in r]
            preds[label] = np.array([r["predicted_s"] for r in rows])
            uncal[label] = np.array([r.get("uncalibrated_predicted_s", r["predicted_s"]) for r in rows])
            m = np.array([r["measured_s"] for r in rows])
            unseen[label] = sorted({t for r in rows for t in r.get("unseen_dtypes", [])})
        if a.geomean:  # the models' predictions of each program averaged in log space
            preds["geomean"] = np.exp(np.mean(np.log([preds[lb] for lb, _ in models]), axis=0))
            uncal["geomean"] = np.exp(np.mean(np.log([uncal[lb] for lb, _ in models]), axis=0))
            unseen["geomean"] = sorted({t for lb, _ in models for t in unseen[lb]})
        for label in labels:
            p = preds[label]
            err = np.abs(p - m) / m
            key = name if label == "model" else f"{name} ({label})"
            out[key] = {"programs": len(m), "mape": float(err.mean()), "median_error": float(np.median(err)),
                        "kendall_tau": float(kendalltau(p, m).statistic), "best_measured_s": float(m.min()),
                        "measured_of_predicted_best_s": float(m[np.argmin(p)]),
                        "median_predicted_over_measured": float(np.median(p / m))}
            if unseen[label]:  # element types the model never trained on (perfcast.eval.coverage): a warned guess
                out[key]["unseen_dtypes"] = unseen[label]
            if ratio is not None:
                out[key].update(speed_ratio=ratio, uncalibrated_mape=float(np.mean(np.abs(uncal[label] - m) / m)))
            if label == "model" and len(models) > 1:  # how far the models' predictions of one program lie apart
                stack = np.array([preds[lb] for lb, _ in models])
                out[key]["models_max_over_min"] = float(np.median(stack.max(0) / stack.min(0)))
            if not a.json:
                o = out[key]
                print(f"{key:24s} {o['programs']:4d} programs  MAPE {o['mape']:.1%}  median {o['median_error']:.1%}  "
                      f"Kendall τ {o['kendall_tau']:.2f}  predicted/measured {o['median_predicted_over_measured']:.2f}"
                      f"  best {o['best_measured_s'] * 1e6:.1f} µs, predicted-best "
                      f"{o['measured_of_predicted_best_s'] * 1e6:.1f} µs"
                      + (f"  (uncalibrated MAPE {o['uncalibrated_mape']:.1%})" if ratio is not None else "")
                      + (f"  [unseen dtypes: {', '.join(unseen[label])}]" if unseen[label] else "")
                      + (f"  models apart {o['models_max_over_min']:.2f}x" if "models_max_over_min" in o else ""),
                      flush=True)
    if a.json:
        print(json.dumps(out))
    else:
        for label in labels:
            sel = [o for k, o in out.items() if (k in names if label == "model" else k.endswith(f"({label})"))
                   and o["programs"] >= a.min_programs]
            if sel:
                taus = [o["kendall_tau"] for o in sel if o["programs"] > 1]  # (τ of one program: undefined)
                print(f"{label}: mean MAPE {np.mean([o['mape'] for o in sel]):.1%} over {len(sel)} operators"
                      + (f" with {a.min_programs}+ programs" if a.min_programs > 1 else "")
                      + f", mean τ {np.mean(taus):.2f} over the {len(taus)} with more than one program")
        print(f"databases in {root}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
