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


def test_search_steered_by_perfcast(program_model, matmul64, tmp_path):
    """A real meta-schedule search of 16 measured candidates steered by the model: the database holds them, the
    model saw every measurement beside its own prediction, and it scored far more programs than were measured."""
    import logging

    from tvm.s_tir import meta_schedule as ms

    from perfcast.devices import get_device
    from perfcast.e2e.schedules import drop_unnamed_ms_log_handlers, isolated_builder
    from perfcast.search import perfcast_cost_model

    # what an earlier search in this process can leave on meta-schedule's logger (its setup fails on it)
    logging.getLogger("tvm.s_tir.meta_schedule").addHandler(logging.StreamHandler())
    drop_unnamed_ms_log_handlers()
    cm = perfcast_cost_model(program_model, "local:threads=1")
    with isolated_builder() as builder:
        db = ms.tune_tir(matmul64, get_device("local:threads=1").target(), str(tmp_path), max_trials_global=16,
                         num_trials_per_iter=16, builder=builder, num_tuning_cores=1, seed=0, cost_model=cm)
    recs = db.get_all_tuning_records()
    assert len(recs) == 16
    pairs = cm.stats.measured["main"]
    assert len(pairs) == 16
    measured = sorted(float(np.median([float(s) for s in r.run_secs])) for r in recs)
    np.testing.assert_allclose(sorted(y for _, y in pairs), measured, rtol=1e-9)
    assert cm.stats.programs_scored > 100 and cm.stats.failed == 0
    s = cm.stats.summary()
    assert s["measured_programs"] == 16 and -1 <= s["kendall_tau_by_task"]["main"] <= 1
    assert "16 measurements" in cm.stats.describe()


def test_cost_model_names():
    from perfcast.errors import PerfcastError
    from perfcast.search import search_cost_model

    assert search_cost_model("xgb") == "xgb" and search_cost_model("random") == "random"
    with pytest.raises(ValueError, match="unknown cost model 'nope'; known: perfcast, random, xgb"):
        search_cost_model("nope")
    with pytest.raises(PerfcastError, match="--model only applies to --cost-model perfcast"):
        search_cost_model("xgb", model="somewhere")


def test_tune_cli_bad_cost_model_is_one_line(tmp_path):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "perfcast.cli.app", "tune", "mlp", "--out", str(tmp_path / "db"),
                          "--cost-model", "nope"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == "error: unknown cost model 'nope'; known: perfcast, random, xgb"
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "db").exists()  # refused before anything was tuned


def test_bundled_search_model_reads_no_assembly():
    from perfcast import paths
    from perfcast.models import load_model

    m = load_model(str(paths.bundled_search_model_dir()))
    assert not m.needs_asm and m.name == "lgbm" and m.params["features"] == "program"
