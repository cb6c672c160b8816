"""Records of the perfcast dataset: frozen dataclasses with units in field names, and their Parquet schemas.

Bump SCHEMA_VERSION whenever a field changes meaning or type; readers refuse other versions with a clear error.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = 1
STATUSES = ("ok", "build_error", "run_error", "timeout")
SCHEDULE_KINDS = ("default", "random", "tuned", "imported")


@dataclass(frozen=True)
class MeasureRecord:
    """One program (a task under one schedule) measured on one device."""

    record_id: str  # sha1(workload_key, device_id, program_hash): the dedup key
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


def to_table(rows: list, cls) -> pa.Table:
    schema = arrow_schema(cls)
    cols = {f.name: [getattr(r, f.name) for r in rows] for f in dataclasses.fields(cls)}
    for name, values in cols.items():
        if values and isinstance(values[0], tuple):
            cols[name] = [list(v) for v in values]
    return pa.table(cols, schema=schema)


def from_row(cls, row: dict):
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
    "STATUSES",
    "SCHEDULE_KINDS",
    "MeasureRecord",
    "TaskRecord",
    "NetworkTaskRecord",
    "arrow_schema",
    "to_table",
    "from_row",
    "to_json_line",
    "from_json_line",
]
