"""Does a static pipeline model of the innermost loops add what the assembly's instruction counts miss?

The asm features count a loop body's instructions by class; they cannot see its dependency chains: a reduction into
one register runs at the FMA's latency, an unrolled one with several accumulators at its throughput. The `mca`
features (`perfcast.features.mca`: every innermost loop body through LLVM 14's `llvm-mca`, five columns) say both.
For a sample of one device's records (`bench/asm_features.py`'s: per task its default kernel plus random others,
`--per-train` of a training task and `--per-test` of a held-out one), the columns are read from the dataset's
`mca` cache (`perfcast data features --mca`; the missing ones are built into that cache, where later runs and a
full build find them) and appended to the 55 asm ones. The tree member (`lgbm`,
`features=program_asm`, latency per unit of work) is trained with and without them on the same records,
by_network split, per seed. `--executed` also reads `bench/asm_executed_work.py`'s executed-work columns (every
instruction weighed by its loops' trip counts as the assembly states them; rebuilt here, kept in `--cache`, a JSON
file of record id -> columns) and trains four variants: no extra columns, + llvm-mca, + executed work, + both.

The columns cost ~0.28 s a record, trace replay and build included (2 processes: ~430 records a minute; 27 min for
11,502). No measuring.

    python bench/mca_features.py [--device KEY] [--per-train 8] [--per-test 20] [--seeds 0 1] [--jobs 2]
                                 [--executed [--cache FILE]] [--json]
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

DEVICE = "local@Intel(R) Xeon(R) Processor/rocketlake"


def record_columns(args) -> tuple[str, list[float]]:
    """(record id, log2(1 + x) of each of `asm_executed_work.executed_figures`) of one stored record row
    (`perfcast.features.cache.BUILD_COLUMNS`), rebuilt."""
    row, script = args
    from perfcast.features.asm import program_asm
    from perfcast.features.base import as_primfunc
    from perfcast.features.cache import record_program

    try:
        asm = program_asm(as_primfunc(record_program(row, {row["workload_key"]: script})), row["target_json"])
        v = np.log2(1.0 + np.array(list(executed_figures(asm).values()), np.float64))
    except Exception:  # noqa: BLE001  (a program LLVM cannot build: missing columns, not a lost run)
        v = np.full(len(executed_figures("")), np.nan)
    return row["record_id"], [float(x) for x in v]


def executed_figures(asm: str) -> dict[str, float]:
    """`bench/asm_executed_work.py`'s executed-work figures of an assembly text (raw, not log)."""
    from asm_executed_work import executed_figures as figures  # (bench/ is the script's directory: on sys.path)

    return figures(asm)


def main(argv=None) -> None:
    from multiprocessing import Pool

    from asm_features import mean_runs, nets_text, run_entry, run_text, sampled_records
    from tqdm import tqdm

    from perfcast.errors import PerfcastError
    from perfcast.eval.workflow import train
    from perfcast.features.asm_cache import dataset_asm
    from perfcast.features.cache import dataset_features, dataset_task_scripts, rows_to_build
    from perfcast.features.mca import mca_cpu

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled one)")
    ap.add_argument("--device", default=DEVICE, help=f"device key of the records used (default {DEVICE!r})")
    ap.add_argument("--per-train", type=int, default=8, help="programs per training task (default 8)")
    ap.add_argument("--per-test", type=int, default=20, help="programs per held-out task (default 20)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="split / model seeds (default 0 1)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes building (default: all cores)")
    ap.add_argument("--cache", default=None,
                    help="JSON file of the executed-work columns (default: executed_<device CPU>.json here)")
    ap.add_argument("--executed", action="store_true",
                    help="also the executed-work columns (bench/asm_executed_work.py); four variants are trained")
    ap.add_argument("--json", action="store_true", help="print JSON")
    a = ap.parse_args(argv)
    if a.jobs < 1:
        raise PerfcastError(f"--jobs {a.jobs} must be at least 1 process")
    ds, df = sampled_records(a.data, a.device, a.per_train, a.per_test)
    cpu = mca_cpu(df["target_json"].iloc[0])
    M = dataset_asm(ds, df, jobs=a.jobs, progress=not a.json, kind="mca")
    E = np.zeros((len(df), 0), np.float32)
    if a.executed:
        cache = a.cache or f"executed_{a.device.rsplit('/', 1)[1]}.json"
        done = json.loads(open(cache).read()) if os.path.exists(cache) else {}
        rows = [r for rs in rows_to_build(ds, set(df["record_id"]) - set(done)).values() for r in rs]
        scripts = dataset_task_scripts(ds)
        with Pool(a.jobs) as pool:
            work = pool.imap_unordered(record_columns, [(r, scripts[r["workload_key"]]) for r in rows], chunksize=8)
            for i, (rid, v) in enumerate(tqdm(work, total=len(rows), disable=a.json or not rows, desc="executed")):
                done[rid] = v
                if i % 500 == 499:  # a kill loses at most 500 records' columns
                    with open(cache, "w") as f:
                        json.dump(done, f)
        with open(cache, "w") as f:
            json.dump(done, f)
        E = np.array([done[r] for r in df["record_id"]], np.float32)
    X = dataset_features(ds, df, progress=not a.json)
    asm = dataset_asm(ds, df, progress=not a.json)
    out = {"device": a.device, "mca_cpu": cpu, "records": len(df), "tasks": int(df["workload_key"].nunique()),
           "mca_missing": float(np.isnan(M[:, 0]).mean()),
           "median_latency_bound": float(np.nanmedian(M[:, 3])), "runs": []}
    variants = {"without": asm, "with": np.hstack([asm, M])}
    if a.executed:
        variants = {"none": asm, "mca": np.hstack([asm, M]), "executed": np.hstack([asm, E]),
                    "both": np.hstack([asm, M, E])}
    for seed in a.seeds:
        for cols, cols_asm in variants.items():
            X.asm = cols_asm
            t = train(model="lgbm", split="by_network", seed=seed, loaded=(ds, df, X), progress=False,
                      params={"features": "program_asm", "target_scale": "work"})["test"]
            out["runs"].append({"seed": seed, "columns": cols, **run_entry(t)})
    out["mean"] = mean = mean_runs(out["runs"], "columns")
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{a.device}: {out['records']} records of {out['tasks']} tasks, llvm-mca -mcpu={cpu} "
          f"({out['mca_missing']:.1%} missing; median cycles / throughput {out['median_latency_bound']:.2f})")
    for x in out["runs"]:
        label = x["columns"] if a.executed else f"{x['columns']} mca"
        print(f"  seed {x['seed']} {label:12s} {run_text(x)}  ({nets_text(x)})")
    print("  mean MAPE " + " / ".join(f"{c} {m['mape']:.1%}" for c, m in mean.items()) + ", tau "
          + " / ".join(f"{m['kendall_tau']:.3f}" for m in mean.values()))


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
