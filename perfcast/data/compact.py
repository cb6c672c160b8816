"""Rewriting a dataset's partitions as a few large ones sorted by task (`perfcast data compact`).

Collecting, importing and merging add a partition of at most a few hundred records at a time. Hundreds of small
partitions compress poorly: zstd finds most of its repeats in the TVMScript of one task's programs, which a small
partition holds few of. The bundled dataset's 370 record partitions held 59.9 MB; sorted by task in partitions of
10,000 records the same rows take 38.2 MB (measured 2026-12-01; the data README's compaction entry).

`compact(ds)` rewrites each table (records, tasks, networks) sorted by its key and carries the feature caches that
are kept per records partition (`DIR/features/<tag>/<partition name>`, see `perfcast.features.cache`) over to the
new partitions, so no feature is recomputed; caches keyed otherwise (the assembly features, by record id) are left
alone. The tables are read whole, so it needs their uncompressed size in memory (3.8 GB for the bundled dataset's
160,000 records, mostly their TVMScript). Rows are neither added nor dropped (the new tables hold exactly the old
rows, checked before anything old is removed); their order in the files changes, which nothing reads
(`records_frame` orders records by `RECORD_ORDER` whatever partitions hold them).

Crash safety: the new partitions and cache files are first written under `DIR/.compact/`; the manifest
`DIR/.compact.json` (which staged files move where, which old files go) is the commit point. Applying it moves the
staged files in and only then removes the old ones; a kill during that is finished by the next `Dataset(DIR)` open
(`finish_interrupted`), which applies the manifest again. A kill before the manifest exists leaves the old
partitions untouched, and the next open removes the half-written staging directory.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .. import paths
from ..errors import PerfcastError
from .schema import RECORD_ORDER
from .store import write_durably

ROWS_PER_PART = 10_000  # rows per compacted partition (partition size barely changes the bytes; see the docstring)
SORT_KEYS = {  # each table's sort order: a task's rows together
    "records": list(RECORD_ORDER),
    "tasks": ["workload_key"],
    "networks": ["network", "batch_size", "workload_key"],
}
ID_COLUMN = {"records": "record_id", "tasks": "workload_key", "networks": None}


def _apply(root: Path) -> None:
    """Carry out the manifest of `root` (idempotent: a move already made or a file already gone is skipped)."""
    manifest = paths.compact_manifest(root)
    plan = json.loads(manifest.read_text())
    for src, dst in plan["moves"]:
        if (root / src).exists():
            os.replace(root / src, root / dst)
    for old in plan["removes"]:
        (root / old).unlink(missing_ok=True)
    shutil.rmtree(paths.compact_staging_dir(root), ignore_errors=True)
    manifest.unlink()


def finish_interrupted(root: Path) -> bool:
    """Finish a compaction a kill interrupted after its commit point, or drop one interrupted before it; returns
    whether there was one. Called by every `Dataset(DIR)` open."""
    root = Path(root)
    if paths.compact_manifest(root).exists():
        _apply(root)
        return True
    if paths.compact_staging_dir(root).exists():
        shutil.rmtree(paths.compact_staging_dir(root))
        return True
    return False


def _cache_dirs(root: Path, old_names: set[str]) -> list[Path]:
    """Feature-cache directories holding a file per records partition (named after one of `old_names`)."""
    fdir = paths.features_dir(root)
    return sorted(d for d in fdir.iterdir() if d.is_dir() and any(f.name in old_names for f in d.iterdir())) \
        if fdir.exists() else []


def compact(ds, rows_per_part: int = ROWS_PER_PART, progress: bool = True) -> dict:
    """Rewrite `ds`'s partitions sorted by task, `rows_per_part` rows each (see the module docstring); returns, per
    table, partitions and bytes before and after, and the feature-cache files carried over."""
    if rows_per_part < 1:
        raise PerfcastError(f"--rows-per-part must be at least 1, got {rows_per_part}; the default is {ROWS_PER_PART}")
    root = Path(ds.root)
    if not all(os.access(d, os.W_OK) for d in [root] + [root / k for k in SORT_KEYS if (root / k).exists()]):
        raise PerfcastError(f"{str(root)!r} is not writable; copy it (cp -r {root} DIR) and compact the copy")
    journals = ds._journals()
    if journals:
        raise PerfcastError(f"{str(root)!r} has {len(journals)} journal file(s) of records not yet in a partition "
                            "(a collection is running or was killed); let it finish, or rerun the killed `perfcast "
                            "collect ... --out DIR` (it first moves its journal into partitions), then compact")
    t0 = time.perf_counter()
    staging = paths.compact_staging_dir(root)
    shutil.rmtree(staging, ignore_errors=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    moves, removes, report = [], [], {"tables": {}, "feature_cache_files": 0}
    from rich.progress import Progress

    with Progress(disable=not progress, transient=True) as bar:
        for kind, keys in SORT_KEYS.items():
            old = ds._parts(kind)
            if not old:
                continue
            table = ds.read(kind)  # every schema version upgraded to this one
            table = table.sort_by([(k, "ascending") for k in keys])
            new = []
            job = bar.add_task(f"compacting {kind}", total=table.num_rows)
            for i in range(0, table.num_rows, rows_per_part):
                name = f"part-{stamp}-compact-{i // rows_per_part:04d}-{uuid.uuid4().hex[:8]}.parquet"
                write_durably(table.slice(i, rows_per_part), staging / kind / name)
                new.append(name)
                bar.advance(job, min(rows_per_part, table.num_rows - i))
            # the staged files hold exactly the old rows (read back from disk: their count, and their ids)
            col = ID_COLUMN[kind]
            n_back = sum(pq.ParquetFile(staging / kind / n).metadata.num_rows for n in new)
            ids = [pq.read_table(staging / kind / n, columns=[col]).column(0).to_pylist() for n in new] if col else []
            if n_back != table.num_rows or (col and sorted(i for part in ids for i in part)
                                            != sorted(table.column(col).to_pylist())):
                shutil.rmtree(staging)
                raise PerfcastError(f"compacting {kind} of {str(root)!r}: the new partitions do not hold the old "
                                    f"rows ({n_back} for {table.num_rows}); nothing was changed (report this as a bug)")
            table = None  # freed before the caches are read
            moves += [[f"{paths.COMPACT}/{kind}/{n}", f"{kind}/{n}"] for n in new]
            removes += [f"{kind}/{p.name}" for p in old]
            report["tables"][kind] = {"partitions_before": len(old), "partitions_after": len(new),
                                      "bytes_before": sum(p.stat().st_size for p in old),
                                      "bytes_after": sum((staging / kind / n).stat().st_size for n in new)}
            if kind == "records":
                moves_c, removes_c = _carry_caches(root, {p.name for p in old}, dict(zip(new, ids)), staging)
                moves += moves_c
                removes += removes_c
                report["feature_cache_files"] = len(moves_c)
    manifest = paths.compact_manifest(root)
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text(json.dumps({"moves": moves, "removes": removes}, indent=0))
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, manifest)  # the commit point
    _apply(root)
    ds._upgrade_marker()
    report["seconds"] = time.perf_counter() - t0
    return report


def _carry_caches(root: Path, old_names: set[str], new_ids: dict[str, list[str]],
                  staging: Path) -> tuple[list, list]:
    """Stage, for every per-partition feature cache, one file per new partition with the cached rows of its records
    (in the partition's order); returns the (moves, removes) this adds to the manifest."""
    moves, removes = [], []
    for d in _cache_dirs(root, old_names):
        files = [d / n for n in sorted(old_names) if (d / n).exists()]
        cached = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
        rel = d.relative_to(root)
        row_of = {rid: i for i, rid in enumerate(cached.column("record_id").to_pylist())}
        for name, ids in new_ids.items():
            rows = [row_of[i] for i in ids if i in row_of]
            if rows:
                write_durably(cached.take(rows), staging / rel / name)
                moves.append([f"{paths.COMPACT}/{rel}/{name}", f"{rel}/{name}"])
        removes += [f"{rel}/{f.name}" for f in files]
    return moves, removes
