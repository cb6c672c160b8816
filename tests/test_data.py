"""`perfcast data import` / `perfcast data summary` on a real (tiny) meta-schedule tuning database."""

import json
import math
import os
import shutil
import statistics

import numpy as np
import pytest
from typer.testing import CliRunner

from perfcast import paths
from perfcast.data.importer import NO_RUN_SECS, database_records, import_database
from perfcast.data.schema import MeasureRecord, from_row
from perfcast.data.store import Dataset
from perfcast.data.summary import summarize
from perfcast.errors import PerfcastError

DEVICE = "local:threads=1"


def _valid(secs) -> bool:
    return bool(secs) and all(math.isfinite(s) and s < 1e9 for s in secs)


def _program_hash(workload_mod, trace) -> str:
    from tvm.s_tir import Schedule

    from perfcast._tvm.util import main_func, structural_key

    sch = Schedule(workload_mod)
    trace.apply_to_schedule(sch, remove_postproc=False)
    return structural_key(main_func(sch.mod))


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory, matmul64, target_json):
    """ms.tune_tir, 8 replay-trace trials of a 64^3 matmul, plus one record without run_secs (a failed run)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from perfcast.e2e.schedules import drop_unnamed_ms_log_handlers, isolated_builder

    drop_unnamed_ms_log_handlers()  # a search earlier in the session (tests/test_search.py) may have left one
    work_dir = str(tmp_path_factory.mktemp("msdb"))
    target = tvm.target.Target(json.loads(target_json))
    runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(number=2, repeat=3, min_repeat_ms=0))
    with isolated_builder() as builder:
        ms.tune_tir(matmul64, target, work_dir, max_trials_global=8, num_trials_per_iter=8, builder=builder,
                    runner=runner, cost_model="random", strategy="replay-trace", num_tuning_cores=1, seed=0)
    db = ms.database.JSONDatabase(work_dir=work_dir)
    wl = db.commit_workload(matmul64)
    db.commit_tuning_record(ms.database.TuningRecord(tvm.s_tir.schedule.Trace([], {}), wl, None, target, None))
    return work_dir


@pytest.fixture(scope="module")
def imported(tuned_db, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ds") / "imported")
    return import_database(tuned_db, out, device=DEVICE), out


def _records(out) -> list[MeasureRecord]:
    return [from_row(MeasureRecord, r) for r in Dataset(out).read("records").to_pylist()]


def test_import_gives_one_record_per_program_with_median_latency(tuned_db, imported):
    import tvm

    from perfcast._tvm.util import apply_trace, main_func, structural_key

    res, out = imported
    db = database_records(tuned_db)
    assert len(db) == 9 and res["tuning_records"] == 9 and res["tasks"] == 1
    valid = [r for r in db if _valid(r.run_secs)]
    assert len(valid) == 8 and sum(1 for r in db if r.run_secs is None) == 1
    # the same program may be sampled twice: the dataset keeps it once (the first in database order)
    first_by_hash = {}
    for r in db:
        first_by_hash.setdefault(_program_hash(r.workload_mod, r.trace), r)
    recs = _records(out)
    by_hash = {r.program_hash: r for r in recs}
    assert set(by_hash) == set(first_by_hash) and len(recs) == len(first_by_hash) == res["imported"]
    ok = [r for r in recs if r.status == "ok"]
    assert len(ok) == len({h for h, r in first_by_hash.items() if _valid(r.run_secs)})
    assert len(ok) == len(valid) - res["duplicates_in_db"]
    assert res["by_status"].get("ok") == len(ok)

    for h, r in first_by_hash.items():
        rec = by_hash[h]
        assert rec.task_name == "C" and rec.schedule_kind == "imported" and rec.number == 0
        assert rec.networks == () and rec.task_weight == 1
        if _valid(r.run_secs):
            assert rec.latency_s == statistics.median(r.run_secs) == r.measured_s
            assert rec.latencies_s == tuple(r.run_secs) and len(rec.latencies_s) == 3
            assert rec.latency_min_s == min(r.run_secs) and rec.latency_max_s == max(r.run_secs)
        else:
            assert rec.status == "run_error" and rec.error == NO_RUN_SECS and math.isnan(rec.latency_s)
    with pytest.raises(PerfcastError, match=r"tuning record has no valid run_secs \(None\); check `measured` first"):
        next(r for r in db if r.run_secs is None).measured_s

    rec = ok[0]
    # the stored TIR and the stored trace both rebuild the very program that was hashed
    assert structural_key(main_func(tvm.script.from_source(rec.tir_script))) == rec.program_hash
    task = Dataset(out).read("tasks").to_pylist()
    assert [t["workload_key"] for t in task] == [rec.workload_key]
    task_mod = tvm.script.from_source(task[0]["tir_script"])
    assert structural_key(main_func(task_mod)) == rec.workload_key
    assert structural_key(main_func(apply_trace(task_mod, rec.trace_json))) == rec.program_hash
    assert json.loads(rec.target_json)["kind"] == "llvm"


def test_reimport_adds_nothing(tuned_db, imported):
    res, out = imported
    again = import_database(tuned_db, out, device=DEVICE)
    assert again["imported"] == 0 and again["new_tasks"] == 0
    assert again["skipped_existing"] == res["imported"]
    assert len(_records(out)) == res["imported"]


def test_import_keys_records_by_the_measured_cpu_like_the_collector(imported):
    """`local` is another CPU on every machine: an import here must not collide with (or be skipped as) a record of
    the same program imported or collected on another machine."""
    from perfcast.collect.collector import record_id
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key

    _, out = imported
    dkey = device_key(get_device(DEVICE))
    assert dkey.startswith(DEVICE + "@")
    for rec in _records(out):
        assert rec.record_id == record_id(rec.workload_key, dkey, rec.program_hash)
        assert rec.record_id != record_id(rec.workload_key, DEVICE, rec.program_hash)


def test_summary_of_the_imported_dataset(imported):
    res, out = imported
    s = summarize(out)
    recs = _records(out)
    ok_lat = [r.latency_s for r in recs if r.status == "ok"]
    assert s["ok_records"] == len(ok_lat) == res["by_status"]["ok"]
    assert s["records"] == len(recs) and s["by_status"]["run_error"] == 1
    assert s["tasks"] == 1 and s["tasks_total"] == 1 and s["devices"] == 1 and s["duplicates"] == 0
    assert s["networks"] == 0 and s["network_names"] == []
    parts = sorted(paths.records_dir(out).glob("part-*.parquet"))
    assert s["record_partitions"] == len(parts) >= 1 and s["record_bytes"] == sum(p.stat().st_size for p in parts)
    assert s["latency_s"]["median"] == pytest.approx(float(np.median(ok_lat)), rel=1e-12)
    assert s["latency_s"]["min"] == min(ok_lat) and s["latency_s"]["max"] == max(ok_lat)
    assert s["programs_per_task"] == {"median": len(ok_lat), "min": len(ok_lat), "max": len(ok_lat)}
    n = len(ok_lat)
    assert s["programs_per_task_by_device"] == {s["device_ids"][0]: {"tasks": 1, "min": n, "p10": n, "median": n,
                                                                   "p90": n, "max": n}}
    assert s["network_programs_per_task_by_device"] == {}  # an imported database has no networks
    assert s["network_programs_per_task_by_device_and_batch"] == {}
    assert s["plot"] == str(paths.summary_dir(out) / "latency_hist.png")
    assert os.path.getsize(s["plot"]) > 1000
    json.dumps(s, allow_nan=False)  # JSON-able, no NaN


def test_summary_depth_per_batch_size_counts_shared_tasks_in_both_and_leaves_out_layer_suites():
    """Programs per task by (device, batch size): a task of networks at batch 1 and 2 counts in both, a layer
    suite's task (left out of the network rows as `summarize` does) in neither."""
    import pandas as pd

    from perfcast.data.summary import _by_device_and_batch

    per_task_dev = pd.Series([10, 4, 7, 100, 1],
                             index=pd.MultiIndex.from_tuples([("a", "d1"), ("b", "d1"), ("c", "d1"), ("a", "d2"),
                                                              ("L", "d1")], names=["workload_key", "device_id"]))
    nets = pd.DataFrame({"network": ["n1", "n1", "n2", "n2", "layers:conv"], "batch_size": [1, 1, 2, 2, 1],
                         "workload_key": ["a", "b", "a", "c", "L"]})
    got = _by_device_and_batch(per_task_dev, nets[~nets["network"].str.startswith("layers:")])
    assert got == {
        "d1": {"1": {"tasks": 2, "min": 4, "p10": 4.6, "median": 7.0, "p90": 9.4, "max": 10},
               "2": {"tasks": 2, "min": 7, "p10": 7.3, "median": 8.5, "p90": 9.7, "max": 10}},
        "d2": {"1": {"tasks": 1, "min": 100, "p10": 100.0, "median": 100.0, "p90": 100.0, "max": 100},
               "2": {"tasks": 1, "min": 100, "p10": 100.0, "median": 100.0, "p90": 100.0, "max": 100}},
    }


def test_summary_counts_duplicates(imported, tmp_path):
    _, out = imported
    rec = next(r for r in _records(out) if r.status == "ok")
    ds = Dataset(tmp_path / "dup", create=True)
    ds._write_part("records", [rec])
    ds._write_part("records", [rec])
    s = summarize(str(tmp_path / "dup"), plot=str(tmp_path / "h.png"))
    assert s["duplicates"] == 1 and s["records"] == 2
    assert s["plot"] == str(tmp_path / "h.png") and os.path.getsize(tmp_path / "h.png") > 0


def test_errors_are_one_line(imported, tmp_path, monkeypatch):
    _, out = imported
    (tmp_path / "plain").mkdir()
    with pytest.raises(PerfcastError, match="not a perfcast dataset"):
        summarize(str(tmp_path / "plain"))
    with pytest.raises(PerfcastError, match="database_workload.json"):
        import_database(str(tmp_path / "plain"), str(tmp_path / "o"))
    assert not (tmp_path / "o").exists()

    empty = tmp_path / "empty"
    Dataset(empty, create=True)
    with pytest.raises(PerfcastError, match="has no records"):
        summarize(str(empty))

    old = tmp_path / "old"
    shutil.copytree(out, old)
    meta = json.loads(paths.marker(old).read_text())
    meta["schema_version"] = 999
    paths.marker(old).write_text(json.dumps(meta))
    with pytest.raises(PerfcastError, match="schema version 999"):
        summarize(str(old))

    monkeypatch.setattr(paths, "bundled_dataset_dir", lambda: tmp_path / "nothing")
    with pytest.raises(PerfcastError, match="the bundled dataset is missing: reinstall perfcast"):
        summarize(None)


def test_predict_records_of_a_database(tuned_db, model_of_this_cpu):
    """`predict_records` on a meta-schedule database: one entry per tuning record in `get_all_tuning_records()` order,
    `measured_s` the median of its run_secs (none for the failed run), `predicted_s` the bundled model's prediction of
    the program its trace gives (as `predict_programs` predicts it); a speed ratio scales every entry. The CLI's
    `--calibrate` for a device without reference records keeps the JSON list on stdout and says why on stderr."""
    import subprocess
    import sys

    from perfcast.eval.workflow import predict_programs, predict_records

    db = database_records(tuned_db)
    rows = predict_records(tuned_db, model=model_of_this_cpu, device=DEVICE)
    assert [r["index"] for r in rows] == list(range(len(db))) and len(db) == 9
    for r, d in zip(rows, db):
        assert ("measured_s" in r) == d.measured
        if d.measured:
            assert r["measured_s"] == statistics.median(d.run_secs)
    assert 0 < sum(d.measured for d in db) < 9
    from perfcast.eval.coverage import RECOMPUTE_SHARE, recomputed_share

    shares = [recomputed_share(d.program()) for d in db]  # marked where the share reaches RECOMPUTE_SHARE
    assert [r.get("recomputes", 0.0) for r in rows] == [round(x, 4) if x >= RECOMPUTE_SHARE else 0.0 for x in shares]
    assert all(("predicted_low_s" in r) != ("recomputes" in r) for r in rows)  # no interval where it would not hold
    ref = predict_programs([d.program() for d in db], device=DEVICE)
    np.testing.assert_allclose([r["predicted_s"] for r in rows], ref, rtol=1e-6)
    # the bundled model's prediction intervals: each program's prediction times its region's bounds
    from perfcast.eval.intervals import interval_factors, model_intervals, program_regions
    from perfcast.features.cache import features_of_programs
    from perfcast.models import load_model

    m = load_model()
    lo, hi = interval_factors(model_intervals(m), program_regions(
        features_of_programs([d.program() for d in db], DEVICE, asm=m.needs_asm)))
    np.testing.assert_allclose([r["predicted_low_s"] for r in rows], ref * lo, rtol=1e-6)
    np.testing.assert_allclose([r["predicted_high_s"] for r in rows], ref * hi, rtol=1e-6)
    assert (lo < 1).all() and (hi > 1).all()
    # on a device the model never measured, no interval (its errors on the others do not hold there)
    unseen = predict_records(tuned_db, device="local:mcpu=sandybridge,threads=1")
    assert len(unseen) == 9 and not any("predicted_low_s" in r for r in unseen)
    scaled = predict_records(tuned_db, model=model_of_this_cpu, device=DEVICE, speed_ratio=2.0)
    np.testing.assert_allclose([r["predicted_s"] for r in scaled], 2.0 * ref, rtol=1e-6)
    np.testing.assert_allclose([r["predicted_high_s"] for r in scaled], 2.0 * ref * hi, rtol=1e-6)
    assert [r["uncalibrated_predicted_s"] for r in scaled] == [r["predicted_s"] for r in rows]

    dev = "local:mcpu=sandybridge,threads=1"
    res = subprocess.run([sys.executable, "-m", "perfcast.cli.app", "predict-records", tuned_db, "--device", dev,
                          "--calibrate", "--json"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert len(out) == 9 and "uncalibrated_predicted_s" not in out[0]
    assert f"not calibrated: no record of '{dev}@" in " ".join(res.stderr.split())


def test_cli_summary_and_import_json(tuned_db, imported, monkeypatch):
    from perfcast.cli.app import app

    _, out = imported
    runner = CliRunner()
    res = runner.invoke(app, ["data", "summary", out, "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert {"ok_records", "networks", "tasks", "devices", "duplicates"} <= set(s)
    assert s["tasks"] == 1 and s["devices"] == 1

    res = runner.invoke(app, ["data", "import", tuned_db, "--out", out, "--device", DEVICE, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["imported"] == 0

    res = runner.invoke(app, ["data", "summary", out])
    assert res.exit_code == 0, res.output
    assert "latency_hist.png" in res.stdout
    parts = sorted(paths.records_dir(out).glob("part-*.parquet"))
    mb = sum(p.stat().st_size for p in parts) / 1e6
    stored = f"{len(parts)} partition{'' if len(parts) == 1 else 's'}, {mb:.1f} MB"
    assert stored in " ".join(res.stdout.split()) and "perfcast data compact" not in res.stdout  # few: no hint
    monkeypatch.setattr("perfcast.cli.data_cmd.COMPACT_HINT_PARTS", 0)
    res = runner.invoke(app, ["data", "summary", out], env={"COLUMNS": "300"})
    assert f"{stored} (`perfcast data compact` rewrites them a third smaller" in res.stdout


def test_bundled_dataset_covers_every_zoo_task():
    """Every task of every zoo network (batch 1) has ok records in the bundled dataset and its TVM default kernel
    recorded (e2e prediction of `--schedules default` needs that kind of kernel in the data). The one default kernel
    that is not ok is gpt2's LM head, a 128x768x50257 matmul that TVM leaves unscheduled: it runs longer than the
    collector's 60 s limit, and is recorded as a timeout."""
    from perfcast.networks import list_networks

    zoo = set(list_networks())
    ds = Dataset(paths.bundled_dataset_dir())
    nets = ds.read("networks", columns=["network", "batch_size", "workload_key"]).to_pylist()
    zoo_tasks = {(r["network"], r["workload_key"]) for r in nets if r["batch_size"] == 1 and r["network"] in zoo}
    assert {n for n, _ in zoo_tasks} == zoo
    recs = ds.read("records", columns=["workload_key", "task_name", "status", "schedule_kind", "error"]).to_pylist()
    zoo_keys = {k for _, k in zoo_tasks}
    assert zoo_keys - {r["workload_key"] for r in recs if r["status"] == "ok"} == set()
    default = [r for r in recs if r["schedule_kind"] == "default" and r["workload_key"] in zoo_keys]
    assert zoo_keys - {r["workload_key"] for r in default} == set()
    not_ok = {(r["task_name"], r["status"], r["error"]) for r in default if r["status"] != "ok"}
    assert not_ok == {("matmul6", "timeout", "run exceeded 60 s")}


def test_programs_per_task_spread_is_hand_computed():
    """Per-device sampling depth: linear-interpolated percentiles (p10 at position 0.4 of 0..4, p90 at 3.6)."""
    from perfcast.data.summary import _spread

    assert _spread(np.array([3, 1, 100, 2, 4])) == {"tasks": 5, "min": 1, "p10": pytest.approx(1.4), "median": 3.0,
                                                    "p90": pytest.approx(61.6), "max": 100}
