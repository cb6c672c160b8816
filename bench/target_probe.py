"""One task's TIR built for several LLVM CPUs (`mcpu`) on this chip: time per build and the vector instructions that
explain the difference (AVX-512 gathers / scatters, divides, square roots in the assembly).

Why: the same TIR can run several times slower for one code-generation target than another on the same chip, for
reasons no device specification shows (on an AMD EPYC znver4, `mcpu=znver4` turns TVM's untuned batch-norm loops into
AVX-512 gathers and scatters and runs them ~9x slower than the `mcpu=znver3` build). The TIR is the task's TVM default
kernel as recorded in the dataset; arguments are random; timing is TVM's time_evaluator (median of repeats).

    python bench/target_probe.py [--task fused_batch_norm12] [--mcpu znver3,znver4,x86-64] [--data DIR] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

import numpy as np

_OPS = ("vgather", "vpgather", "vscatter", "vpscatter", "vdivps", "vsqrtps")


def default_tir(data: str | None, task: str) -> str:
    """The recorded TVM default kernel of the first task named `task` (TVMScript text)."""
    import pyarrow.parquet as pq

    from perfcast import paths
    from perfcast.errors import PerfcastError

    root = Path(data) if data else paths.bundled_dataset_dir()
    for part in sorted(paths.records_dir(root).glob("*.parquet")):
        t = pq.read_table(part, columns=["task_name", "schedule_kind", "tir_script"]).to_pandas()
        t = t[(t.task_name == task) & (t.schedule_kind == "default")]
        if len(t):
            return t.iloc[0].tir_script
    raise PerfcastError(f"no default kernel of a task named {task!r} in {str(root)!r}; pick a task_name of its records")


def probe(tir: str, mcpus: list[str], number: int = 50, repeat: int = 7) -> dict:
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.script import from_source

    mod = from_source(tir)
    dev = tvm.cpu(0)
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.random([int(s) for s in a.shape]).astype(a.dtype), dev)
            for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
    out = {}
    for mcpu in mcpus:
        lib = tvm.build(mod, target=tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2}))
        asm = lib.inspect_source("asm")
        ops = collections.Counter(m.group(1) for m in re.finditer(r"^\s+(v[a-z0-9]+)\s", asm, re.M))
        lat = lib.time_evaluator("main", dev, number=number, repeat=repeat)(*args).results
        out[mcpu] = {"median_s": float(np.median(lat)), "cv": float(np.std(lat) / np.mean(lat)),
                     "ops": {k: v for k, v in sorted(ops.items()) if k.startswith(_OPS)}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="fused_batch_norm12", help="task name in the dataset (its default kernel)")
    ap.add_argument("--mcpu", default="znver3,znver4,x86-64", help="LLVM CPUs to build for, comma-separated")
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled one)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = probe(default_tir(a.data, a.task), a.mcpu.split(","))
    if a.json:
        print(json.dumps(res))
        return
    fastest = min(r["median_s"] for r in res.values())
    for mcpu, r in res.items():
        print(f"{a.task} mcpu={mcpu:10s} {r['median_s'] * 1e6:10.1f} us (CV {r['cv']:.1%}, {r['median_s'] / fastest:.2f}x "
              f"the fastest)  {r['ops']}")


if __name__ == "__main__":
    main()
