"""perfcast.search: a perfcast model as meta-schedule's cost model, on the real search path (a 64x64 matmul)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest


@pytest.fixture(scope="module")
def program_model(mlp_dataset, tmp_path_factory):
    """A tree model on the pooled program vector (no assembly features) trained on the mlp records."""
    from perfcast.eval.workflow import train
    from perfcast.models import load_model

    out = tmp_path_factory.mktemp("search_model") / "m"
    train(data=str(mlp_dataset[0]), model="lgbm", split="random", out=str(out),
          params={"features": "program", "target_scale": "work", "n_estimators": 50})
    return load_model(str(out))


def test_scores_are_inverse_predicted_latency_and_cached(program_model, matmul64):
    import tvm_ffi
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    from perfcast.collect.space import random_programs
    from perfcast.devices import get_device
    from perfcast.eval.workflow import predict_programs
    from perfcast.search import perfcast_cost_model

    spec = get_device("local:threads=1")
    progs = [p.mod for p in itertools.islice(random_programs(matmul64, spec.target(), 0), 6)]
    cands = [ms.MeasureCandidate(Schedule(m), []) for m in progs]
    cm = perfcast_cost_model(program_model, "local:threads=1")
    ctx = ms.TuneContext(mod=matmul64, target=spec.target(), task_name="mm64")
    scores = np.asarray(cm.predict(ctx, cands + cands[:2]))  # the last two repeat the first two
    ref = predict_programs(progs, program_model, "local:threads=1")  # the library's own path, independently
    np.testing.assert_allclose(scores, 1e-6 / np.concatenate([ref, ref[:2]]), rtol=1e-6)
    assert cm.stats.programs_scored == 6 and cm.stats.cache_hits == 2 and cm.stats.failed == 0
    cm.predict(ctx, cands[:3])
    assert cm.stats.programs_scored == 6 and cm.stats.cache_hits == 5 and cm.stats.predict_calls == 2
    assert len({tvm_ffi.structural_hash(m) for m in progs}) == 6  # six distinct programs were drawn


def test_tasks_in_unseen_element_types_are_warned_and_counted(program_model, matmul64, int8_matmul):
    """The model trained on float32 programs only: an int8 x int8 -> int32 matmul task gets one warning (at its
    first scoring, none after), its unseen int8 and int32 land in the stats and their line; a float32 task gets
    neither."""
    import warnings

    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    from perfcast.devices import get_device
    from perfcast.search import perfcast_cost_model

    qmm = tvm.IRModule({"main": int8_matmul})
    target = get_device("local:threads=1").target()
    cm = perfcast_cost_model(program_model, "local:threads=1")
    assert set(program_model.info_["train_dtypes"]) == {"float32"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for the float32 task
        cm.predict(ms.TuneContext(mod=matmul64, target=target, task_name="mm64"), [ms.MeasureCandidate(
            Schedule(matmul64), [])])
    ctx = ms.TuneContext(mod=qmm, target=target, task_name="qmm")
    with pytest.warns(UserWarning, match=r"^task 'qmm' uses int32, int8, which none of the perfcast model's "):
        scores = cm.predict(ctx, [ms.MeasureCandidate(Schedule(qmm), [])])
    assert np.isfinite(scores).all()  # still scored
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per task
        cm.predict(ctx, [ms.MeasureCandidate(Schedule(qmm), [])])
    assert cm.stats.unseen_dtypes == {"mm64": [], "qmm": ["int32", "int8"]}
    assert cm.stats.summary()["unseen_dtypes"] == {"qmm": ["int32", "int8"]}
    assert cm.stats.describe().endswith("; 1 task(s) in element types the model never trained on, ranked blind: "
                                        "qmm (int32, int8)")
    assert cm.stats.summary()["recomputing"] == 0  # (neither program repeats loop-invariant work)


def test_programs_that_repeat_loop_invariant_work_are_counted(program_model, recompute_rowsum, matmul64):
    """A program that computes a row sum inside a loop it does not use is scored and counted (its prediction is
    blind to whether LLVM hoists the sum); a matmul is not counted."""
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    from perfcast.devices import get_device
    from perfcast.search import perfcast_cost_model

    mod = tvm.IRModule({"main": recompute_rowsum})
    target = get_device("local:threads=1").target()
    cm = perfcast_cost_model(program_model, "local:threads=1")
    scores = cm.predict(ms.TuneContext(mod=mod, target=target, task_name="rowsum"),
                        [ms.MeasureCandidate(Schedule(mod), []), ms.MeasureCandidate(Schedule(matmul64), [])])
    assert np.isfinite(scores).all() and cm.stats.programs_scored == 2 and cm.stats.recomputing == 1
    assert "; 1 of them repeat loop-invariant work, which the model cannot judge" in cm.stats.describe()


def test_search_steered_by_perfcast(program_model, matmul64, tmp_path):
    """A real meta-schedule search of 32 measured candidates (two rounds) steered by the model, learning online: the
    database holds them, the model saw every measurement beside the score it had given, it scored far more programs
    than were measured, fitted a correction after each round, and its scores now include the correction."""
    import logging

    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    from perfcast.data.importer import committed_run_secs
    from perfcast.devices import get_device
    from perfcast.e2e.schedules import drop_unnamed_ms_log_handlers, isolated_builder
    from perfcast.eval.workflow import predict_programs
    from perfcast.features.cache import features_of_programs
    from perfcast.models.gbdt import program_matrix
    from perfcast.search import perfcast_cost_model

    # what an earlier search in this process can leave on meta-schedule's logger (its setup fails on it)
    logging.getLogger("tvm.s_tir.meta_schedule").addHandler(logging.StreamHandler())
    drop_unnamed_ms_log_handlers()
    cm = perfcast_cost_model(program_model, "local:threads=1", online=True)
    target = get_device("local:threads=1").target()
    with isolated_builder() as builder:
        db = ms.tune_tir(matmul64, target, str(tmp_path), max_trials_global=32, num_trials_per_iter=16,
                         builder=builder, num_tuning_cores=1, seed=0, cost_model=cm)
    recs = db.get_all_tuning_records()
    assert len(recs) == 32
    pairs = cm.stats.measured["main"]
    assert len(pairs) == 32
    measured = sorted(float(np.median([float(s) for s in r.run_secs])) for r in recs)
    np.testing.assert_allclose(sorted(y for _, y in pairs), measured, rtol=1e-9)
    # the record file in commit order holds the same runs, in the order update() saw them
    committed = [float(np.median(secs)) for secs in committed_run_secs(str(tmp_path))]
    np.testing.assert_allclose(committed, [y for _, y in pairs], rtol=1e-9)
    assert cm.stats.programs_scored > 100 and cm.stats.failed == 0
    assert cm.stats.online_fits == 2 and len(cm.online.data_["main"][1]) == 32
    s = cm.stats.summary()
    assert s["measured_programs"] == 32 and -1 <= s["kendall_tau_by_task"]["main"] <= 1 and s["online_fits"] == 2
    assert "32 measurements" in cm.stats.describe() and "2 online corrections fitted" in cm.stats.describe()
    # scores after the search: 1e-6 / (the model's prediction x exp(the correction)), computed independently
    progs = []
    for r in recs[:5]:
        sch = Schedule(matmul64)
        r.trace.apply_to_schedule(sch, remove_postproc=False)
        progs.append(sch.mod)
    ctx = ms.TuneContext(mod=matmul64, target=target, task_name="main")
    scores = np.asarray(cm.predict(ctx, [ms.MeasureCandidate(Schedule(m), []) for m in progs]))
    rows = np.asarray(program_matrix(features_of_programs(progs, "local:threads=1")), np.float64)
    g = cm.online.models_["main"]
    ref = predict_programs(progs, program_model, "local:threads=1") * np.exp(
        g.predict(np.sign(rows) * np.log1p(np.abs(rows))))
    np.testing.assert_allclose(scores, 1e-6 / ref, rtol=1e-5)
    assert not np.allclose(scores, 1e-6 / predict_programs(progs, program_model, "local:threads=1"), rtol=1e-3)


def test_online_correction_learns_a_known_residual():
    """Measured = predicted x 2 where column 0 is 5 and x 1 where it is 0 (column 1 is noise): no correction before
    `min_measured` programs, then factors close to 2 and 1 (the trees split on column 0)."""
    from perfcast.search import OnlineCorrection

    rng = np.random.default_rng(0)
    rows = np.column_stack([np.tile([0.0, 5.0], 16), rng.normal(size=32)])
    pred = rng.uniform(1e-4, 1e-3, size=32)
    meas = pred * np.where(rows[:, 0] > 0, 2.0, 1.0)
    corr = OnlineCorrection(min_measured=20, seed=0)
    assert not corr.add("t", rows[:16], pred[:16], meas[:16])
    np.testing.assert_array_equal(corr.factor("t", rows[:4]), np.ones(4))  # too few yet: unchanged
    assert corr.add("t", rows[16:], pred[16:], meas[16:])
    f = corr.factor("t", np.array([[5.0, 0.3], [0.0, -0.3]]))
    # boosting shrinks toward the exact factors: each tree that may split on column 0 (about half of the 60, with
    # colsample 0.5 of two columns) leaves 0.9 of the gap of +-ln(2)/2 around the mean; here 1.947 and 1.053
    np.testing.assert_allclose(f, [2.0, 1.0], rtol=0.06)
    assert f[0] / f[1] > 1.8
    np.testing.assert_array_equal(corr.factor("other task", rows[:3]), np.ones(3))  # per task


def test_cost_model_names():
    from perfcast.errors import PerfcastError
    from perfcast.search import search_cost_model

    assert search_cost_model("xgb") == "xgb" and search_cost_model("random") == "random"
    with pytest.raises(ValueError, match="unknown cost model 'nope'; known: perfcast, perfcast-online, random, xgb"):
        search_cost_model("nope")
    with pytest.raises(PerfcastError, match="--model only applies to --cost-model perfcast"):
        search_cost_model("xgb", model="somewhere")


def test_tune_cli_bad_cost_model_is_one_line(tmp_path):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "perfcast.cli.app", "tune", "mlp", "--out", str(tmp_path / "db"),
                          "--cost-model", "nope"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == ("error: unknown cost model 'nope'; known: perfcast, "
                                                   "perfcast-online, random, xgb")
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "db").exists()  # refused before anything was tuned


def test_bundled_search_model_reads_no_assembly():
    from perfcast import paths
    from perfcast.models import load_model

    m = load_model(str(paths.bundled_search_model_dir()))
    assert not m.needs_asm and m.name == "lgbm" and m.params["features"] == "program"
