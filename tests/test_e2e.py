"""Whole networks: the replayer (CDMPP Algorithm 2) against hand schedules, the kernel graph of a real network,
and `perfcast predict` on the MLP with a real measurement."""

from __future__ import annotations

import json
import math
import re

import pytest

from perfcast.e2e.replayer import Kernel, replay
from perfcast.errors import PerfcastError


def chain_and_branch():
    # a -> b -> d, a -> c -> d
    return [Kernel("a", 1.0), Kernel("b", 2.0, (0,)), Kernel("c", 3.0, (0,)), Kernel("d", 0.5, (1, 2))]


def test_one_unit_is_the_sum_of_durations_and_gaps():
    ks = chain_and_branch()
    ks[1].gap_s = 0.25
    r = replay(ks)
    assert r.total_s == pytest.approx(1.0 + 2.0 + 0.25 + 3.0 + 0.5)
    # a first, d last; b and c in between in ready-time order (both ready at 1.0: index order)
    assert r.start_s == pytest.approx([0.0, 1.0, 3.25, 6.25])
    assert r.end_s == pytest.approx([1.0, 3.25, 6.25, 6.75])


def test_two_streams_overlap_independent_branches():
    r = replay(chain_and_branch(), units={"cpu": 2})
    # b and c run side by side after a: d starts when the longer branch (c, 3.0) ends
    assert r.total_s == pytest.approx(1.0 + 3.0 + 0.5)
    assert {r.unit[1], r.unit[2]} == {"cpu:0", "cpu:1"}


def test_split_kernels_run_on_several_units_hl100_style():
    ks = [Kernel("conv", 3.0, (), "gemm"), Kernel("relu", 1.0, (0,), "tpc")]
    r = replay(ks, units={"gemm": 3, "tpc": 8}, split={"gemm": 3})
    assert r.total_s == pytest.approx(3.0 / 3 + 1.0)
    assert r.end_s[0] == pytest.approx(1.0)


def test_replayer_errors():
    with pytest.raises(PerfcastError, match="cycle"):
        replay([Kernel("a", 1.0, (1,)), Kernel("b", 1.0, (0,))])
    with pytest.raises(PerfcastError, match="lacks"):
        replay([Kernel("a", 1.0, (), "gemm")])
    with pytest.raises(PerfcastError, match="needs at least 3 gemm units"):
        replay([Kernel("a", 1.0, (), "gemm")], units={"gemm": 2}, split={"gemm": 3})


def test_kernel_graph_of_the_mlp_follows_the_dataflow():
    from perfcast.collect.tasks import fuse, to_relax
    from perfcast.e2e.replayer import kernel_graph

    _, _, mod = to_relax("mlp", 1)
    g = kernel_graph(fuse(mod))
    assert len(g) >= 3
    assert g[0][2] == ()  # the first kernel reads only the input
    for i, (_, _, deps) in enumerate(g[1:], start=1):
        assert deps and max(deps) < i  # every later kernel reads an earlier one
    durations = [Kernel(n, 1e-3 * (i + 1), d) for i, (n, _, d) in enumerate(g)]
    assert replay(durations).total_s == pytest.approx(sum(k.duration_s for k in durations))


@pytest.mark.slow
def test_predict_mlp_with_measure_is_real_and_consistent():
    from perfcast.e2e import predict_network

    r = predict_network("mlp", batch_size=1, device="local", measure=True)
    assert r["kernels"] and r["predicted_s"] > 0 and r["measured_s"] > 0
    total = sum(k["total_predicted_s"] for k in r["kernels"])
    assert r["predicted_s"] == pytest.approx(total)  # one unit: the replay is the sum
    assert math.isclose(sum(k["share"] for k in r["kernels"]), 1.0, rel_tol=1e-9)
    # TVM's default kernels repeat no loop-invariant work: none is flagged (`coverage.recomputed_share`)
    assert not any("recomputes" in k for k in r["kernels"]) and "loop-invariant" not in r.get("warning", "")
    # the measurement is a real median of repeats (the round with the lowest median: protocol 2) and the error is
    # what it says
    assert min(r["measured_repeats_s"]) <= r["measured_s"] <= max(r["measured_repeats_s"])
    assert len(r["measured_rounds_s"]) == 3 and r["measured_s"] == min(r["measured_rounds_s"])
    assert r["error"] == pytest.approx((r["predicted_s"] - r["measured_s"]) / r["measured_s"])
    # every kernel was timed in the network; one by one they add up to about the whole network: the three dense
    # layers are nearly all of an MLP's time. The bounds are loose because an instrumented run is one cold call
    # with Python hooks between kernels while the network time is a warm time-evaluator loop (measured 0.9-1.16x
    # on this 2 ms network; 0.97-1.03x on resnet50, mobilenet_v2, bert_tiny). The two are timed apart, and a burst
    # of CPU steal on a shared host can slow one of them (1.71x once in a clean-clone CI on the znver3 host,
    # 2026-11-30): a pair outside the bounds is measured again, up to twice, before the test fails
    assert all("measured_s" in k for k in r["kernels"])
    ratios = [r["measured_kernels_sum_s"] / r["measured_s"]]
    while not 0.6 <= ratios[-1] <= 1.5 and len(ratios) < 3:
        again = predict_network("mlp", batch_size=1, device="local", measure=True)
        ratios.append(again["measured_kernels_sum_s"] / again["measured_s"])
    assert 0.6 <= ratios[-1] <= 1.5, ratios
    for k in r["kernels"]:
        assert k["ratio"] == pytest.approx(k["measured_s"] / k["predicted_s"])
    # the VM allocated the two hidden activations and the output (TVM's plan) beside the weights and inputs: more
    # than nothing, no more than the liveness bound (which also counts kernel workspace)
    mem = r["memory"]
    assert mem["measured_bytes"] == mem["weights_bytes"] + mem["input_bytes"] + 4 * (512 + 512 + 10)
    assert mem["measured_bytes"] <= mem["peak_bytes"]
    # outliers are exactly the kernels at >= 1.5x, ranked by the time they lose
    lost = lambda k: (k["measured_s"] - k["predicted_s"]) * k["calls"]  # noqa: E731
    assert [o["name"] for o in r["outliers"]] == [k["name"] for k in sorted(
        (k for k in r["kernels"] if k["ratio"] >= 1.5), key=lambda k: -lost(k))]


def test_a_reshape_that_only_relabels_is_a_view_not_a_kernel(tmp_path):
    """tvm.compile turns a reshape kernel that only relabels its input into a view (RewriteDataflowReshape): it is
    not predicted, and every kernel that is predicted is one the compiled network ran."""
    from perfcast.e2e import predict_network

    f = tmp_path / "reshaping.py"
    f.write_text(
        "import torch\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a, self.b = torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)\n"
        "    def forward(self, x):\n"
        "        h = self.a(x).reshape(x.shape[0], 8, 8)\n"
        "        return self.b(h.reshape(x.shape[0], 64)), h\n"
        "def build(batch_size):\n"
        "    torch.manual_seed(0)\n"
        "    return Net().eval(), (torch.randn(batch_size, 64),)\n")
    r = predict_network(f"{f}:build", measure=True, context=False)
    names = [k["name"] for k in r["kernels"]]
    assert names == ["fused_matmul_add"] and r["kernels"][0]["calls"] == 2, names  # the two dense layers, one task
    assert all("measured_s" in k for k in r["kernels"])


def test_outliers_rank_by_time_lost():
    from perfcast.e2e.predict import attach_measured_kernels

    out = {"kernels": [{"name": "a", "workload_key": "ka", "calls": 1, "predicted_s": 1e-3},
                       {"name": "b", "workload_key": "kb", "calls": 4, "predicted_s": 1e-4},
                       {"name": "c", "workload_key": "kc", "calls": 1, "predicted_s": 2e-3}],
           "measured_kernels_s": {"a": 2e-3, "b1": 5e-4, "b2": 3e-4, "c": 2.1e-3}}
    attach_measured_kernels(out, {"ka": {"a"}, "kb": {"b1", "b2"}, "kc": {"c"}})
    b = out["kernels"][1]
    assert b["measured_s"] == pytest.approx(4e-4) and b["ratio"] == pytest.approx(4.0)  # median over its names
    # a loses 1 ms once; b loses 0.3 ms 4 times = 1.2 ms; c (1.05x) is no outlier
    assert [o["name"] for o in out["outliers"]] == ["b", "a"]
    assert out["outliers"][0]["excess_s"] == pytest.approx(1.2e-3)
    assert out["measured_kernels_sum_s"] == pytest.approx(2e-3 + 4 * 4e-4 + 2.1e-3)


def test_a_device_the_model_never_saw_gets_a_warning_naming_the_fix():
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key
    from perfcast.e2e.predict import unseen_device_warning
    from perfcast.models import load_model

    m = load_model(None)  # the bundled model records the devices it trained on
    seen = m.info_["train_devices"]
    assert sum(seen.values()) == m.n_train_
    w = unseen_device_warning(m, get_device("local:mcpu=sandybridge,threads=1"), "local:mcpu=sandybridge,threads=1")
    assert "no measurements of 'local:mcpu=sandybridge,threads=1@" in w
    assert ("perfcast adapt --device local:mcpu=sandybridge,threads=1 --budget-tasks 20 --method proxy --param "
            "then=cmd --out mymodel") in w
    local = get_device("local")
    assert (unseen_device_warning(m, local, "local") is None) == (device_key(local) in seen)
    from perfcast.eval.workflow import trained_on

    sandy = device_key(get_device("local:mcpu=sandybridge,threads=1"))
    assert trained_on(m, [sandy, next(iter(seen))]).tolist() == [False, True]
    assert trained_on(object(), [sandy]).tolist() == [True]  # a model that does not say where it trained


def test_kernels_in_element_types_the_model_never_trained_on_get_a_warning(tmp_path):
    """The mlp's kernels are float32: the bundled model says nothing; a copy told it trained on int8 programs only
    names float32 for all of them in the network's warning (and still predicts the same)."""
    import shutil

    from perfcast import paths
    from perfcast.e2e.predict import predict_network
    from perfcast.models.base import update_model_info

    plain = predict_network("mlp", context=False)
    assert "warning" not in plain or "training programs use" not in plain["warning"]
    other = shutil.copytree(paths.bundled_model_dir(), tmp_path / "int8-only")
    update_model_info(other, "train_dtypes", {"int8": 10})
    r = predict_network("mlp", model=str(other), context=False)
    n = len(r["kernels"])
    assert f"{n} of {n} kernels use float32, which none of the model's training programs use" in r["warning"]
    assert r["predicted_s"] == pytest.approx(plain["predicted_s"], rel=1e-9)


# ---------------------------------------------------------------------------------------------------- memory
def test_mlp_memory_by_hand():
    from perfcast.collect.tasks import fuse, to_relax
    from perfcast.e2e.memory import network_memory

    m = network_memory(fuse(to_relax("mlp", 1, None)[2]))
    f = 4  # float32
    assert m.weights_bytes == f * (784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10)
    assert m.input_bytes == f * 784 and m.output_bytes == f * 10
    # dense2 runs while dense1's output (512 floats) is live and writes its own (512); inside, its unfused stages
    # (matmul, add: 512 floats each) are workspace
    assert m.peak_intermediate_bytes == f * (512 + 512 + 2 * 512) and m.peak_kernel == "fused_matmul1_add_relu"
    assert m.peak_bytes == m.weights_bytes + m.input_bytes + m.peak_intermediate_bytes
    # per-layer footprints (inputs incl. weights + output + workspace) for the layerwise paper's two estimators
    fp = [f * (784 + 784 * 512 + 512 + 512 + 2 * 512), f * (512 + 512 * 512 + 512 + 512 + 2 * 512),
          f * (512 + 512 * 10 + 10 + 10 + 10)]  # the last layer has no relu: only its matmul stage is workspace
    assert m.two_largest_bytes == fp[0] + fp[1]
    assert m.twice_mean_bytes == int(2 * sum(fp) / 3)


def test_resnet18_weights_are_its_parameters_and_batchnorm_statistics():
    from perfcast.collect.tasks import fuse, to_relax
    from perfcast.e2e.memory import network_memory
    from perfcast.networks import get_network

    torch_model, _ = get_network("resnet18").factory(1)
    n = sum(p.numel() for p in torch_model.parameters()) + sum(
        b.numel() for name, b in torch_model.named_buffers() if b.is_floating_point())  # running mean / var
    m = network_memory(fuse(to_relax("resnet18", 1, None)[2]))
    assert m.weights_bytes == 4 * n
    assert m.input_bytes == 4 * 3 * 224 * 224 and m.output_bytes == 4 * 1000
    assert m.two_largest_bytes >= m.twice_mean_bytes > 0


# ------------------------------------------------------------------------------------------------- schedules
@pytest.fixture(scope="module")
def mlp_tuned_db(tmp_path_factory):
    """A real meta-schedule database: the MLP's 3 tasks tuned with 48 trials here (~1 min)."""
    from perfcast.e2e.schedules import tune_network

    return tune_network("mlp", tmp_path_factory.mktemp("mlpdb"), trials=48)


def test_tuning_logs_to_stderr_so_stdout_stays_parseable(tmp_path, capfd):
    """meta-schedule's log handler writes to stdout; `--json` output of `perfcast tune` / `bench/e2e.py` needs it on
    stderr."""
    from perfcast.e2e.schedules import tune_network

    tune_network("mlp", tmp_path / "db", trials=16)
    out, err = capfd.readouterr()
    assert "[INFO]" not in out and "Initializing Task" not in out
    assert "Initializing Task #0" in err


def test_tuned_schedules_are_predicted_and_compiled(mlp_tuned_db):
    from perfcast.e2e import predict_network

    default = predict_network("mlp", measure=True)
    tuned = predict_network("mlp", measure=True, schedules=f"tuned:{mlp_tuned_db}")
    assert tuned["scheduled_kernels"] == 3 and tuned["untuned_kernels"] == 0
    assert default["scheduled_kernels"] == 0 and default["schedules"] == "default"
    # the same kernels (task keys), now with the database's programs: tuned kernels are an order of magnitude
    # faster than TVM's unscheduled defaults, measured (~2 ms -> ~0.07 ms here) and predicted
    assert {k["workload_key"] for k in tuned["kernels"]} == {k["workload_key"] for k in default["kernels"]}
    assert tuned["measured_s"] < 0.3 * default["measured_s"]
    assert tuned["predicted_s"] < 0.3 * default["predicted_s"]
    assert all("measured_s" in k for k in tuned["kernels"])  # the compiled module kept the kernels' names


def test_sweep_says_which_batch_sizes_a_tuned_database_does_not_cover(mlp_tuned_db):
    """The database was tuned at batch 1: at batch 2 the MLP's kernels are other tasks, left TVM's defaults, and the
    command says the rows then compare tuned with untuned code."""
    from typer.testing import CliRunner

    from perfcast.cli.app import app

    res = CliRunner().invoke(app, ["sweep", "mlp", "--batch-sizes", "1,2", "--schedules", f"tuned:{mlp_tuned_db}"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "local batch 2: 3 of 3" in flat and "local batch 1:" not in flat
    assert "tune at that batch size (`perfcast tune --batch-size N`)" in flat
    res = CliRunner().invoke(app, ["sweep", "mlp", "--batch-sizes", "1,2", "--schedules", f"tuned:{mlp_tuned_db}",
                                   "--json"])
    rows = json.loads(res.output)["rows"]
    assert [(x["scheduled_kernels"], x["untuned_kernels"]) for x in rows] == [(3, 0), (0, 3)]
    # a single prediction with that database at batch 2 is still an error naming the cause (only the sweep allows it)
    from perfcast.e2e import predict_network

    with pytest.raises(PerfcastError, match="the database has no record of any kernel of this network"):
        predict_network("mlp", batch_size=2, schedules=f"tuned:{mlp_tuned_db}")


def test_tuned_kernels_are_predicted_as_the_fastest_of_their_search(mlp_tuned_db):
    """Selection-aware prediction (perfcast.e2e.selection) on a real database: each tuned kernel with several
    candidates is the median fastest of the model's predictions of them, computed here from the database directly;
    sigma 0 is the kept program's own prediction."""
    from perfcast._tvm.util import main_func
    from perfcast.e2e import predict_network
    from perfcast.e2e.predict import lower_network
    from perfcast.e2e.selection import fastest_of, model_sigma, search_candidates
    from perfcast.devices import get_device
    from perfcast.eval.workflow import predict_programs
    from perfcast.models import load_model

    spec = f"tuned:{mlp_tuned_db}"
    sel = predict_network("mlp", schedules=spec, context=False)
    kept = predict_network("mlp", schedules=spec, context=False, selection_sigma=0)
    cands = search_candidates(str(mlp_tuned_db))
    low = lower_network("mlp", 1, get_device("local"), spec)
    assert kept["selection"] == {"sigma": 0.0, "kernels": 0, "kept_predicted_s": kept["predicted_s"]}
    sigma = model_sigma(load_model())  # the bundled model's fitted one
    assert sel["selection"]["sigma"] == sigma and sel["selection"]["kernels"] == sum(len(c) > 1 for c in cands.values())
    assert sel["selection"]["kernels"] >= 1
    assert sel["selection"]["kept_predicted_s"] == pytest.approx(kept["predicted_s"], rel=1e-9)
    # a program predicted alone and inside a batch differs by float32 rounding (torch picks other kernels per batch
    # size): up to 1.6e-6 relative seen on 2026-12-05, where a bound of one in a million failed one run in five
    rel = 1e-5
    by_key = {k["workload_key"]: k for k in kept["kernels"]}
    for k in sel["kernels"]:
        own = predict_programs([low.programs[k["workload_key"]]])[0]
        assert by_key[k["workload_key"]]["predicted_s"] == pytest.approx(own, rel=rel)
        c = cands[k["workload_key"]]
        if len(c) == 1:
            assert "candidates" not in k and k["predicted_s"] == pytest.approx(own, rel=rel)
            continue
        # the kept program is one of the candidates; the fastest of them is predicted below the best prediction
        assert any(tvm_equal(main_func(x), main_func(low.programs[k["workload_key"]])) for x in c)
        p = predict_programs(c)
        assert k["candidates"] == len(c) and k["kept_predicted_s"] == pytest.approx(own, rel=rel)
        assert k["predicted_s"] == pytest.approx(fastest_of(p, sigma), rel=rel)
        # at or below the best prediction (equal to float noise when the fastest candidate is many sigma ahead)
        # (p is predicted in another batch than the network's candidates: float32 noise, 1.8e-7 seen on 2026-12-06)
        assert k["predicted_s"] <= p.min() * (1 + rel) and p.min() <= own * (1 + rel)  # batch vs single: noise
    assert sel["predicted_s"] <= kept["predicted_s"] * (1 + rel)
    with pytest.raises(PerfcastError, match=re.escape("selection sigma -0.1 must be between 0 and 2")):
        predict_network("mlp", schedules=spec, selection_sigma=-0.1)


def test_selection_sigma_is_fitted_stored_in_the_model_and_used(mlp_tuned_db, tmp_path):
    """`fit_sigma` on tuned kernels whose times alone are, by construction, the fastest-of predictions with sigma
    0.3 recovers 0.3 (ratio 1 there; the kept programs' ratio by hand); `save_sigma` stores it in the model's
    model.json without touching its learned state, and `perfcast predict` then uses it."""
    import shutil

    import numpy as np

    from perfcast import paths
    from perfcast.devices import get_device
    from perfcast.e2e import predict_network
    from perfcast.e2e.predict import lower_network
    from perfcast.e2e.selection import candidate_predictions, fastest_of, fit_sigma, model_sigma, save_sigma
    from perfcast.features.cache import features_of_programs
    from perfcast.models import load_model

    spec, sched = get_device("local"), f"tuned:{mlp_tuned_db}"
    model = load_model()
    low = lower_network("mlp", 1, spec, sched)
    keys = list(low.programs)
    own = model.predict(features_of_programs([low.programs[k] for k in keys], spec, asm=model.needs_asm))
    cand = candidate_predictions(keys, str(mlp_tuned_db), spec, model)
    assert 1 <= len(cand) <= len(keys)
    alone = np.array([fastest_of(cand[k], 0.3) if k in cand else own[i] for i, k in enumerate(keys)])
    calls = np.arange(1, len(keys) + 1)
    rows = [{"network": "mlp", "schedules": sched, "kernel": k, "workload_key": k, "calls": int(c),
             "isolated_s": float(t), "in_network_s": float(t), "io_bytes": 0} for k, c, t in zip(keys, calls, alone)]
    best, out = fit_sigma(rows, ["mlp"], model, spec, sigmas=(0.0, 0.3, 0.6))  # far apart: no tie in float
    assert best == 0.3 and out["mlp"][0.3] == pytest.approx(1.0, rel=1e-9)
    assert out["mlp"]["kept"] == pytest.approx((calls * own).sum() / (calls * alone).sum(), rel=1e-6)
    assert out["mlp"][0.6] < out["mlp"][0.3] < out["mlp"][0.0] <= out["mlp"]["kept"] * (1 + 1e-6)  # batch float noise
    assert out["mlp"]["tuned_kernels"] == len(cand) and out["mlp"]["kernels"] == len(keys)
    with pytest.raises(PerfcastError, match="the samples have no tuned kernels of 'resnet18'; measure them with "
                                            r"`perfcast context resnet18@tuned:DB"):
        fit_sigma(rows, ["resnet18"], model, spec)

    d = shutil.copytree(paths.bundled_model_dir(), tmp_path / "m")
    save_sigma(d, best, ["mlp"], "local@test")
    again = load_model(d)
    assert model_sigma(again) == 0.3 and again.info_["selection"] == {"sigma": 0.3, "networks": ["mlp"],
                                                                        "device": "local@test"}
    assert again.info_["members"] == model.info_["members"]  # the rest of model.json as it was
    X = features_of_programs(list(low.programs.values()), spec, asm=model.needs_asm)
    np.testing.assert_array_equal(again.predict(X), model.predict(X))
    assert predict_network("mlp", schedules=sched, context=False, model=str(d))["selection"]["sigma"] == 0.3
    with pytest.raises(PerfcastError, match=re.escape("selection sigma 3.0 must be between 0 and 2")):
        save_sigma(d, 3.0, ["mlp"], "local@test")


def tvm_equal(a, b) -> bool:
    import tvm_ffi  # tvm.ir has no structural_equal in 0.27

    from perfcast._tvm.util import normalize_primfunc

    return bool(tvm_ffi.structural_equal(normalize_primfunc(a), normalize_primfunc(b)))


def test_fastest_of_against_closed_form_and_monte_carlo():
    from scipy.stats import norm

    from perfcast.e2e.selection import fastest_of

    assert fastest_of([3e-3], 0.3) == 3e-3  # one candidate: no selection
    assert fastest_of([3e-3, 1e-3, 2e-3], 0.0) == 1e-3  # no model error: the best prediction
    for n, sigma in ((2, 0.2), (16, 0.2), (64, 0.5)):  # n equal candidates: P(min > t) = S^n = 1/2
        expect = 1e-3 * math.exp(-sigma * norm.ppf(2 ** (-1 / n)))
        assert fastest_of([1e-3] * n, sigma) == pytest.approx(expect, rel=1e-8)
    import numpy as np

    p = np.array([1e-3, 1.2e-3, 2e-3, 5e-3, 4e-4])
    draws = p * np.exp(0.3 * np.random.default_rng(0).standard_normal((400_000, p.size)))
    assert fastest_of(p, 0.3) == pytest.approx(float(np.median(draws.min(axis=1))), rel=3e-3)
    with pytest.raises(PerfcastError, match=re.escape("selection sigma nan must be between 0 and 2")):
        fastest_of(p, float("nan"))
    with pytest.raises(PerfcastError, match="must be positive and finite"):
        fastest_of([1e-3, 0.0], 0.2)


def test_random_schedules_are_seeded():
    from perfcast.e2e import predict_network

    a, b = predict_network("mlp", schedules="random:3"), predict_network("mlp", schedules="random:3")
    c = predict_network("mlp", schedules="random:4")
    assert a["scheduled_kernels"] == 3 and a["predicted_s"] == b["predicted_s"]
    assert c["predicted_s"] != a["predicted_s"]


def test_a_second_tuner_on_one_database_is_refused(tmp_path):
    from perfcast.e2e.schedules import LOCK_NAME, tune_network, tuning_lock

    with tuning_lock(tmp_path):
        with pytest.raises(PerfcastError, match="another tuner is writing the database .* another --out"):
            tune_network("mlp", tmp_path, trials=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_NAME]  # refused before any work
    with tuning_lock(tmp_path):  # released on exit: the next tuner gets it
        pass


def _children(name: str) -> list[int]:
    """PIDs of this process's child processes whose command line contains `name`."""
    import psutil

    return [c.pid for c in psutil.Process().children() if name in " ".join(c.cmdline())]


def test_the_tuners_builder_survives_a_build_that_hangs(matmul64, target_json, tmp_path):
    """A candidate whose build outlasts the timeout becomes a failed build result (the worker is killed and the
    next candidate gets a new one); a good build is a shared library that computes the matmul."""
    import json

    import numpy as np
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from perfcast.e2e.schedules import isolated_builder

    target = tvm.target.Target(json.loads(target_json))
    inp = ms.builder.BuilderInput(matmul64, target)
    with isolated_builder(timeout_s=0.001) as builder:
        (slow,) = builder.build([inp])  # no LLVM build finishes within 1 ms
    assert slow.artifact_path is None and slow.error_msg.startswith("timeout: build exceeded")
    before = set(_children("perfcast.collect.worker"))
    with isolated_builder() as builder:
        results = [builder.build([inp])[0] for _ in range(2)]
        workers = set(_children("perfcast.collect.worker")) - before
    assert len(workers) == 1  # one worker built both
    assert workers.isdisjoint(_children("perfcast.collect.worker"))  # and is gone after the block
    for res in results:
        assert res.error_msg is None
        f = tvm.runtime.load_module(res.artifact_path)["main"]
        a, b = np.random.default_rng(0).random((2, 64, 64), dtype=np.float32)
        dev = tvm.cpu(0)
        c = tvm.runtime.tensor(np.zeros((64, 64), np.float32), dev)
        f(tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), c)
        np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5)


def test_a_speed_ratio_scales_every_kernel_and_keeps_the_uncalibrated_total():
    from perfcast.e2e import predict_network

    plain, cal = predict_network("mlp", context=False), predict_network("mlp", speed_ratio=1.25, context=False)
    assert cal["speed_ratio"] == 1.25 and "speed_ratio" not in plain
    assert cal["uncalibrated_predicted_s"] == pytest.approx(plain["predicted_s"], rel=1e-12)
    assert cal["predicted_s"] == pytest.approx(1.25 * plain["predicted_s"], rel=1e-12)
    by_name = {k["name"]: k["predicted_s"] for k in plain["kernels"]}
    assert all(k["predicted_s"] == pytest.approx(1.25 * by_name[k["name"]], rel=1e-12) for k in cal["kernels"])
    with pytest.raises(PerfcastError, match="speed ratio -1.0 is not a positive number"):
        predict_network("mlp", speed_ratio=-1.0)


def test_a_network_interval_replays_every_kernel_at_its_bounds(tmp_path, model_of_this_cpu):
    """With the bundled model's interval table: each kernel's bounds are its prediction times its region's factors
    and the network's (one unit, no context) is the sum of the kernels' bounds times their calls; a model without a
    table gives no interval, nor does one on a device it never trained on."""
    import shutil

    from perfcast.e2e import predict_network
    from perfcast.models import load_model

    m = load_model(model_of_this_cpu)
    table = m.info_["intervals"]
    r = predict_network("mlp", model=m, context=False)
    factors = {tuple(b) for b in [table["all"], *table["regions"].values()]}
    for k in r["kernels"]:
        lo, hi = k["predicted_low_s"] / k["predicted_s"], k["predicted_high_s"] / k["predicted_s"]
        assert any(lo == pytest.approx(f[0], rel=1e-9) and hi == pytest.approx(f[1], rel=1e-9) for f in factors)
        assert k["predicted_low_s"] < k["predicted_s"] < k["predicted_high_s"]
    iv = r["interval"]
    assert iv["level"] == 0.8 and iv["fitted_on"] == "validation"
    assert iv["low_s"] == pytest.approx(sum(k["predicted_low_s"] * k["calls"] for k in r["kernels"]), rel=1e-9)
    assert iv["high_s"] == pytest.approx(sum(k["predicted_high_s"] * k["calls"] for k in r["kernels"]), rel=1e-9)
    # the same model without its table
    bare = tmp_path / "bare"
    shutil.copytree(model_of_this_cpu, bare)
    meta = json.loads((bare / "model.json").read_text())
    del meta["info"]["intervals"]
    (bare / "model.json").write_text(json.dumps(meta))
    r2 = predict_network("mlp", model=str(bare), context=False)
    assert "interval" not in r2 and all("predicted_low_s" not in k for k in r2["kernels"])
    assert r2["predicted_s"] == pytest.approx(r["predicted_s"], rel=1e-9)
    # a device the model never measured: the same prediction arithmetic, no interval, and the warning says why
    r3 = predict_network("mlp", device="local:mcpu=sandybridge,threads=1", model=m, context=False)
    assert "interval" not in r3 and all("predicted_low_s" not in k for k in r3["kernels"])
    assert "no interval (the model's errors on those devices do not hold on another" in r3["warning"]


@pytest.mark.parametrize("value, expect", [
    ("fast", "--schedules 'fast' is not one of default, tuned:DB_DIR, random:SEED"),
    ("random:x", "--schedules 'random:x' is not one of"),
    ("tuned:/nonexistent", "'/nonexistent' is not a meta-schedule JSON database"),
])
def test_bad_schedules_are_one_line_errors(value, expect):
    from perfcast.e2e.schedules import parse_schedules
    from perfcast.errors import PerfcastError

    with pytest.raises(PerfcastError, match=re.escape(expect)):
        parse_schedules(value)


# ---- in-network context (perfcast.e2e.context) ---------------------------------------------------------------
def _context_samples(scale=1.2, s_per_byte=1 / 20e9, overhead_s=3e-6, cap=math.inf):
    from perfcast.e2e.context import ContextSample

    rows = [("a", 1, 1e-3, 1 << 20), ("a", 2, 2e-5, 4096), ("a", 4, 5e-4, 8 << 20),
            ("b", 1, 3e-3, 2 << 20), ("b", 3, 1e-6, 256), ("b", 1, 7e-5, 1 << 16)]
    return [ContextSample(net, "default", f"k{i}", f"key{i}", calls, t,
                          scale * t + s_per_byte * min(b, cap) + overhead_s, b)
            for i, (net, calls, t, b) in enumerate(rows)]


def test_context_fit_recovers_the_coefficients_that_made_the_samples():
    from perfcast.e2e.context import fit_context

    fit = fit_context(_context_samples(), "dev")
    assert fit.scale == pytest.approx(1.2, rel=1e-6)
    assert fit.s_per_byte == pytest.approx(1 / 20e9, rel=1e-6)
    assert fit.overhead_s == pytest.approx(3e-6, rel=1e-6)
    assert fit.fit_error == pytest.approx(0.0, abs=1e-9) and fit.kernels == 6
    assert fit.networks == ("a/default", "b/default") and fit.cap_bytes == math.inf
    # bytes beyond about a cache's worth cost nothing more: the cap that made the samples is the one whose fit on
    # one network predicts the other exactly (leave-one-network-out), and the coefficients come back with it
    capped = fit_context(_context_samples(cap=1 << 20), "dev")
    assert capped.cap_bytes == 1 << 20 and capped.s_per_byte == pytest.approx(1 / 20e9, rel=1e-6)
    assert capped.in_network_s(1e-3, 8 << 20) == pytest.approx(1.2e-3 + (1 << 20) / 20e9 + 3e-6, rel=1e-6)
    # the coefficients stay non-negative: samples faster in the network than alone give scale < 1, never a
    # negative bandwidth or overhead
    fast = fit_context(_context_samples(scale=0.5, s_per_byte=0.0, overhead_s=0.0), "dev")
    assert fast.scale == pytest.approx(0.5, rel=1e-6) and fast.s_per_byte >= 0 and fast.overhead_s >= 0
    assert fast.in_network_s(2e-3, 0) == pytest.approx(1e-3, rel=1e-5)


def test_context_file_round_trip_keeps_other_devices_and_checks_its_version(tmp_path):
    import json

    from perfcast.e2e.context import fit_context, load_context, save_context

    p = tmp_path / "context.json"
    assert load_context(p) == {}
    first = fit_context(_context_samples(), "dev1")
    save_context(first, p)
    save_context(fit_context(_context_samples(scale=2.0), "dev2"), p)
    fits = load_context(p)
    assert set(fits) == {"dev1", "dev2"} and fits["dev2"].scale == pytest.approx(2.0, rel=1e-6)
    assert fits["dev1"] == first  # every field back exactly (JSON floats round-trip)
    d = json.loads(p.read_text())
    p.write_text(json.dumps({**d, "version": 99}))
    with pytest.raises(PerfcastError, match="has context version 99, this perfcast reads 1; fit it again"):
        load_context(p)
    p.write_text(json.dumps({"version": 1, "fits": {"dev1": {"scale": 1.0}}}))  # a fit without its other fields
    with pytest.raises(PerfcastError, match="is not a context file \\(bad fit: .*\\); fit it again with `perfcast "
                                            "context NETWORK"):
        load_context(p)
    # no cap is stored as null (JSON has no infinity) and read back as infinity
    assert first.cap_bytes == math.inf and first.to_json()["cap_bytes"] is None
    assert first.describe() == "1.200 x alone + 50 ps per argument byte + 3.00 us per call"
    with pytest.raises(PerfcastError, match="2 kernel samples cannot fit the 3 context coefficients"):
        fit_context(_context_samples()[:2], "dev")


@pytest.mark.slow
def test_mlp_context_is_measured_both_ways_and_predict_applies_the_fit(tmp_path):
    import dataclasses

    from perfcast.e2e import predict_network
    from perfcast.e2e.context import fit_context, measure_context, save_context

    samples = measure_context("mlp")
    # the three dense layers (x, W, bias, out: 4-byte floats), each timed alone and in the network
    assert sorted(s.io_bytes for s in samples) == [4 * (512 + 512 * 10 + 10 + 10), 4 * (512 + 512 * 512 + 512 + 512),
                                                   4 * (784 + 784 * 512 + 512 + 512)]
    assert all(s.calls == 1 and s.isolated_s > 0 and s.in_network_s > 0 for s in samples)
    # timed alone (warm) and in the network (cold weights, a hook around each call): same kernels, same order of
    # magnitude
    assert all(0.3 < s.in_network_s / s.isolated_s < 10 for s in samples)
    fit = fit_context(samples, "the-device")
    assert fit.kernels == 3 and fit.networks == ("mlp/default",)
    path = tmp_path / "ctx.json"
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key

    save_context(dataclasses.replace(fit, device_key=device_key(get_device("local"))), path)
    alone, ctx = predict_network("mlp", context=False), predict_network("mlp", context=str(path))
    assert alone["context"] is None and ctx["context"]["networks"] == ["mlp/default"]
    assert ctx["context"]["formula"] == fit.describe()
    assert ctx["isolated_predicted_s"] == pytest.approx(alone["predicted_s"], rel=1e-12)
    by_key = {k["workload_key"]: k for k in alone["kernels"]}
    io = {s.workload_key: s.io_bytes for s in samples}
    want = sum(k["calls"] * (fit.scale * k["predicted_s"] + fit.s_per_byte * io[key] + fit.overhead_s)
               for key, k in by_key.items())
    assert ctx["predicted_s"] == pytest.approx(want, rel=1e-9)
    with pytest.raises(PerfcastError, match="does not exist; write one with `perfcast context"):
        predict_network("mlp", context=str(tmp_path / "missing.json"))


def test_context_command_fits_stored_samples_and_bad_files_are_one_line(tmp_path):
    import json
    import subprocess
    import sys

    from perfcast.e2e.context import load_context, samples_to_json

    f = tmp_path / "samples.json"
    f.write_text(json.dumps(samples_to_json(_context_samples())))
    out = tmp_path / "ctx.json"

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "perfcast.cli.app", "context", *args], capture_output=True,
                              text=True, timeout=300)

    res = cli("a", "b@default", "--samples", str(f), "--out", str(out), "--device", "local", "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["scale"] == pytest.approx(1.2, rel=1e-6) and got["kernels"] == 6
    assert list(load_context(out).values())[0].overhead_s == pytest.approx(3e-6, rel=1e-6)
    only_a = cli("a", "--samples", str(f), "--out", str(tmp_path / "a.json"), "--json")
    assert json.loads(only_a.stdout)["networks"] == ["a/default"]  # NETWORKS select the stored samples
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    res = cli("a", "--samples", str(bad), "--out", str(out))
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1
    assert f"--samples {str(bad)!r} is not a `perfcast context --samples-out` file" in res.stderr


def test_sweep_batch_sizes_are_checked_in_one_line():
    from perfcast.e2e.sweep import parse_batch_sizes

    assert parse_batch_sizes("8,1, 2,2") == [1, 2, 8]
    for bad in ("1,x", "0,2", "", "-4"):
        with pytest.raises(PerfcastError, match=re.escape(f"--batch-sizes {bad!r} is not a list of positive integers")):
            parse_batch_sizes(bad)


@pytest.mark.slow
def test_sweep_is_predict_network_per_pair_and_measures_what_it_says(tmp_path):
    """`perfcast sweep` on the MLP: every row is `predict_network`'s figure for that (device, batch size), the
    throughput and the choices follow from them by hand, a real measurement per pair, and the plot is written."""
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key
    from perfcast.e2e import predict_network
    from perfcast.e2e.sweep import plot_sweep, sweep_network
    from perfcast.eval.workflow import trained_on
    from perfcast.models import load_model

    m = load_model(None)
    devices = ["local", "local:mcpu=x86-64,threads=1"]
    r = sweep_network("mlp", "1,4", devices, m, measure=True, progress=False)
    assert [(x["device"], x["batch_size"]) for x in r["rows"]] == [(d, b) for d in devices for b in (1, 4)]
    for x in r["rows"]:
        ref = predict_network("mlp", x["batch_size"], x["device"], m)["predicted_s"]
        assert x["predicted_s"] == pytest.approx(ref, rel=1e-9)
        assert x["samples_per_s"] == pytest.approx(x["batch_size"] / ref, rel=1e-9)
        assert x["predicted_per_sample_s"] == pytest.approx(ref / x["batch_size"], rel=1e-9)
        assert x["measured_s"] > 0 and x["error"] == pytest.approx((ref - x["measured_s"]) / x["measured_s"])
        assert x["device_seen"] == trained_on(m, [device_key(get_device(x["device"]))])[0]
        # a device the model never measured gets no interval and a warning naming `perfcast adapt`
        assert ("predicted_low_s" in x) == x["device_seen"]
        assert ("perfcast adapt" in r["warnings"].get(x["device"], "")) == (not x["device_seen"])
    four = {x["device"]: x for x in r["rows"] if x["batch_size"] == 4}
    one = {x["device"]: x for x in r["rows"] if x["batch_size"] == 1}
    for d in devices:  # four samples take longer than one, and the best batch is the higher throughput
        assert four[d]["predicted_s"] > one[d]["predicted_s"] and four[d]["measured_s"] > one[d]["measured_s"]
        top = max((one[d], four[d]), key=lambda x: x["samples_per_s"])
        assert r["best_batch"][d]["batch_size"] == top["batch_size"]
        assert r["best_batch"][d]["within_tie_share"] == [x["batch_size"] for x in (one[d], four[d])
                                                          if x["samples_per_s"] >= 0.9 * top["samples_per_s"]]
    assert r["fastest"] == {b: min(devices, key=lambda d: (one if b == 1 else four)[d]["predicted_s"]) for b in (1, 4)}
    png = plot_sweep(r, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 10_000 and png.endswith("sweep.png")


def test_sweep_command_prints_json_and_names_a_bad_device():
    from typer.testing import CliRunner

    from perfcast.cli.app import app

    res = CliRunner().invoke(app, ["sweep", "mlp", "--batch-sizes", "2,1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [x["batch_size"] for x in out["rows"]] == [1, 2] and out["devices"] == ["local"]
    res = CliRunner().invoke(app, ["sweep", "mlp", "--device", "nosuch"])
    assert res.exit_code != 0 and "nosuch" in str(res.exception)


def test_sweep_refuses_to_measure_a_remote_device_before_measuring_the_local_ones():
    """The remote device is listed second: the error comes before the model loads or `local` is measured (the model
    directory given does not exist, so reaching the model would be a different error)."""
    from perfcast.e2e.sweep import sweep_network

    with pytest.raises(PerfcastError, match="--measure runs on this machine; 'epyc_7452' is remote"):
        sweep_network("mlp", "1", ["local", "epyc_7452"], model="/nonexistent/model", measure=True, progress=False)
