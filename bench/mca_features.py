"""Would a static pipeline model of the innermost loops add what the assembly's instruction counts miss? (A probe, not
a feature of perfcast yet.)

The asm features count a loop body's instructions by class; they cannot see its dependency chains: a reduction into
one register runs at the FMA's latency, an unrolled one with several accumulators at its throughput. LLVM's
`llvm-mca` simulates a loop body on a CPU's scheduling model and says both. For a sample of one device's records
(`bench/asm_features.py`'s: per task its default kernel plus random others, `--per-train` of a training task and
`--per-test` of a held-out one), each program is rebuilt for its target, every innermost loop body
(`perfcast.features.asm.innermost`) run through `llvm-mca -mcpu=CPU -iterations=100` (one run per program, a code
region per loop), and five columns are appended to the 55 asm ones: log2(1 + the loops' cycles per iteration,
summed), log2(1 + their block reciprocal throughput, summed), log2(1 + estimated cycles = FLOPs / the loops'
floating-point lanes per pass × cycles per pass), cycles / throughput (above 1: bound by a dependency chain), and
the number of loops simulated. The tree member (`lgbm`, `features=program_asm`, latency per unit of work) is
trained with and without them on the same records, by_network split, per seed. `--executed` also reads, from the
same build, `bench/asm_executed_work.py`'s executed-work columns (every instruction weighed by its loops' trip
counts as the assembly states them) and trains four variants: no extra columns, + llvm-mca, + executed work, + both.

The columns cost ~0.3 s a record on top of the build (2 processes: ~28 min for 5,700 records); they are kept in
`--cache` (JSON, record id -> columns) and a later run reuses them. No measuring. Needs `llvm-mca` on the PATH
(Debian: `apt install llvm`); its scheduling models are LLVM's, so a CPU newer than its LLVM is simulated as an
older relative (`MCA_CPU`).

    python bench/mca_features.py [--device KEY] [--per-train 8] [--per-test 20] [--seeds 0 1] [--jobs 2]
                                 [--cache FILE] [--executed] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np

DEVICE = "local@Intel(R) Xeon(R) Processor/rocketlake"
MCA_CPU = {"znver4": "znver3", "emeraldrapids": "icelake-server"}  # CPUs LLVM 14's llvm-mca does not know
MCA_COLUMNS = ("mca_cycles", "mca_rthroughput", "mca_est_cycles", "mca_latency_bound", "mca_loops")


def mca_regions(blocks: list[list[str]], cpu: str) -> list[tuple[float, float]]:
    """(cycles per iteration over 100 iterations, block reciprocal throughput) of each loop body (lines of AT&T
    assembly), from one llvm-mca run with a code region per body; NaNs if llvm-mca refuses the text."""
    text = []
    for i, b in enumerate(blocks):
        text += [f"# LLVM-MCA-BEGIN L{i}", *b, f"# LLVM-MCA-END L{i}"]
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write("\n".join(text) + "\n")
    try:
        r = subprocess.run(["llvm-mca", f"-mcpu={cpu}", "-iterations=100", "-resource-pressure=0",
                            "-instruction-info=0", f.name], capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(f.name)
    cyc = [float(x.split(":")[1]) / 100.0 for x in r.stdout.splitlines() if x.startswith("Total Cycles:")]
    rthr = [float(x.split(":")[1]) for x in r.stdout.splitlines() if x.startswith("Block RThroughput:")]
    if r.returncode != 0 or len(cyc) != len(blocks) or len(rthr) != len(blocks):
        return [(float("nan"), float("nan"))] * len(blocks)
    return list(zip(cyc, rthr))


def mca_columns(asm: str, flops: float, cpu: str) -> np.ndarray:
    """(len(MCA_COLUMNS),) the program's llvm-mca columns (module docstring); NaN if llvm-mca refused its loops.
    The floating-point lanes per pass are summed over the loop bodies as simulated (two innermost loops that share
    instructions count them twice, as llvm-mca runs them twice)."""
    from perfcast.features.asm import _lanes, classify, innermost, loops, parse

    bodies = [[(m, ops) for m, ops in func[a:b + 1] if not m.startswith("label:")]
              for func in parse(asm) for a, b in innermost(loops(func))]
    bodies = [b for b in bodies if b]
    res = mca_regions([[f"\t{m}\t{ops}" for m, ops in b] for b in bodies], cpu) if bodies else []
    if res and not np.isfinite(res[0][0]):  # mca_regions is all or nothing
        return np.full(len(MCA_COLUMNS), np.nan, np.float32)
    cycles, rthr = sum(c for c, _ in res), sum(t for _, t in res)
    lanes = sum(_lanes(classify(m, ops), m) for b in bodies for m, ops in b)
    est = (flops / lanes if lanes else 0.0) * cycles
    return np.array([np.log2(1 + cycles), np.log2(1 + rthr), np.log2(1 + est),
                     cycles / rthr if rthr > 0 else np.nan, len(res)], np.float32)


def record_columns(args) -> tuple[str, list[float]]:
    """(record id, its columns) of one stored record row (`perfcast.features.cache.BUILD_COLUMNS`), rebuilt: the
    llvm-mca ones, then (`executed`) log2(1 + x) of each of `asm_executed_work.executed_figures`."""
    row, script, cpu, executed = args
    from perfcast.features.analytic import AnalyticExtractor
    from perfcast.features.asm import program_asm
    from perfcast.features.base import as_primfunc
    from perfcast.features.cache import record_program

    try:
        func = as_primfunc(record_program(row, {row["workload_key"]: script}))
        asm = program_asm(func, row["target_json"])
        v = mca_columns(asm, AnalyticExtractor().figures(func)["flops"], cpu)
        if executed:
            v = np.concatenate([v, np.log2(1.0 + np.array(list(executed_figures(asm).values()), np.float64))])
    except Exception:  # noqa: BLE001  (a program LLVM cannot build: missing columns, not a lost run)
        v = np.full(n_columns(executed), np.nan, np.float32)
    return row["record_id"], [float(x) for x in v]


def executed_figures(asm: str) -> dict[str, float]:
    """`bench/asm_executed_work.py`'s executed-work figures of an assembly text (raw, not log)."""
    from asm_executed_work import executed_figures as figures  # (bench/ is the script's directory: on sys.path)

    return figures(asm)


def n_columns(executed: bool) -> int:
    return len(MCA_COLUMNS) + (len(executed_figures("")) if executed else 0)


def main(argv=None) -> None:
    from multiprocessing import Pool

    from asm_features import sampled_records
    from tqdm import tqdm

    from perfcast.errors import PerfcastError
    from perfcast.eval.workflow import train
    from perfcast.features.asm_cache import dataset_asm
    from perfcast.features.cache import dataset_features, dataset_task_scripts, rows_to_build

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled one)")
    ap.add_argument("--device", default=DEVICE, help=f"device key of the records used (default {DEVICE!r})")
    ap.add_argument("--per-train", type=int, default=8, help="programs per training task (default 8)")
    ap.add_argument("--per-test", type=int, default=20, help="programs per held-out task (default 20)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="split / model seeds (default 0 1)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes building (default: all cores)")
    ap.add_argument("--cache", default=None, help="JSON file of computed columns (default: mca_<cpu>.json here)")
    ap.add_argument("--executed", action="store_true",
                    help="also the executed-work columns (bench/asm_executed_work.py); four variants are trained")
    ap.add_argument("--json", action="store_true", help="print JSON")
    a = ap.parse_args(argv)
    if shutil.which("llvm-mca") is None:
        raise PerfcastError("llvm-mca is not on the PATH; install LLVM's tools (Debian: apt install llvm)")
    if a.jobs < 1:
        raise PerfcastError(f"--jobs {a.jobs} must be at least 1 process")
    ds, df = sampled_records(a.data, a.device, a.per_train, a.per_test)
    cpu = a.device.rsplit("/", 1)[1]
    cpu = MCA_CPU.get(cpu, cpu)
    cache = a.cache or f"mca_{cpu}.json"
    done = json.loads(open(cache).read()) if os.path.exists(cache) else {}
    done = {k: v for k, v in done.items() if len(v) == n_columns(a.executed)}  # (a cache of the other kind: redone)
    rows = [r for rs in rows_to_build(ds, set(df["record_id"]) - set(done)).values() for r in rs]
    scripts = dataset_task_scripts(ds)
    with Pool(a.jobs) as pool:
        work = pool.imap_unordered(record_columns, [(r, scripts[r["workload_key"]], cpu, a.executed) for r in rows],
                                   chunksize=8)
        for i, (rid, v) in enumerate(tqdm(work, total=len(rows), disable=a.json or not rows, desc="llvm-mca")):
            done[rid] = v
            if i % 500 == 499:  # a kill loses at most 500 records' columns
                with open(cache, "w") as f:
                    json.dump(done, f)
    with open(cache, "w") as f:
        json.dump(done, f)

    C = np.array([done[r] for r in df["record_id"]], np.float32)
    M, E = C[:, :len(MCA_COLUMNS)], C[:, len(MCA_COLUMNS):]
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
            out["runs"].append({"seed": seed, "columns": cols,
                                **{k: t["overall"][k] for k in ("mape", "kendall_tau", "top1")},
                                "per_network": {n: v["mape"] for n, v in t["per_network"].items()}})
    mean = {c: {k: float(np.mean([x[k] for x in out["runs"] if x["columns"] == c])) for k in ("mape", "kendall_tau",
                                                                                           "top1")}
            for c in variants}
    out["mean"] = mean
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{a.device}: {out['records']} records of {out['tasks']} tasks, llvm-mca -mcpu={cpu} "
          f"({out['mca_missing']:.1%} missing; median cycles / throughput {out['median_latency_bound']:.2f})")
    for x in out["runs"]:
        nets = ", ".join(f"{n} {v:.1%}" for n, v in x["per_network"].items())
        label = x["columns"] if a.executed else f"{x['columns']} mca"
        print(f"  seed {x['seed']} {label:12s} MAPE {x['mape']:.1%}  "
              f"tau {x['kendall_tau']:.3f}  top-1 {x['top1']:.3f}  ({nets})")
    print("  mean MAPE " + " / ".join(f"{c} {m['mape']:.1%}" for c, m in mean.items()) + ", tau "
          + " / ".join(f"{m['kendall_tau']:.3f}" for m in mean.values()))


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)
