"""A dataset's records as one pandas DataFrame, the table models train and evaluate on."""

from __future__ import annotations

import pandas as pd

from ..errors import PerfcastError
from .schema import RECORD_ORDER

FRAME_COLUMNS = ["record_id", "workload_key", "task_name", "program_hash", "schedule_kind", "device_id",
                 "device_spec_json", "target_json", "latency_s", "latency_cv", "build_s", "measure_s", "protocol"]


def records_frame(ds, status: str = "ok", device: str | None = None, min_protocol: int = 0) -> pd.DataFrame:
    """Records of `ds` with `status` (and `device`), one row each, with the task's networks and weight.

    `device_key` names the measured device: the device id plus, for `local`, the machine's CPU
    (`perfcast.devices.base.device_key`); `device` filters on either.
    `networks` (tuple of names) and `task_weight` (occurrences summed over those networks) come from the dataset's
    network table, so a task measured before a later network also used it still counts for that network.
    Rows come in `RECORD_ORDER` (task, device, record id), whatever partitions hold them, so a seeded split, draw or
    training run sees the same order before and after a merge or a compaction.
    A program measured on one device under several protocols (`perfcast.data.schema.PROTOCOLS`: re-measured after
    the timing was fixed) appears once, with its highest-protocol record; `min_protocol` drops records of lower
    protocols altogether.
    """
    df = ds.read("records", FRAME_COLUMNS + ["status", "networks", "task_weight"]).to_pandas()
    df = df[df["status"] == status].drop(columns=["status"])
    from ..devices.base import device_key_of_json

    keys = {j: device_key_of_json(j) for j in df["device_spec_json"].unique()}
    df["device_key"] = df["device_spec_json"].map(keys)  # `local` of two machines is two devices
    df = latest_protocol(df[df["protocol"] >= min_protocol])
    if device is not None:
        known = sorted(set(df["device_id"]) | set(df["device_key"]))
        df = df[(df["device_id"] == device) | (df["device_key"] == device)]
        if df.empty:
            raise PerfcastError(f"no {status} record of device {device!r} in {str(ds.root)!r}; "
                                f"its devices: {', '.join(known) or 'none'} (or measure it: perfcast collect "
                                f"--device {device.split('@')[0]} --out DIR)")
    nets = ds.read("networks", ["network", "workload_key", "weight"]).to_pandas()
    if not nets.empty:
        by_task = nets.groupby("workload_key").agg(nets_=("network", lambda s: tuple(sorted(set(s)))),
                                                   weight_=("weight", "sum"))
        df = df.join(by_task, on="workload_key")
        has = df["nets_"].notna()
        df.loc[has, "networks"] = df.loc[has, "nets_"]
        df.loc[has, "task_weight"] = df.loc[has, "weight_"]
        df = df.drop(columns=["nets_", "weight_"])
    df["networks"] = df["networks"].map(lambda x: tuple(x) if x is not None else ())
    df["task_weight"] = df["task_weight"].fillna(1).astype(int)
    return df.sort_values(list(RECORD_ORDER), kind="stable").reset_index(drop=True)


def latest_protocol(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of `df` (with device_key) minus those superseded: per (task, device, program) only the rows of the
    highest measurement protocol (in their original order)."""
    if df.empty or df["protocol"].nunique() == 1:
        return df
    best = df.groupby(["workload_key", "device_key", "program_hash"])["protocol"].transform("max")
    return df[df["protocol"] == best]


def parse_utc(when: str) -> pd.Timestamp:
    """`when` (ISO 8601; UTC unless it names its zone) as a UTC timestamp; anything else is an error naming it."""
    bad = f"--measured-before {when!r} is not a time; give ISO 8601 UTC, e.g. 2026-11-28T14:50"
    try:
        t = pd.Timestamp(when)
    except (ValueError, TypeError) as e:
        raise PerfcastError(bad) from e
    if pd.isna(t):
        raise PerfcastError(bad)
    return t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")


def record_times(ds, df: pd.DataFrame) -> pd.Series:
    """(n,) UTC measurement time of each record of `df` (a frame of `ds`), aligned with its rows."""
    stamps = ds.read("records", ["record_id", "timestamp"]).to_pandas().drop_duplicates("record_id")
    t = df["record_id"].map(stamps.set_index("record_id")["timestamp"])
    return pd.to_datetime(t, utc=True, format="ISO8601")


def measured_before(ds, df: pd.DataFrame, when: str):
    """(n,) bool: which rows of `df` (a frame of `ds`) were measured before `when` (ISO 8601, UTC unless it says
    otherwise), e.g. to retrain on exactly a model's data (its `info.measured_through` is its records' latest
    time); none is an error."""
    keep = (record_times(ds, df) < parse_utc(when)).to_numpy()
    if not keep.any():
        raise PerfcastError(f"no record of {str(ds.root)!r} was measured before {when}; pick a later time")
    return keep
