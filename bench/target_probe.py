"""One task's TIR built for several LLVM CPUs (`mcpu`) on this chip: time per build and the vector instructions that
explain the difference (AVX-512 gathers / scatters, divides, square roots in the assembly).

Why: the same TIR can run several times slower for one code-generation target than another on the same chip, for
reasons no device specification shows (on an AMD EPYC znver4, `mcpu=znver4` turns TVM's untuned batch-norm loops into
AVX-512 gathers and scatters and runs them 8-9x slower than the `mcpu=znver3` build). The TIR is the task's TVM default
kernel as recorded in the dataset; each build is the registry's device `local:mcpu=NAME` (all cores), timed with the
collector's protocol (`perfcast.collect.measure.time_function`: burn-in, repeats, median, CV).

    python bench/target_probe.py [--task fused_batch_norm12] [--mcpu znver3,znver4,x86-64] [--data DIR] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

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


def probe(tir: str, mcpus: list[str]) -> dict:
    """Per mcpu: the collector's timing (`time_function`: burn-in, repeats, median, CV) of the TIR built for the
    device `local:mcpu=NAME` of the registry, and the counted vector instructions of its assembly."""
    import tvm
    from tvm.script import from_source

    from perfcast._tvm.util import arg_shapes, main_func
    from perfcast.collect.measure import MeasureConfig, make_args, time_function
    from perfcast.devices import get_device

    mod = from_source(tir)
    dev = tvm.cpu(0)
    args = make_args(arg_shapes(main_func(mod)), dev)
    out = {}
    for mcpu in mcpus:
        lib = tvm.build(mod, target=get_device(f"local:mcpu={mcpu}").target())
        asm = lib.inspect_source("asm")
        ops = collections.Counter(m.group(1) for m in re.finditer(r"^\s+(v[a-z0-9]+)\s", asm, re.M))
        f = lib["main"]
        res = time_function(lambda n, r: lib.time_evaluator("main", dev, number=n, repeat=r)(*args).results,
                            lambda: f(*args), MeasureConfig())
        out[mcpu] = {"median_s": res["latency_s"], "cv": res["latency_cv"],
                     "ops": {k: v for k, v in sorted(ops.items()) if k.startswith(_OPS)}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="fused_batch_norm12", help="task name in the dataset (its default kernel)")
    ap.add_argument("--mcpu", default="znver3,znver4,x86-64", help="LLVM CPUs to build for, comma-separated")
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled one)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from perfcast.errors import run_with_one_line_errors

    res = run_with_one_line_errors(lambda: probe(default_tir(a.data, a.task), a.mcpu.split(",")))
    if a.json:
        print(json.dumps(res))
        return
    fastest = min(r["median_s"] for r in res.values())
    for mcpu, r in res.items():
        print(f"{a.task} mcpu={mcpu:10s} {r['median_s'] * 1e6:10.1f} us (CV {r['cv']:.1%}, "
              f"{r['median_s'] / fastest:.2f}x the fastest)  {r['ops']}")


if __name__ == "__main__":
    main()
