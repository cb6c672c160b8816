"""The on-disk perfcast dataset: append-only Parquet partitions plus a crash-safe journal.

Records are first appended to a JSON-lines journal (flushed and fsync'd per record), then moved into a new
Parquet partition in batches. A run that is killed loses nothing measured: the next open of the dataset
moves the journal into a partition, dropping rows whose record_id is already stored.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__, paths
from ..errors import PerfcastError
from .schema import (
    RECORD_ORDER,
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    MeasureRecord,
    NetworkTaskRecord,
    TaskRecord,
    arrow_schema,
    from_json_line,
    to_json_line,
    to_table,
    upgrade_records,
)

_KINDS = {"records": MeasureRecord, "tasks": TaskRecord, "networks": NetworkTaskRecord}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(table: pa.Table, path: Path) -> None:
    """Write a Parquet file (zstd 9) that is whole or absent after a kill: a temporary file, fsync'd, renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd", compression_level=9)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


PART_RECORDS = 500  # records per partition written by a merge (the collector flushes its journal as often)


class Dataset:
    """A perfcast dataset directory (see `perfcast.paths` for the layout)."""

    def __init__(self, root: str | os.PathLike, *, create: bool = False):
        self.root = Path(root)
        m = paths.marker(self.root)
        if not m.exists():
            if not create:
                if not self.root.exists():
                    raise PerfcastError(f"dataset directory {str(self.root)!r} does not exist; "
                                        "collect one with `perfcast collect --out DIR` or omit DIR for the bundled one")
                raise PerfcastError(f"{str(self.root)!r} is not a perfcast dataset (no {paths.MARKER}); "
                                    "point to a directory written by `perfcast collect` or `perfcast data import`")
            self.root.mkdir(parents=True, exist_ok=True)
            m.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "created": _now(),
                                     "perfcast_version": __version__}, indent=1))
        meta = json.loads(m.read_text())
        version = meta.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise PerfcastError(f"dataset {str(self.root)!r} has schema version {version}, this perfcast "
                                f"({__version__}) reads versions {', '.join(map(str, READABLE_VERSIONS))}; "
                                "re-collect it or use the perfcast release that wrote it")
        self.meta = meta
        from .compact import finish_interrupted

        finish_interrupted(self.root)  # a compaction a kill interrupted (`perfcast.data.compact`)

    # ---- reading ---------------------------------------------------------------------------------------------
    def _parts(self, kind: str) -> list[Path]:
        d = self.root / kind
        return sorted(d.glob("part-*.parquet")) if d.exists() else []

    def read(self, kind: str = "records", columns: list[str] | None = None) -> pa.Table:
        """All partitions of one table ('records', 'tasks' or 'networks'), concatenated."""
        cls = _KINDS[kind]
        schema = arrow_schema(cls)
        tables = []
        for p in self._parts(kind):
            pf = pq.ParquetFile(p)
            v = (pf.schema_arrow.metadata or {}).get(b"perfcast_schema_version", b"?").decode()
            if v not in {str(x) for x in READABLE_VERSIONS}:
                raise PerfcastError(f"partition {str(p)!r} has schema version {v}, this perfcast reads "
                                    f"{', '.join(map(str, READABLE_VERSIONS))}; re-collect it or use the perfcast "
                                    "release that wrote it")
            t = pf.read(columns=[c for c in columns if c in pf.schema_arrow.names] if columns is not None else None)
            if kind == "records" and int(v) < SCHEMA_VERSION:
                t = upgrade_records(t, int(v))
            want = pa.schema([schema.field(c) for c in columns], metadata=schema.metadata) if columns is not None \
                else schema
            tables.append(t.select(want.names).cast(want))  # one column order and type, whatever version wrote it
        if not tables:
            return schema.empty_table() if columns is None else schema.empty_table().select(columns)
        return pa.concat_tables(tables)

    def record_ids(self) -> set[str]:
        ids = set(self.read("records", ["record_id"]).column("record_id").to_pylist())
        for jp in self._journals():
            for rec in _read_journal(jp):
                ids.add(rec.record_id)
        return ids

    # ---- writing ---------------------------------------------------------------------------------------------
    def _write_part(self, kind: str, rows: list, tag: str = "") -> Path | None:
        if not rows:
            return None
        self._upgrade_marker()
        d = self.root / kind
        d.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
        name = f"part-{stamp}-{tag + '-' if tag else ''}{uuid.uuid4().hex[:8]}.parquet"
        write_durably(to_table(rows, _KINDS[kind]), d / name)
        return d / name

    def _upgrade_marker(self) -> None:
        """A dataset of an older schema version that gets a partition of this version says so in its marker."""
        if self.meta.get("schema_version") != SCHEMA_VERSION:
            m = paths.marker(self.root)
            self.meta = {**self.meta, "schema_version": SCHEMA_VERSION,
                         "upgraded": f"{self.meta.get('schema_version')} -> {SCHEMA_VERSION} on {_now()}"}
            tmp = m.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.meta, indent=1))
            os.replace(tmp, m)

    def add_tasks(self, tasks: list[TaskRecord]) -> int:
        """Add tasks not stored yet; returns how many were new."""
        have = set(self.read("tasks", ["workload_key"]).column("workload_key").to_pylist())
        new = {t.workload_key: t for t in tasks if t.workload_key not in have}
        self._write_part("tasks", list(new.values()))
        return len(new)

    def add_network_tasks(self, rows: list[NetworkTaskRecord]) -> int:
        t = self.read("networks", ["network", "batch_size", "workload_key"])
        have = set(zip(*(t.column(c).to_pylist() for c in ("network", "batch_size", "workload_key"))))
        new = {(r.network, r.batch_size, r.workload_key): r for r in rows
               if (r.network, r.batch_size, r.workload_key) not in have}
        self._write_part("networks", list(new.values()))
        return len(new)

    def add_records(self, records: list[MeasureRecord], tag: str = "") -> int:
        """Write records whose record_id is not stored yet as a new partition; returns how many were written."""
        have = set(self.read("records", ["record_id"]).column("record_id").to_pylist())
        new, seen = [], set()
        for r in records:
            if r.record_id not in have and r.record_id not in seen:
                new.append(r)
                seen.add(r.record_id)
        self._write_part("records", new, tag)
        return len(new)

    # ---- journal ---------------------------------------------------------------------------------------------
    def _journals(self) -> list[Path]:
        d = paths.journal_dir(self.root)
        return sorted(d.glob("*.jsonl")) if d.exists() else []

    def journal(self) -> "Journal":
        return Journal(self)

    def recover(self) -> int:
        """Move every journal left by an interrupted run into a partition; returns records recovered."""
        n = 0
        for jp in self._journals():
            n += self.add_records(_read_journal(jp), tag="recovered")
            jp.unlink()
        return n

    def merge_from(self, other: "Dataset") -> dict:
        """Add another dataset's records (its journals' too), tasks, network rows and collection-run files that this
        one lacks (by record id, key and file name); returns how many records, tasks and network rows were new.
        `other` is only read; its feature cache is not copied."""
        from .schema import MeasureRecord, NetworkTaskRecord, TaskRecord, from_row

        have = self.record_ids()
        recs = [from_row(MeasureRecord, r) for r in other.read("records").to_pylist() if r["record_id"] not in have]
        for jp in other._journals():  # a running (or killed) collection's journal: read, never moved
            recs += [r for r in _read_journal(jp) if r.record_id not in have]
        # partitions of at most PART_RECORDS records, grouped by task: the feature cache is per partition, so a
        # reader of a few tasks (a test, one network) computes a few small partitions, not the whole merge
        recs.sort(key=lambda r: tuple(getattr(r, k) for k in RECORD_ORDER))
        n = sum(self.add_records(recs[i:i + PART_RECORDS], tag="merged") for i in range(0, len(recs), PART_RECORDS))
        # the settings and machine of every collection run behind the merged records
        src, dst = paths.collection_dir(other.root), paths.collection_dir(self.root)
        for f in sorted(src.glob("*.json")) if src.exists() else []:
            if not (dst / f.name).exists():
                dst.mkdir(parents=True, exist_ok=True)
                (dst / f.name).write_bytes(f.read_bytes())
        return {"records": n,
                "tasks": self.add_tasks([from_row(TaskRecord, r) for r in other.read("tasks").to_pylist()]),
                "networks": self.add_network_tasks([from_row(NetworkTaskRecord, r)
                                                    for r in other.read("networks").to_pylist()])}

    def write_collection_info(self, info: dict, path: Path | None = None) -> Path:
        """Write (or, given `path`, update) the JSON describing one collection run: machine, settings, counts."""
        d = paths.collection_dir(self.root)
        d.mkdir(parents=True, exist_ok=True)
        p = path or d / f"run-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}.json"
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(info, indent=1, sort_keys=True, default=str))
        os.replace(tmp, p)
        return p


def _read_journal(path: Path) -> list[MeasureRecord]:
    out = []
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(from_json_line(MeasureRecord, line))
            except (json.JSONDecodeError, KeyError, TypeError):
                break  # a line torn by a kill: everything before it is intact
    return out


class Journal:
    """Append-only, fsync'd JSON lines; `flush_to_parquet` moves them into a partition."""

    def __init__(self, ds: Dataset):
        self.ds = ds
        d = paths.journal_dir(ds.root)
        d.mkdir(parents=True, exist_ok=True)
        self.path = d / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        self._fh = open(self.path, "a")
        self.pending: list[MeasureRecord] = []

    def append(self, rec: MeasureRecord) -> None:
        self._fh.write(to_json_line(rec) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.pending.append(rec)

    def flush_to_parquet(self) -> int:
        n = self.ds.add_records(self.pending)
        # the partition is durable: start a fresh journal, then drop the old one
        self._fh.close()
        old = self.path
        self.path = old.with_name(f"{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl")
        self._fh = open(self.path, "a")
        old.unlink()
        self.pending = []
        return n

    def close(self) -> int:
        n = self.flush_to_parquet() if self.pending else 0
        self._fh.close()
        if self.path.exists():
            self.path.unlink()
        return n
