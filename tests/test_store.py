"""The dataset store: schema round trip, partitions, journal recovery, errors."""

import json
import math

import pyarrow.parquet as pq
import pytest

from perfcast.data.schema import SCHEMA_VERSION, MeasureRecord, from_json_line, from_row, to_json_line, to_table
from perfcast.data.store import Dataset
from perfcast.errors import PerfcastError


def _rec(i: int, status: str = "ok") -> MeasureRecord:
    lat = (1e-3 * (i + 1), 1.1e-3 * (i + 1), 0.9e-3 * (i + 1))
    ok = status == "ok"
    return MeasureRecord(
        record_id=f"id{i}", workload_key="k", task_name="t", program_hash=f"h{i}", schedule_kind="random",
        trace_json="[]", tir_script="# tir", device_id="local", device_spec_json="{}", target_json="{}",
        task_weight=2, networks=("a", "b"), status=status, error="" if ok else "boom",
        latencies_s=lat if ok else (), latency_s=sorted(lat)[1] if ok else math.nan,
        latency_min_s=min(lat) if ok else math.nan, latency_max_s=max(lat) if ok else math.nan,
        latency_cv=0.1 if ok else math.nan, number=3, remeasured=False, build_s=0.1, measure_s=0.2,
        tvm_version="0.27", perfcast_version="0.1.0", timestamp="2026-11-22T00:00:00+00:00",
    )


def test_record_round_trips_through_parquet_and_json():
    recs = [_rec(0), _rec(1, "run_error")]
    table = to_table(recs, MeasureRecord)
    assert table.schema.metadata[b"perfcast_schema_version"] == str(SCHEMA_VERSION).encode()
    back = [from_row(MeasureRecord, r) for r in table.to_pylist()]
    assert back[0] == recs[0]
    assert back[1].status == "run_error" and math.isnan(back[1].latency_s)
    assert from_json_line(MeasureRecord, to_json_line(recs[0])) == recs[0]


def test_partitions_are_added_not_rewritten_and_dedup(tmp_path):
    ds = Dataset(tmp_path / "d", create=True)
    assert ds.add_records([_rec(0), _rec(1)]) == 2
    assert ds.add_records([_rec(1), _rec(2)]) == 1  # id1 already stored
    parts = sorted((tmp_path / "d" / "records").glob("part-*.parquet"))
    assert len(parts) == 2
    assert sorted(ds.read("records", ["record_id"]).column("record_id").to_pylist()) == ["id0", "id1", "id2"]


def test_journal_survives_a_kill_and_a_torn_line(tmp_path):
    ds = Dataset(tmp_path / "d", create=True)
    j = ds.journal()
    j.append(_rec(0))
    j.append(_rec(1))
    # simulate a kill mid-write: a torn line after two complete records, journal never flushed
    with open(j.path, "a") as fh:
        fh.write('{"record_id": "id2", "workl')
    ds2 = Dataset(tmp_path / "d")
    assert ds2.record_ids() == {"id0", "id1"}
    assert ds2.recover() == 2
    assert not list((tmp_path / "d" / "journal").glob("*.jsonl"))
    assert ds2.recover() == 0
    assert ds2.read("records").num_rows == 2


def test_flush_then_kill_keeps_one_copy(tmp_path):
    ds = Dataset(tmp_path / "d", create=True)
    j = ds.journal()
    j.append(_rec(0))
    assert j.flush_to_parquet() == 1
    j.append(_rec(1))
    # killed here: a new open recovers id1, and id0 is not written twice
    ds2 = Dataset(tmp_path / "d")
    assert ds2.recover() == 1
    ids = ds2.read("records", ["record_id"]).column("record_id").to_pylist()
    assert sorted(ids) == ["id0", "id1"]


def test_not_a_dataset_and_schema_mismatch(tmp_path):
    with pytest.raises(PerfcastError, match="is not a perfcast dataset"):
        Dataset(tmp_path)
    with pytest.raises(PerfcastError, match="does not exist"):
        Dataset(tmp_path / "missing")
    Dataset(tmp_path / "d", create=True)
    marker = tmp_path / "d" / "perfcast_dataset.json"
    meta = json.loads(marker.read_text())
    meta["schema_version"] = 999
    marker.write_text(json.dumps(meta))
    with pytest.raises(PerfcastError, match="schema version 999.*re-collect"):
        Dataset(tmp_path / "d")


def test_merge_adds_what_is_missing_reads_journals_and_leaves_the_source(tmp_path):
    from perfcast.data.schema import NetworkTaskRecord, TaskRecord

    src = Dataset(tmp_path / "src", create=True)
    src.add_records([_rec(0), _rec(1)])
    src.add_tasks([TaskRecord("k", "t", "# tir", "[]", 10.0)])
    src.add_network_tasks([NetworkTaskRecord("a", 1, "zoo", "k", "t", 2)])
    j = src.journal()  # a collection still running: its journal counts, and stays where it is
    j.append(_rec(2))
    dst = Dataset(tmp_path / "dst", create=True)
    dst.add_records([_rec(1)])
    assert dst.merge_from(src) == {"records": 2, "tasks": 1, "networks": 1}
    assert sorted(dst.read("records", ["record_id"]).column("record_id").to_pylist()) == ["id0", "id1", "id2"]
    assert dst.merge_from(src) == {"records": 0, "tasks": 0, "networks": 0}
    assert j.path.exists() and src.read("records").num_rows == 2


def test_merge_keeps_the_collection_runs(tmp_path):
    src = Dataset(tmp_path / "src", create=True)
    info = src.write_collection_info({"device": "local", "status": "finished"})
    dst = Dataset(tmp_path / "dst", create=True)
    mine = dst.write_collection_info({"device": "other"})
    dst.merge_from(src)
    runs = sorted(p.name for p in (tmp_path / "dst" / "collection").glob("*.json"))
    assert runs == sorted([info.name, mine.name])
    assert json.loads((tmp_path / "dst" / "collection" / info.name).read_text())["status"] == "finished"


def test_merge_writes_small_partitions(tmp_path, monkeypatch):
    import perfcast.data.store as store

    src = Dataset(tmp_path / "src", create=True)
    src.add_records([_rec(i) for i in range(5)])
    monkeypatch.setattr(store, "PART_RECORDS", 2)  # feature caches are per partition: keep them small
    dst = Dataset(tmp_path / "dst", create=True)
    assert dst.merge_from(src)["records"] == 5
    assert sorted(pq.ParquetFile(p).metadata.num_rows for p in dst._parts("records")) == [1, 2, 2]
