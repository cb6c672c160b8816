"""`perfcast data import`: a TVM meta-schedule JSON database -> perfcast records.

A meta-schedule JSON database is a directory with `database_workload.json` (one task module per line) and
`database_tuning_record.json` (one trace + measured run_secs per line), as written by
`ms.tune_tir(..., database="json")` or `ms.database.JSONDatabase(work_dir=...)`. Every tuning record becomes one
MeasureRecord (schedule_kind "imported"): the trace applied to its workload gives the program, run_secs give the
latencies. Records are keyed like collected ones, so importing the same database twice adds nothing.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import statistics
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from .. import __version__
from ..errors import PerfcastError
from .schema import MeasureRecord, TaskRecord
from .store import Dataset

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
NO_RUN_SECS = "no valid run_secs in the database"
_INVALID_S = 1e9  # meta-schedule writes 1e10 s for programs that failed to build or run


class DbRecord(NamedTuple):
    """One tuning record of a meta-schedule database, in `get_all_tuning_records()` order."""

    workload_mod: object  # tvm.IRModule of the unscheduled task
    trace: object  # tvm.s_tir.schedule.Trace
    run_secs: tuple[float, ...] | None
    target: object  # tvm.target.Target or None

    @property
    def measured(self) -> bool:
        """The record's program built and ran: every run_secs finite (meta-schedule writes 1e10 s for failures)."""
        secs = self.run_secs or ()
        return bool(secs) and all(math.isfinite(s) and 0 <= s < _INVALID_S for s in secs)

    @property
    def measured_s(self) -> float:
        """The median of the record's run_secs (meta-schedule's repeats) in seconds; a record that is not
        `measured` is an error."""
        if not self.measured:
            raise PerfcastError(f"tuning record has no valid run_secs ({self.run_secs!r}); check `measured` first")
        return float(statistics.median(self.run_secs))

    def program(self):
        """The IRModule of the record's program: its trace replayed on its workload, postprocessors included."""
        from tvm.s_tir import Schedule

        sch = Schedule(self.workload_mod)
        self.trace.apply_to_schedule(sch, remove_postproc=False)
        return sch.mod


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # TVM errors start with a traceback; the message is the last non-empty line
    return (lines[-1] if lines else type(e).__name__)[:300]


def _check_db_dir(db_dir: str) -> tuple[Path, Path]:
    p = Path(db_dir)
    expected = (f"expected a meta-schedule JSON database directory with {WORKLOAD_FILE} and {RECORD_FILE} "
                "(as written by ms.tune_tir(..., database=\"json\"))")
    if not p.is_dir():
        raise PerfcastError(f"database directory {str(p)!r} does not exist; {expected}")
    wl, tr = p / WORKLOAD_FILE, p / RECORD_FILE
    missing = [f.name for f in (wl, tr) if not f.is_file()]
    if missing:
        raise PerfcastError(f"{str(p)!r} has no {' or '.join(missing)}; {expected}")
    return wl, tr


def _run_secs(rec) -> tuple[float, ...] | None:
    secs = rec.run_secs
    if secs is None:
        return None
    return tuple(float(getattr(x, "value", x)) for x in secs)


def database_records(db_dir: str) -> list[DbRecord]:
    """(workload_mod, trace, run_secs, target) of every tuning record, in `get_all_tuning_records()` order."""
    wl, tr = _check_db_dir(db_dir)
    from tvm.s_tir import meta_schedule as ms

    from .._tvm.util import load_x86_intrinsics

    load_x86_intrinsics()  # traces may tensorize with x86 intrinsics
    try:
        db = ms.database.JSONDatabase(path_workload=str(wl), path_tuning_record=str(tr), allow_missing=False)
        recs = db.get_all_tuning_records()
    except Exception as e:  # noqa: BLE001 - TVM raises TVMError/ValueError/... for a corrupt database
        raise PerfcastError(f"cannot read the meta-schedule database in {str(db_dir)!r} ({_first_line(e)}); "
                            f"check {WORKLOAD_FILE} and {RECORD_FILE}") from None
    return [DbRecord(r.workload.mod, r.trace, _run_secs(r), r.target) for r in recs]


def committed_run_secs(db_dir: str) -> list[list[float]]:
    """Each tuning record's run times (s) in the order the search committed them: the record file's line order
    (`get_all_tuning_records()` sorts by time). A failed run is stored as 1e10 s; an unmeasured record has none."""
    _, tr = _check_db_dir(db_dir)
    with open(tr) as f:
        return [[float(s) for s in json.loads(line)[1][1]] for line in f if line.strip()]


def _task_name(func, key: str) -> str:
    """The function's symbol when it has a real one, else the names of its blocks (te.compute stage names)."""
    sym = str((func.attrs or {}).get("global_symbol", "") or "")
    if sym and sym != "main":
        return sym
    import tvm
    from tvm.s_tir import Schedule

    try:
        sch = Schedule(tvm.IRModule({"main": func}))
        names = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
    except Exception:  # noqa: BLE001 - best effort (no root block, ...): fall back to the key
        names = []
    names = list(dict.fromkeys(str(n) for n in names))
    return "_".join(names)[:80] if names else f"task_{key[:8]}"


def _cv(xs: list[float]) -> float:  # as perfcast.collect.measure: sample std / mean
    if len(xs) < 2:
        return 0.0
    m = statistics.fmean(xs)
    return statistics.stdev(xs) / m if m > 0 else 0.0


def _target_json(target, default: str) -> str:
    if target is None:
        return default
    from .._tvm.util import plain

    try:
        return json.dumps(plain(target.export()), sort_keys=True)
    except Exception:  # noqa: BLE001 - an exotic target that does not export: keep the device's
        return default


def import_database(db_dir: str, out: str, device: str = "local") -> dict:
    """Import every tuning record of a meta-schedule JSON database into the dataset `out` (created if missing).

    Returns counts: imported (new records written), skipped_existing (already in the dataset), duplicates_in_db
    (tuning records giving the same program as an earlier one), by_status (of the imported), tasks (distinct
    workloads in the database), new_tasks.
    """
    import tvm

    from .._tvm.util import main_func, normalize_primfunc, structural_key, trace_to_json
    from ..collect.collector import record_id
    from ..collect.tasks import Task, task_record
    from ..devices import get_device
    from ..devices.base import device_key

    rows = database_records(db_dir)  # checks the directory before the dataset is created
    spec = get_device(device)
    spec_json = spec.to_json()
    dkey = device_key(spec)  # as the collector: `local` of two machines is two devices, so two records
    ds = Dataset(out, create=True)
    have = ds.record_ids()

    tasks: dict[str, TaskRecord] = {}
    keys_of: dict[int, tuple[str, str]] = {}  # id(workload mod) -> (key, name): workloads repeat across records
    records: list[MeasureRecord] = []
    seen: set[str] = set()
    skipped = dup = 0
    now = _now()
    for r in rows:
        wid = id(r.workload_mod)
        if wid not in keys_of:
            try:
                func = normalize_primfunc(main_func(r.workload_mod))
            except ValueError as e:
                raise PerfcastError(f"a workload in {str(db_dir)!r} is not a single-PrimFunc task ({e}); "
                                    "only TIR tuning databases can be imported") from None
            key = structural_key(func)
            name = _task_name(func, key)
            keys_of[wid] = (key, name)
            if key not in tasks:
                tasks[key] = task_record(Task(key, name, tvm.IRModule({"main": func}), 1))
        key, name = keys_of[wid]
        trace_json = trace_to_json(r.trace)
        try:
            mod = r.program()
            program_hash, tir_script, apply_error = structural_key(main_func(mod)), mod.script(), ""
        except Exception as e:  # noqa: BLE001 - a trace this TVM cannot replay: keep it, marked as failed
            import hashlib

            program_hash = "trace-" + hashlib.sha1(trace_json.encode()).hexdigest()[:16]
            tir_script, apply_error = "", f"the trace does not apply to its workload: {_first_line(e)}"
        rid = record_id(key, dkey, program_hash)
        if rid in have:
            skipped += 1
            continue
        if rid in seen:
            dup += 1
            continue
        seen.add(rid)
        secs = list(r.run_secs or ())
        if apply_error:
            status, error = "build_error", apply_error
        elif r.measured:
            status, error = "ok", ""
        else:
            status, error = "run_error", NO_RUN_SECS
        ok = status == "ok"
        nan = math.nan
        records.append(MeasureRecord(
            record_id=rid, workload_key=key, task_name=name, program_hash=program_hash, schedule_kind="imported",
            trace_json=trace_json, tir_script=tir_script, device_id=spec.device_id, device_spec_json=spec_json,
            target_json=_target_json(r.target, spec.target_json), task_weight=1, networks=(), status=status,
            error=error, latencies_s=tuple(secs) if ok else (),
            latency_s=r.measured_s if ok else nan, latency_min_s=min(secs) if ok else nan,
            latency_max_s=max(secs) if ok else nan, latency_cv=_cv(secs) if ok else nan, number=0,
            remeasured=False, build_s=nan, measure_s=nan, tvm_version=tvm.__version__,
            perfcast_version=__version__, timestamp=now, protocol=0, round_latencies_s=(),
        ))
    new_tasks = ds.add_tasks(list(tasks.values()))
    imported = ds.add_records(records, tag="imported")
    return {"out": str(out), "database": str(db_dir), "device_id": spec.device_id, "tuning_records": len(rows),
            "imported": imported, "skipped_existing": skipped, "duplicates_in_db": dup,
            "by_status": dict(Counter(rec.status for rec in records)), "tasks": len(tasks), "new_tasks": new_tasks}


__all__ = ["DbRecord", "database_records", "import_database", "WORKLOAD_FILE", "RECORD_FILE"]
