"""TVM's untuned matmuls and L1 cache-set aliasing: measured cost per multiply-add and the model's bias, per device.

TVM's default-pipeline matmul (no tuning) walks the weight B[K, N] down a column in its innermost loop, one row
(4·N bytes) per step. When that row is a multiple of a large power of two, the column's cache lines fall into few
of L1's 64 sets (every CPU here has 64 sets of 64-byte lines: 32 KiB 8-way or 48 KiB 12-way): a 2 KiB row uses 2
sets, a 4 KiB one a single set, so only 8-24 lines of the column stay cached and the hardware prefetcher's lines
evict each other. The cost per multiply-add jumps, on the AMD hosts far more than on the Intel ones.

For every device key, the TVM default kernels of the dataset's 2-D matmul tasks (A[M, K] x B[K, N], with or without
a fused epilogue) are grouped by the number of L1 sets their column walk uses: 64 / 2^(k - 6), from the compact AST's
`load_stride_pow2` column (k: the largest power of two dividing a load's byte move of a line or more; the program's
maximum over its leaves, read from the feature cache). Per group: kernels, median measured ns per multiply-add, and
per model the median of measured / predicted (above 1 = under-predicted). No measuring: it reads the dataset and
cached features. `--by-k` splits each group by the reduction length K (powers of two: K in [2^j, 2^(j+1))), which
shows where the cost jumps: how many of the column's lines a cache level can keep in its sets.

    python bench/aliasing.py [--model DIR] [--compare DIR ...] [--data DIR] [--by-k] [--json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

def l1_sets(leaves: np.ndarray) -> int:
    """L1 sets (of 64, lines of 64 bytes) the program's most power-of-two-aligned load walk touches, from its
    compact-AST leaf rows: 2^k bytes apart with k >= 6 lands in 64 / 2^(k - 6) sets; no such load (k = 0) spreads
    over all."""
    from perfcast.features._tir import L1_SETS
    from perfcast.features.compact_ast import LEAF_FEATURES, STRIDE_LINE_BYTES

    rows = np.asarray(leaves, dtype=np.float64).reshape(-1, len(LEAF_FEATURES))
    k = int(rows[:, LEAF_FEATURES.index("load_stride_pow2")].max(initial=0))
    line_pow = STRIDE_LINE_BYTES.bit_length() - 1
    return L1_SETS >> min(max(k - line_pow, 0), L1_SETS.bit_length() - 1)


def matmul_shape(arg_shapes_json: str, task_name: str):
    """(M, K, N) of a 2-D matmul task, else None."""
    if not task_name.removeprefix("fused_").startswith("matmul"):
        return None
    shapes = json.loads(arg_shapes_json)
    if len(shapes) < 3 or any(len(s[0]) != 2 for s in shapes[:2]) or shapes[0][0][1] != shapes[1][0][0]:
        return None
    (m, k), (_, n) = shapes[0][0], shapes[1][0]
    return int(m), int(k), int(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: the bundled model)")
    ap.add_argument("--compare", action="append", default=[], help="another model directory (repeatable)")
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled dataset)")
    ap.add_argument("--by-k", action="store_true", help="split each group by K (power-of-two buckets)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.errors import PerfcastError
    from perfcast.eval.workflow import load_data
    from perfcast.models.base import load_model

    models = {nm: load_model(p) for nm, p in zip([a.model or "bundled", *a.compare], [a.model, *a.compare])}
    ds, df, X = load_data(a.data, progress=False, asm=any(m.needs_asm for m in models.values()))
    tasks = ds.read("tasks", columns=["workload_key", "task_name", "arg_shapes_json"]).to_pandas()
    shape = {k: matmul_shape(s, n) for k, n, s in zip(tasks.workload_key, tasks.task_name, tasks.arg_shapes_json)}
    mnk = df.workload_key.map(shape)
    idx = np.where((df.schedule_kind == "default").to_numpy() & mnk.notna().to_numpy())[0]
    if len(idx) == 0:
        raise PerfcastError(f"{a.data or 'the bundled dataset'!r} has no TVM default kernels of 2-D matmul tasks; "
                            "collect a network with dense layers (`perfcast collect -n bert_tiny --out DIR`)")
    sub = df.iloc[idx]
    y = sub.latency_s.to_numpy()
    macs = np.array([m * k * n for m, k, n in mnk.iloc[idx]], dtype=float)
    sets = np.array([l1_sets(X.leaves[i]) for i in idx])
    kbin = (np.array([1 << (k.bit_length() - 1) for _, k, _ in mnk.iloc[idx]]) if a.by_k  # K's power-of-two bucket
            else np.zeros(len(idx), dtype=int))
    ratio = {nm: y / m.predict(X.take(idx)) for nm, m in models.items()}
    out = {}
    for dev in sorted(set(sub.device_key)):
        for s, kb in sorted(set(zip(sets.tolist(), kbin.tolist()))):
            mask = (sub.device_key == dev).to_numpy() & (sets == s) & (kbin == kb)
            if mask.sum() == 0:
                continue
            out.setdefault(dev, {})[f"{s}" + (f" K>={kb}" if a.by_k else "")] = {
                "kernels": int(mask.sum()), "ns_per_mac": float(np.median(y[mask] / macs[mask] * 1e9)),
                "measured_over_predicted": {nm: float(np.median(r[mask])) for nm, r in ratio.items()}}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    head = "L1 sets" + (", K" if a.by_k else "")
    print(f"{'device':50s} {head:>14s} {'kernels':>7s} {'ns/MAC':>7s}  measured / predicted ({', '.join(models)})")
    for dev, groups in out.items():
        for s, g in groups.items():
            rs = "  ".join(f"{v:5.2f}" for v in g["measured_over_predicted"].values())
            print(f"{dev[:50]:50s} {s:>14s} {g['kernels']:7d} {g['ns_per_mac']:7.2f}  {rs}")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
