"""The dataset store: schema round trip, partitions, journal recovery, errors."""

import json
import math

import pyarrow.parquet as pq
import pytest

from perfcast.data.schema import SCHEMA_VERSION, MeasureRecord, from_json_line, from_row, to_json_line, to_table
from perfcast.data.store import Dataset
from perfcast.errors import PerfcastError


def _rec(i: int, status: str = "ok", protocol: int = 2, program: int | None = None) -> MeasureRecord:
    lat = (1e-3 * (i + 1), 1.1e-3 * (i + 1), 0.9e-3 * (i + 1))
    ok = status == "ok"
    return MeasureRecord(
        record_id=f"id{i}", workload_key="k", task_name="t", program_hash=f"h{i if program is None else program}",
        schedule_kind="random",
        trace_json="[]", tir_script="# tir", device_id="local", device_spec_json="{}", target_json="{}",
        task_weight=2, networks=("a", "b"), status=status, error="" if ok else "boom",
        latencies_s=lat if ok else (), latency_s=sorted(lat)[1] if ok else math.nan,
        latency_min_s=min(lat) if ok else math.nan, latency_max_s=max(lat) if ok else math.nan,
        latency_cv=0.1 if ok else math.nan, number=3, remeasured=False, build_s=0.1, measure_s=0.2,
        tvm_version="0.27", perfcast_version="0.1.0", timestamp="2026-11-22T00:00:00+00:00",
        protocol=protocol, round_latencies_s=(lat[1], lat[2], lat[0]) if ok and protocol == 2 else (),
        round_sentinel_cpu_s=(8.1e-5, 8.3e-5, 8.0e-5) if ok and protocol == 2 else (),
        round_sentinel_cache_s=(1.7e-6, 2.9e-6, 1.8e-6) if ok and protocol == 2 else (),
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
    with pytest.raises(PerfcastError, match="schema version 999.*reads versions 1, 2.*re-collect"):
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


NOT_IN_V2 = ("round_sentinel_cpu_s", "round_sentinel_cache_s")  # added by schema version 3
NOT_IN_V1 = ("protocol", "round_latencies_s") + NOT_IN_V2  # added by schema versions 2 and 3


def _write_old_partition(ds: Dataset, recs: list, version: int) -> None:
    """A records partition exactly as perfcast wrote it at schema `version` (1: no protocol, no rounds, no
    sentinel; 2: no sentinel)."""
    import dataclasses

    import pyarrow as pa

    from perfcast.data.schema import arrow_schema

    drop = NOT_IN_V1 if version == 1 else NOT_IN_V2
    fields = [f for f in arrow_schema(MeasureRecord) if f.name not in drop]
    rows = [{k: v for k, v in dataclasses.asdict(r).items() if k not in drop} | {"schema_version": version}
            for r in recs]
    rows = [{k: list(v) if isinstance(v, tuple) else v for k, v in r.items()} for r in rows]
    meta = {b"perfcast_schema_version": str(version).encode()}
    table = pa.Table.from_pylist(rows, schema=pa.schema(fields, metadata=meta))
    (ds.root / "records").mkdir(exist_ok=True)
    pq.write_table(table, ds.root / "records" / f"part-20261122T000000-v{version}.parquet")


def test_a_version_1_dataset_reads_as_protocol_1_and_takes_new_partitions(tmp_path):
    ds = Dataset(tmp_path / "d", create=True)
    marker = tmp_path / "d" / "perfcast_dataset.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "schema_version": 1}))
    _write_old_partition(ds, [_rec(0, protocol=1), _rec(1, protocol=1)], 1)
    ds = Dataset(tmp_path / "d")  # a version-1 marker is readable
    t = ds.read("records")
    assert t.column("protocol").to_pylist() == [1, 1]
    assert t.column("round_latencies_s").to_pylist() == [[], []]
    assert t.column("round_sentinel_cpu_s").to_pylist() == t.column("round_sentinel_cache_s").to_pylist() == [[], []]
    assert ds.read("records", ["protocol", "record_id"]).column_names == ["protocol", "record_id"]
    assert ds.add_records([_rec(2)]) == 1  # a partition of this version beside the version-1 one
    assert json.loads(marker.read_text())["schema_version"] == SCHEMA_VERSION
    assert sorted(Dataset(tmp_path / "d").read("records", ["protocol"]).column("protocol").to_pylist()) == [1, 1, 2]


def test_a_version_1_journal_line_is_recovered_not_dropped(tmp_path):
    import dataclasses

    ds = Dataset(tmp_path / "d", create=True)
    old = {k: v for k, v in dataclasses.asdict(_rec(0, protocol=1)).items() if k not in NOT_IN_V1}
    old["schema_version"] = 1
    v2 = {k: v for k, v in dataclasses.asdict(_rec(1)).items() if k not in NOT_IN_V2} | {"schema_version": 2}
    jd = tmp_path / "d" / "journal"
    jd.mkdir()
    (jd / "1-old.jsonl").write_text(json.dumps(old) + "\n" + json.dumps(v2) + "\n")
    assert ds.recover() == 2
    t = ds.read("records", ["record_id", "protocol", "round_latencies_s", "round_sentinel_cpu_s"]).to_pylist()
    got = [(r["protocol"], len(r["round_latencies_s"]), r["round_sentinel_cpu_s"]) for r in t]
    assert got == [(1, 0, []), (2, 3, [])]


def test_a_version_2_partition_reads_without_sentinel_readings(tmp_path):
    ds = Dataset(tmp_path / "d", create=True)
    _write_old_partition(ds, [_rec(0), _rec(1)], 2)
    ds.add_records([_rec(2)])
    t = Dataset(tmp_path / "d").read("records").to_pylist()
    assert [r["round_sentinel_cpu_s"] for r in t] == [[], [], [8.1e-5, 8.3e-5, 8.0e-5]]
    assert [len(r["round_latencies_s"]) for r in t] == [3, 3, 3] and {r["schema_version"] for r in t} == {3}
    only = Dataset(tmp_path / "d").read("records", ["round_sentinel_cache_s"])
    assert only.column_names == ["round_sentinel_cache_s"] and only.num_rows == 3


def test_a_re_measurement_under_a_newer_protocol_supersedes_the_old_record(tmp_path):
    from perfcast.data.frame import records_frame
    from perfcast.data.summary import summarize

    import dataclasses

    from perfcast.devices import get_device

    spec = get_device("local:mcpu=x86-64,threads=1").to_json()  # records_frame keys devices by their spec
    dev = lambda r: dataclasses.replace(r, device_spec_json=spec)  # noqa: E731
    ds = Dataset(tmp_path / "d", create=True)
    ds.add_records([dev(_rec(0, protocol=1)), dev(_rec(1, protocol=1))])
    ds.add_records([dev(_rec(2, protocol=2, program=0))])  # program h0 again, protocol 2: a new record id
    df = records_frame(ds)
    assert sorted(zip(df["program_hash"], df["protocol"], df["record_id"])) == [("h0", 2, "id2"), ("h1", 1, "id1")]
    assert list(records_frame(ds, min_protocol=2)["record_id"]) == ["id2"]
    s = summarize(str(tmp_path / "d"), plot=str(tmp_path / "h.png"))
    assert (s["records"], s["superseded"], s["duplicates"]) == (2, 1, 0)
    assert s["records_by_protocol"] == {"1": 2, "2": 1}


# ---- compaction --------------------------------------------------------------------------------------------------
def _spread_dataset(root):
    """Nine records of three tasks in three partitions (not in task order), two task partitions, a network row, a
    per-partition feature cache for two of the three record partitions and a cache keyed otherwise."""
    import dataclasses

    import pyarrow as pa

    from perfcast.data.schema import NetworkTaskRecord, TaskRecord

    ds = Dataset(root, create=True)
    recs = [dataclasses.replace(_rec(i), workload_key=f"k{(7 * i) % 3}") for i in range(9)]
    for chunk in (recs[:4], recs[4:7], recs[7:]):
        ds.add_records(chunk)
    ds.add_tasks([TaskRecord(f"k{i}", "t", "# tir", "[]", 1.0) for i in (2, 0)])
    ds.add_tasks([TaskRecord("k1", "t", "# tir", "[]", 1.0)])
    ds.add_network_tasks([NetworkTaskRecord("a", 1, "zoo", "k0", "t", 2)])
    parts = ds._parts("records")
    cache = root / "features" / "tagX"
    cache.mkdir(parents=True)
    for p in parts:
        ids = pq.read_table(p, columns=["record_id"]).column(0).to_pylist()
        if "id8" in ids:
            continue  # the last partition's features were never computed
        pq.write_table(pa.table({"record_id": ids, "value": [float(i[2:]) for i in ids]},
                               schema=pa.schema([("record_id", pa.string()), ("value", pa.float64())],
                                                metadata={b"feature_tag": b"tagX"})), cache / p.name)
    (root / "features" / "asm").mkdir()
    pq.write_table(pa.table({"record_id": ["id0"]}), root / "features" / "asm" / "0123abcd.parquet")
    return ds, recs


def _rows(ds) -> list:
    return sorted(ds.read("records").to_pylist(), key=lambda r: r["record_id"])


def test_compact_rewrites_the_same_rows_sorted_by_task_and_carries_the_feature_cache(tmp_path):
    from perfcast.data.compact import compact

    ds, recs = _spread_dataset(tmp_path / "d")
    before, old_parts = _rows(ds), ds._parts("records")
    out = compact(ds, rows_per_part=4, progress=False)
    assert out["tables"]["records"] | {"bytes_before": 0, "bytes_after": 0} == {
        "partitions_before": 3, "partitions_after": 3, "bytes_before": 0, "bytes_after": 0}
    assert out["tables"]["tasks"]["partitions_before"] == 2 and out["tables"]["tasks"]["partitions_after"] == 1
    assert out["tables"]["networks"]["partitions_after"] == 1
    assert _rows(Dataset(tmp_path / "d")) == before  # the same rows, field for field
    parts = ds._parts("records")
    assert not set(parts) & set(old_parts)
    assert [pq.ParquetFile(p).metadata.num_rows for p in parts] == [4, 4, 1]
    ids = [pq.read_table(p).column("record_id").to_pylist() for p in parts]
    # k0: ids 0 3 6; k1: 1 4 7; k2: 2 5 8 (record ids sort as strings within a task)
    assert ids == [["id0", "id3", "id6", "id1"], ["id4", "id7", "id2", "id5"], ["id8"]]
    assert ds.read("tasks").column("workload_key").to_pylist() == ["k0", "k1", "k2"]
    # the cache: one file per new partition holding the cached rows of its records (id7, id8 were never cached)
    cache = tmp_path / "d" / "features" / "tagX"
    files = sorted(cache.iterdir())
    assert [f.name for f in files] == [p.name for p in parts[:2]]  # id8 was never cached: no file for its partition
    got = [pq.read_table(f).to_pydict() for f in files]
    assert [g["record_id"] for g in got] == [["id0", "id3", "id6", "id1"], ["id4", "id2", "id5"]]
    assert [g["value"] for g in got] == [[0.0, 3.0, 6.0, 1.0], [4.0, 2.0, 5.0]]
    assert pq.read_schema(files[0]).metadata[b"feature_tag"] == b"tagX"
    assert out["feature_cache_files"] == len(files)
    assert [f.name for f in (tmp_path / "d" / "features" / "asm").iterdir()] == ["0123abcd.parquet"]
    assert not (tmp_path / "d" / ".compact").exists() and not (tmp_path / "d" / ".compact.json").exists()


def test_a_compaction_killed_after_its_manifest_is_finished_by_the_next_open(tmp_path, monkeypatch):
    import os

    import perfcast.data.compact as compact_mod

    ds, _ = _spread_dataset(tmp_path / "d")
    before, old_parts = _rows(ds), ds._parts("records")

    def killed(root):
        raise KeyboardInterrupt  # the kill: after the commit point, before anything moved

    monkeypatch.setattr(compact_mod, "_apply", killed)
    with pytest.raises(KeyboardInterrupt):
        compact_mod.compact(ds, rows_per_part=4, progress=False)
    monkeypatch.undo()
    plan = json.loads((tmp_path / "d" / ".compact.json").read_text())
    assert len(plan["moves"]) == 3 + 1 + 1 + 2 and len(plan["removes"]) == 3 + 2 + 1 + 2
    src, dst = plan["moves"][0]  # a kill in the middle of applying it: one file moved already
    os.replace(tmp_path / "d" / src, tmp_path / "d" / dst)
    ds2 = Dataset(tmp_path / "d")
    assert _rows(ds2) == before and len(ds2._parts("records")) == 3 and not set(ds2._parts("records")) & set(old_parts)
    assert len(list((tmp_path / "d" / "features" / "tagX").iterdir())) == 2
    assert not (tmp_path / "d" / ".compact").exists() and not (tmp_path / "d" / ".compact.json").exists()


def test_a_compaction_killed_before_its_manifest_leaves_the_dataset_as_it_was(tmp_path, monkeypatch):
    import perfcast.data.compact as compact_mod

    ds, _ = _spread_dataset(tmp_path / "d")
    before, old_parts = _rows(ds), ds._parts("records")
    cache_before = sorted((tmp_path / "d" / "features" / "tagX").iterdir())
    real, calls = compact_mod.write_durably, []

    def killed_on_the_third_write(table, path):
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(table, path)

    monkeypatch.setattr(compact_mod, "write_durably", killed_on_the_third_write)
    with pytest.raises(KeyboardInterrupt):
        compact_mod.compact(ds, rows_per_part=4, progress=False)
    assert (tmp_path / "d" / ".compact").exists() and not (tmp_path / "d" / ".compact.json").exists()
    ds2 = Dataset(tmp_path / "d")
    assert _rows(ds2) == before and ds2._parts("records") == old_parts
    assert sorted((tmp_path / "d" / "features" / "tagX").iterdir()) == cache_before
    assert not (tmp_path / "d" / ".compact").exists()


def test_compact_errors_are_one_line_and_change_nothing(tmp_path, monkeypatch):
    from perfcast.data.compact import compact

    ds, _ = _spread_dataset(tmp_path / "d")
    parts = ds._parts("records")
    with pytest.raises(PerfcastError, match=r"^--rows-per-part must be at least 1, got 0; the default is 10000$"):
        compact(ds, rows_per_part=0, progress=False)
    j = ds.journal()
    j.append(_rec(20))
    with pytest.raises(PerfcastError, match=r"has 1 journal file\(s\) of records not yet in a partition .*"
                                            r"rerun the killed `perfcast collect \.\.\. --out DIR`"):
        compact(ds, progress=False)
    assert ds._parts("records") == parts
    import perfcast.data.compact as compact_mod  # a read-only dataset (os.access: root may write anywhere)

    monkeypatch.setattr(compact_mod.os, "access", lambda path, mode: False)
    with pytest.raises(PerfcastError, match=r"is not writable; copy it \(cp -r .*\) and compact the copy$"):
        compact(ds, progress=False)
    assert ds._parts("records") == parts
