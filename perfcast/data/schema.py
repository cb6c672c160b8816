"""Records of the perfcast dataset: frozen dataclasses with units in field names, and their Parquet schemas.

Bump SCHEMA_VERSION whenever a field changes meaning or type; readers refuse versions they cannot read with a clear
error. Version 2 added `MeasureRecord.protocol` and `round_latencies_s`; a version-1 partition is read as records of
protocol 1 (see `PROTOCOLS`) with no rounds (`upgrade_records`). Version 3 added `round_sentinel_cpu_s` and
`round_sentinel_cache_s` (the host gate's sentinel around each round); older records read with none.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)  # partitions and datasets of these versions are read (older ones upgraded in memory)
# How a record's latency was measured; a dataset may hold one program measured under several protocols, and
# readers use the highest (`perfcast.data.frame.records_frame`).
PROTOCOLS = {
    0: "measured by another tool (an imported meta-schedule tuning log: its runner's run_secs)",
    1: "one timing round: the RPC runner; and perfcast's local worker before 2026-11-25 15:00 UTC, whose launching "
       "thread could share a core with TVM's pinned pool thread (parallel programs on 2 threads were then timed up "
       "to 2x slow)",
    2: "the launching thread kept off the pool threads' cores; the lowest of `rounds` round medians, rounds of one "
       "program seconds apart (other programs are timed in between); since 2026-12-01 a round is timed again while "
       "the host gate's sentinel (its CPU part) runs over 1.5x its usual time (other tenants slowing the host: "
       "`perfcast.collect.sentinel`)",
}
MEASURE_PROTOCOL = 2  # what `perfcast collect` does now
# the order of a dataset's records wherever order matters (the frame models train on, merged and compacted
# partitions): a task's records together, and a function of the records, not of how they are stored
RECORD_ORDER = ("workload_key", "device_id", "record_id")
STATUSES = ("ok", "build_error", "run_error", "timeout")
SCHEDULE_KINDS = ("default", "random", "tuned", "imported")


@dataclass(frozen=True)
class MeasureRecord:
    """One program (a task under one schedule) measured on one device."""

    record_id: str  # sha1(workload_key, device key, program_hash[, protocol >= 2]): the dedup key
    workload_key: str  # structural hash of the unscheduled task PrimFunc
    task_name: str
    program_hash: str  # structural hash of the scheduled PrimFunc
    schedule_kind: str  # one of SCHEDULE_KINDS
    trace_json: str  # meta-schedule trace (JSON) that turns the task into this program; "" for default
    tir_script: str  # the scheduled program as TVMScript (round-trips with tvm.script.from_source)
    device_id: str  # e.g. "local", "local:mcpu=haswell,threads=1"
    device_spec_json: str  # the DeviceSpec at measurement time, as JSON
    target_json: str  # the TVM target (dict form) as JSON
    task_weight: int  # occurrences of the task in `networks`, summed
    networks: tuple[str, ...]
    status: str  # one of STATUSES
    error: str
    latencies_s: tuple[float, ...]  # per-repeat mean latency, seconds (each repeat averages `number` runs)
    latency_s: float  # median of latencies_s (NaN unless status == "ok")
    latency_min_s: float
    latency_max_s: float
    latency_cv: float  # std / mean of latencies_s
    number: int  # runs averaged per repeat
    remeasured: bool  # the first measurement's spread was too high and it was measured again
    build_s: float
    measure_s: float  # wall time spent measuring (burn-in included)
    tvm_version: str
    perfcast_version: str
    timestamp: str  # ISO 8601, UTC
    protocol: int  # how the latency was measured: a key of PROTOCOLS
    round_latencies_s: tuple[float, ...]  # protocol 2: the median of each timing round (latency_s is the lowest)
    # the host gate's sentinel (`perfcast.collect.sentinel`) around each kept round: the slower of its readings
    # before and after, per part, in seconds (empty without the gate, and in records older than schema version 3).
    # A slow cache state lasts minutes, longer than the gate can wait: these say which labels were timed in one.
    round_sentinel_cpu_s: tuple[float, ...] = ()
    round_sentinel_cache_s: tuple[float, ...] = ()
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True)
class TaskRecord:
    """A task: one fused PrimFunc TVM would compile, deduplicated by its structural workload key."""

    workload_key: str
    task_name: str
    tir_script: str  # the unscheduled PrimFunc as TVMScript
    arg_shapes_json: str  # [[shape, dtype], ...] of the PrimFunc's arguments
    flops: float  # floating-point operations of one call (TVM's estimate)
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True)
class NetworkTaskRecord:
    """network -> task mapping: the task occurs `weight` times in the network at this batch size."""

    network: str
    batch_size: int
    source: str  # "zoo", an ONNX path or file.py:factory
    workload_key: str
    task_name: str
    weight: int
    schema_version: int = SCHEMA_VERSION


def _arrow_type(tp) -> pa.DataType:
    return {
        "str": pa.string(),
        "int": pa.int64(),
        "float": pa.float64(),
        "bool": pa.bool_(),
        "tuple[str, ...]": pa.list_(pa.string()),
        "tuple[float, ...]": pa.list_(pa.float64()),
    }[tp if isinstance(tp, str) else tp.__name__]


def arrow_schema(cls) -> pa.Schema:
    fields = [pa.field(f.name, _arrow_type(f.type), nullable=False) for f in dataclasses.fields(cls)]
    return pa.schema(fields, metadata={b"perfcast_schema_version": str(SCHEMA_VERSION).encode()})


_ADDED = {  # field -> (the schema version that added it, its value in older records)
    "protocol": (2, 1), "round_latencies_s": (2, []), "round_sentinel_cpu_s": (3, []),
    "round_sentinel_cache_s": (3, []),
}


def upgrade_records(table: pa.Table, version: int) -> pa.Table:
    """A records table of an older schema version with the current one's columns (v1: protocol 1, no rounds; v1
    and v2: no sentinel readings); the reader selects the columns it asked for afterwards."""
    if version >= SCHEMA_VERSION:
        return table
    n, schema = table.num_rows, arrow_schema(MeasureRecord)
    for name, (added, value) in _ADDED.items():
        if version < added and name not in table.column_names:
            table = table.append_column(schema.field(name), pa.array([value] * n, schema.field(name).type))
    if "schema_version" in table.column_names:
        i = table.column_names.index("schema_version")
        table = table.set_column(i, table.schema.field(i), pa.array([SCHEMA_VERSION] * n, pa.int64()))
    return table


def to_table(rows: list, cls) -> pa.Table:
    schema = arrow_schema(cls)
    cols = {f.name: [getattr(r, f.name) for r in rows] for f in dataclasses.fields(cls)}
    for name, values in cols.items():
        if values and isinstance(values[0], tuple):
            cols[name] = [list(v) for v in values]
    return pa.table(cols, schema=schema)


def from_row(cls, row: dict):
    if cls is MeasureRecord and row.get("schema_version", SCHEMA_VERSION) < SCHEMA_VERSION:  # an older journal line
        v = row["schema_version"]
        row = {**{k: value for k, (added, value) in _ADDED.items() if v < added}, **row,
               "schema_version": SCHEMA_VERSION}
    kwargs = {}
    for f in dataclasses.fields(cls):
        v = row[f.name]
        kwargs[f.name] = tuple(v) if isinstance(v, list) else v
    return cls(**kwargs)


def to_json_line(rec) -> str:
    return json.dumps(dataclasses.asdict(rec), allow_nan=True)


def from_json_line(cls, line: str):
    return from_row(cls, json.loads(line))


__all__ = [
    "SCHEMA_VERSION",
    "READABLE_VERSIONS",
    "PROTOCOLS",
    "MEASURE_PROTOCOL",
    "STATUSES",
    "SCHEDULE_KINDS",
    "MeasureRecord",
    "TaskRecord",
    "NetworkTaskRecord",
    "arrow_schema",
    "upgrade_records",
    "to_table",
    "from_row",
    "to_json_line",
    "from_json_line",
]
