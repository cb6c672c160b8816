"""Cost of turning stored records into model features, per phase, on this machine: rebuilding a program from its
task and trace, the compact AST, TVM's per-store features, the analytic features, and `program_row` (all three,
as the feature cache computes them). Reads a dataset's records (default: the bundled one); no measuring.

    python bench/feature_speed.py [--records 60] [--seed 0] [--data DIR] [--asm] [--json]

`--asm` also times the assembly features (`features.asm_cache`) of the same programs, with the bundled model
loaded first (as `perfcast predict` has it): built in this process (no protection against a hanging LLVM), one
child process per program, and one child for the lot (what `asm_rows` does), with the ratio of the last two.

To compare two versions of perfcast on the same records, run this script with each on PYTHONPATH (from a directory
without a `perfcast/` in it) and the same `--data`.

Prints milliseconds per record for each phase (parsing each task's TVMScript once is reported apart: the cache
keeps parsed tasks across partitions) and the total for a full extraction of the dataset at that rate on all cores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled dataset)")
    ap.add_argument("--asm", action="store_true", help="also time the assembly features three ways (see above)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import pyarrow.parquet as pq

    from perfcast import paths
    from perfcast._tvm.util import apply_trace
    from perfcast.data.store import Dataset
    from perfcast.features import cache as C

    ds = Dataset(a.data or paths.bundled_dataset_dir())
    tasks = ds.read("tasks", ["workload_key", "tir_script"]).to_pydict()
    scripts = dict(zip(tasks["workload_key"], tasks["tir_script"]))
    cols = ["record_id", "workload_key", "trace_json", "target_json"]
    rows = [r for p in ds._parts("records") for r in pq.read_table(p, columns=cols).to_pylist()]
    total_records = len(rows)
    rows = random.Random(a.seed).sample([r for r in rows if r["trace_json"]], a.records)

    t0 = time.perf_counter()
    mods = {k: C._task_module(scripts[k]) for k in {r["workload_key"] for r in rows}}
    t_parse = time.perf_counter() - t0
    t0 = time.perf_counter()
    funcs = [apply_trace(mods[r["workload_key"]], r["trace_json"]) for r in rows]
    t_replay = time.perf_counter() - t0
    phases = {"replay": t_replay}
    for name, fn in (("compact_ast", lambda f, r: C._CA.compact_ast(f)),
                     ("per_store", lambda f, r: C._per_store(r["target_json"]).extract(f)),
                     ("analytic", lambda f, r: C._AN.extract(f)),
                     ("program_row", lambda f, r: C.program_row(f, r["target_json"]))):
        t0 = time.perf_counter()
        for f, r in zip(funcs, rows):
            fn(f, r)
        phases[name] = time.perf_counter() - t0
    if a.asm:
        phases.update(_asm_phases(funcs, rows))
    ms = {k: 1e3 * v / len(rows) for k, v in phases.items()}
    per_record = ms["replay"] + ms["program_row"]
    out = {"records": len(rows), "ms_per_record": ms, "tasks_parsed": len(mods),
           "ms_per_task_parse": 1e3 * t_parse / len(mods), "dataset_records": total_records,
           "full_extraction_min_estimate": per_record * total_records / 1e3 / 60 / (os.cpu_count() or 1)}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{len(rows)} records of the bundled dataset, ms per record:")
    for k, v in ms.items():
        print(f"  {k:12s} {v:7.2f}")
    print(f"  parse a task {out['ms_per_task_parse']:7.2f} (once per task, {len(mods)} tasks)")
    if a.asm:
        print(f"asm: a child per program / one child for the lot: {ms['asm_child_each'] / ms['asm_one_child']:.2f}x")
    print(f"full extraction of {total_records:,} records at this rate on {os.cpu_count()} cores: "
          f"~{out['full_extraction_min_estimate']:.1f} min plus task parsing")


def _asm_phases(funcs, rows) -> dict[str, float]:
    """Seconds to build the asm features of `funcs` in this process, a child each, and one child for all."""
    import numpy as np

    from perfcast.features import asm_cache
    from perfcast.models import load_model

    load_model()  # torch and the model in memory: what a fork copies in `perfcast predict`
    items = [(f, r["target_json"]) for f, r in zip(funcs, rows)]
    out, got = {}, {}
    for name, fn in (("asm_in_process", lambda: [asm_cache._row_here(*it) for it in items]),
                     ("asm_child_each", lambda: [asm_cache.asm_rows([it])[0] for it in items]),
                     ("asm_one_child", lambda: asm_cache.asm_rows(items))):
        t0 = time.perf_counter()
        got[name] = np.stack(fn())
        out[name] = time.perf_counter() - t0
    assert all(np.array_equal(v, got["asm_in_process"], equal_nan=True) for v in got.values()), "asm rows differ"
    return out


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
