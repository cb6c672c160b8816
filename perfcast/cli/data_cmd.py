from __future__ import annotations

import json
from typing import List, Optional

import typer

SUMMARY_HELP = ("Summarize a perfcast dataset (the bundled one when DIR is omitted): records by status, networks, "
                "tasks, devices, duplicates, programs per task, latency percentiles and spread; writes a histogram "
                "of log10(latency) per device as PNG.")
SUMMARY_EXAMPLE = "Example: perfcast data summary runs/r18 --json"

IMPORT_HELP = ("Import a TVM meta-schedule JSON database (a directory with database_workload.json and "
               "database_tuning_record.json, as written by ms.tune_tir(..., database='json')) into a perfcast "
               "dataset: one record per tuning record, latency = median of its run_secs. Re-importing adds nothing.")
IMPORT_EXAMPLE = "Example: perfcast data import work_dir/ --out runs/imported --device local"

COMPACT_HELP = ("Rewrite a dataset's partitions (the bundled one when DIR is omitted) as a few large ones sorted by "
                "task: collecting adds small partitions, which compress poorly (the bundled records: 59.9 MB in 370 "
                "partitions, 38.2 MB compacted). The same rows (what models read is ordered by task, not by file); "
                "feature caches are carried over, so nothing is recomputed. Safe to kill: the next open finishes or "
                "undoes it.")
COMPACT_EXAMPLE = "Example: perfcast data compact runs/r18 --rows-per-part 10000"
COMPACT_HINT_PARTS = 50  # `perfcast data summary` suggests compacting a dataset of more records partitions

FEATURES_HELP = ("Compute and cache the model features of a dataset's records (the bundled one when DIR is omitted), "
                 "beside it under DIR/features/; with --asm also their assembly features, which build every program "
                 "with LLVM (~440 programs/min on 2 cores: hours for a large dataset), and with --mca the llvm-mca "
                 "columns of their innermost loops (LLVM 14's llvm-mca; ~430 programs/min). Resumable: an "
                 "interrupted run keeps what it cached and the next one goes on. Training and evaluation compute "
                 "missing features themselves; this does it ahead of time.")
FEATURES_EXAMPLE = "Example: perfcast data features --asm --mca --device 'local@AMD EPYC/znver4'"


def features(
    dir: Optional[str] = typer.Argument(None, help="dataset directory (omit for the bundled dataset)"),
    asm: bool = typer.Option(False, "--asm", help="also the assembly features (models with features=program_asm)"),
    mca: bool = typer.Option(False, "--mca", help="also the llvm-mca columns of the innermost loops (features.mca)"),
    device: Optional[str] = typer.Option(None, help="only this device's records (id or device key)"),
    jobs: Optional[int] = typer.Option(None, min=1, help="processes (default: all cores)"),
    json_out: bool = typer.Option(False, "--json", help="print the counts as JSON"),
) -> None:
    from ..eval.workflow import cache_features

    out = cache_features(dir, device=device, asm=asm, jobs=jobs, progress=not json_out, mca=mca)
    if json_out:
        print(json.dumps(out))
        return
    line = f"features of {out['records']} records cached in {out['seconds']:.0f} s"
    if asm:
        line += (f"; assembly features: {out['asm_built']} built, {out['asm_failed']} of them "
                 "failed to build (NaN, which the models take as missing), "
                 f"{out['asm_copied']} copied from an earlier record of the same program")
    if mca:
        line += (f"; llvm-mca columns: {out['mca_built']} built, {out['mca_failed']} of them failed (NaN), "
                 f"{out['mca_copied']} copied")
    print(f"{line}; cache: {', '.join(out['cache'])}")


def compact(
    dir: Optional[str] = typer.Argument(None, help="dataset directory (omit for the bundled dataset)"),
    rows_per_part: int = typer.Option(10_000, help="rows per new partition"),
    json_out: bool = typer.Option(False, "--json", help="print the counts as JSON"),
) -> None:
    from .. import paths
    from ..data.compact import compact as run
    from ..data.store import Dataset

    out = run(Dataset(dir or paths.bundled_dataset_dir()), rows_per_part=rows_per_part, progress=not json_out)
    if json_out:
        print(json.dumps(out))
        return
    for kind, t in out["tables"].items():
        print(f"{kind}: {_n(t['partitions_before'], 'partition')}, {t['bytes_before']:,} bytes -> "
              f"{_n(t['partitions_after'], 'partition')}, {t['bytes_after']:,} bytes")
    print(f"{out['feature_cache_files']} feature-cache files carried over; {out['seconds']:.0f} s")


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}{'' if k == 1 else 's'}"


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _ms(x) -> str:
    """Seconds with a readable unit."""
    if x is None:
        return "-"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x * 1e9:.3g} ns"


def summary(
    dir: Optional[str] = typer.Argument(None, help="dataset directory (omit for the bundled dataset)"),
    json_out: bool = typer.Option(False, "--json", help="print the summary as JSON"),
    plot: Optional[str] = typer.Option(None, help="write the latency histogram to this PNG file instead"),
) -> None:
    from ..data.summary import summarize

    s = summarize(dir, plot=plot)
    if json_out:
        print(json.dumps(s))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title=f"perfcast dataset {s['root']}", show_header=False)
    t.add_column("", style="bold")
    t.add_column("")
    t.add_row("records", f"{s['records']} ({', '.join(f'{k} {v}' for k, v in s['by_status'].items())})")
    t.add_row("ok records", str(s["ok_records"]))
    if s["journal_pending"]:
        t.add_row("in journal (not flushed)", str(s["journal_pending"]))
    stored = f"{_n(s['record_partitions'], 'partition')}, {s['record_bytes'] / 1e6:.1f} MB"
    if s["record_partitions"] > COMPACT_HINT_PARTS:
        stored += " (`perfcast data compact` rewrites them a third smaller, a few sorted by task)"
    t.add_row("records stored in", stored)
    t.add_row("tasks with ok records", f"{s['tasks']} of {s['tasks_total']} in the task table")
    t.add_row("networks", f"{s['networks']}: {', '.join(s['network_names'])}" if s["networks"] else "0")
    t.add_row("devices", ", ".join(f"{d} ({s['ok_records_by_device'].get(d, 0)} ok)" for d in s["device_ids"]))
    t.add_row("duplicates", str(s["duplicates"]))
    t.add_row("records by timing protocol", ", ".join(f"{k}: {v}" for k, v in s["records_by_protocol"].items())
              + (f" ({s['superseded']} superseded by a re-measurement)" if s["superseded"] else ""))
    p = s["programs_per_task"]
    t.add_row("ok programs per task", f"median {_fmt(p['median'])}, min {_fmt(p['min'])}, max {_fmt(p['max'])}")
    lat = s["latency_s"]
    t.add_row("latency", ", ".join(f"{k} {_ms(v)}" for k, v in lat.items()))
    t.add_row("median cv of repeats", _fmt(s["cv_median"]))
    t.add_row("remeasured", "-" if s["remeasured"] is None else f"{100 * s['remeasured']:.1f} %")
    console.print(t)
    spread = ("tasks", "min", "p10", "median", "p90", "max")
    by_batch = s["network_programs_per_task_by_device_and_batch"]
    for what, keys, rows in (
            ("by device: tasks of networks (layer suites left out)", ("device",),
             [((d,), v) for d, v in s["network_programs_per_task_by_device"].items()]),
            ("by device and batch size: tasks of networks", ("device", "batch"),
             [((d, b), v) for d, per in by_batch.items() for b, v in per.items()]),
            ("by device: all tasks", ("device",), [((d,), v) for d, v in s["programs_per_task_by_device"].items()])):
        if not rows:
            continue
        dt = Table(title=f"ok programs per task {what}")
        for c in (*keys, *spread):
            dt.add_column(c, justify="left" if c == "device" else "right")
        for key, v in rows:
            dt.add_row(*key, *(_fmt(v[k]) for k in spread))
        console.print(dt)
    if s["per_network"]:
        nt = Table(title="per network")
        for c in ("network", "batch sizes", "tasks", "tasks with records", "ok records"):
            nt.add_column(c, justify="left" if c == "network" else "right")
        for name, v in s["per_network"].items():
            nt.add_row(name, ",".join(map(str, v["batch_sizes"])), str(v["tasks"]), str(v["tasks_with_records"]),
                       str(v["ok_records"]))
        console.print(nt)
    print(f"histogram: {s['plot']}" if s["plot"] else "histogram: none (no ok records)")


def import_db(
    db: str = typer.Argument(..., help="meta-schedule JSON database directory (work_dir of ms.tune_tir)"),
    out: str = typer.Option(..., help="dataset directory (created if missing)"),
    device: str = typer.Option("local", help="device the database was measured on (see `perfcast devices`)"),
    json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    from ..data.importer import import_database

    res = import_database(db, out, device=device)
    if json_out:
        print(json.dumps(res))
    else:
        st = ", ".join(f"{k} {v}" for k, v in sorted(res["by_status"].items())) or "nothing new"
        print(f"imported {res['imported']} of {res['tuning_records']} tuning records ({st}) of {res['tasks']} "
              f"tasks; {res['skipped_existing']} already in the dataset, {res['duplicates_in_db']} repeated "
              f"programs; dataset: {res['out']}")


MERGE_HELP = ("Merge perfcast datasets: add each SOURCE's records, tasks and network rows that OUT lacks (by record id "
              "and key; the sources are only read). Merging again adds nothing.")
MERGE_EXAMPLE = "Example: perfcast data merge runs/haswell runs/x86 --out runs/all"


def merge(
    source: List[str] = typer.Argument(..., help="dataset directories to merge from"),
    out: str = typer.Option(..., help="dataset directory to merge into (created if missing)"),
    json_out: bool = typer.Option(False, "--json", help="print the counts as JSON"),
) -> None:
    from ..data.store import Dataset

    dst = Dataset(out, create=True)
    srcs = [Dataset(s) for s in source]  # every source is checked before anything is written
    total = {"records": 0, "tasks": 0, "networks": 0}
    for s in srcs:
        for k, v in dst.merge_from(s).items():
            total[k] += v
    if json_out:
        print(json.dumps(total))
    else:
        print(f"added {total['records']} records, {total['tasks']} tasks, {total['networks']} network rows to {out}")
