"""perfcast.adapt: CDMPP's KMeans task sampler against a hand-built case; every adaptation method (contract test
over the registry) on the bundled dataset's real mlp records - a small cdmpp trained on one CPU's records, adapted
to the other CPU's records of two tasks; the whole `perfcast adapt` with a real measurement on a code-generation
target the data has no record of; the command's help and errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from perfcast.adapt import get_method, get_sampler, list_methods, list_samplers
from perfcast.errors import PerfcastError, UnknownNameError

SMALL_CDMPP = dict(epochs=25, d_model=16, heads=2, layers=1, z_dim=16, decoder_hidden=32, threads=1, seed=0)
FAST = dict(epochs=30, threads=None)


# ---------------------------------------------------------------------------------------------------------- samplers
def test_kmeans_takes_the_task_nearest_each_centre_largest_cluster_first():
    # cluster A (6 programs): task a1 has 4 programs around (0, 0), a2 has 2 at (0.9, 0) -> centre (0.3, 0), a1 is
    # nearer on average; cluster B (3 programs of task b) at (10, 0); cluster C (2 programs of c) at (0, 10)
    Z = np.array([[0, 0], [0.1, 0], [-0.1, 0], [0, 0.1], [0.9, 0], [0.9, 0.05],
                  [10, 0], [10.1, 0], [9.9, 0], [0, 10], [0, 10.1]])
    tasks = np.array(["a1"] * 4 + ["a2"] * 2 + ["b"] * 3 + ["c"] * 2)
    assert get_sampler("kmeans").select(tasks, Z, 3, seed=0) == ["a1", "b", "c"]
    # one cluster: the single task nearest the mean of every program; Ψ by hand
    one = get_sampler("kmeans").select(tasks, Z, 1, seed=0)
    Zs = (Z - Z.mean(0)) / Z.std(0)
    psi = {t: np.linalg.norm(Zs[tasks == t] - Zs.mean(0), axis=1).mean() for t in set(tasks)}
    assert one == [min(psi, key=psi.get)]


def test_random_sampler_is_seeded_and_distinct():
    tasks = np.repeat([f"t{i}" for i in range(10)], 3)
    a = get_sampler("random").select(tasks, None, 4, seed=1)
    assert a == get_sampler("random").select(tasks, None, 4, seed=1) and len(set(a)) == 4
    assert a != get_sampler("random").select(tasks, None, 4, seed=2)


@pytest.mark.parametrize("name", ["kmeans", "random"])
def test_sampler_budget_errors(name):
    tasks = np.array(["a", "b", "c"])
    with pytest.raises(PerfcastError, match=r"--budget-tasks 4 exceeds the 3 tasks .* use K <= 3"):
        get_sampler(name).select(tasks, np.eye(3), 4)
    with pytest.raises(PerfcastError, match=r"--budget-tasks 0 makes no sense"):
        get_sampler(name).select(tasks, np.eye(3), 0)


def test_candidate_tasks_are_the_ones_adapt_can_measure():
    """A task only a batch-2 network has cannot be collected on the target (adapt collects batch-1 networks), so
    it is no candidate unless the target has records of it; the pool of a filtered frame keeps each row's task."""
    import pandas as pd

    from perfcast.adapt.workflow import measurable, task_pool
    from perfcast.features.cache import ProgramFeatures

    df = pd.DataFrame({"workload_key": ["a", "a", "b", "c", "d"], "program_hash": ["1", "2", "3", "4", "5"]})
    nets = [{"workload_key": "a", "batch_size": 1}, {"workload_key": "b", "batch_size": 2},
            {"workload_key": "c", "batch_size": 2}, {"workload_key": "c", "batch_size": 1},
            {"workload_key": "d", "batch_size": 4}]
    is_t = np.array([False, False, False, False, True])  # the target has d measured already
    np.testing.assert_array_equal(measurable(df, nets, is_t), [True, True, False, True, True])
    X = ProgramFeatures(leaves=[np.full((1, 2), float(i)) for i in range(5)], ordering=[np.zeros(1)] * 5,
                        stores=[np.zeros((1, 2))] * 5, analytic=np.zeros((5, 3)), device=np.zeros((5, 2)))
    keys, Xp = task_pool(df[measurable(df, nets, is_t)], X, np.ones(2))
    assert keys.tolist() == ["a", "a", "c", "d"]
    assert [float(x[0, 0]) for x in Xp.leaves] == [0.0, 1.0, 3.0, 4.0]  # the rows of X those tasks are at
    np.testing.assert_array_equal(Xp.device, np.ones((4, 2)))


def test_source_sample_caps_each_device_and_prefers_the_pool():
    """`perfcast adapt` computes features only of the records it uses: per source device (code-generation variants
    apart) at most `per_device`, the task pool's rows first."""
    import pandas as pd

    from perfcast.adapt.workflow import pool_rows, source_sample

    df = pd.DataFrame({"device_spec_json": ["A"] * 6 + ["B"] * 2,
                       "workload_key": ["t", "t", "t", "u", "u", "v", "t", "u"],
                       "program_hash": ["1", "2", "3", "4", "4", "5", "1", "4"]}, index=np.arange(10, 18))
    got = source_sample(df, per_device=3, prefer=[11, 14, 16])
    assert len(got) == 5 and set(got) >= {11, 14, 16, 17} and sum(df.loc[got, "device_spec_json"] == "A") == 3
    assert source_sample(df, per_device=3, seed=1).tolist() == source_sample(df, per_device=3, seed=1).tolist()
    assert source_sample(df, per_device=100).tolist() == list(range(10, 18))
    # one row per distinct (task, program), at most per_task per task: t has programs 1, 2, 3; u has 4; v has 5
    rows = pool_rows(df, per_task=2, seed=0)
    assert df.loc[rows, "workload_key"].tolist().count("t") == 2 and len(rows) == 4
    assert set(df.loc[rows, "program_hash"]) >= {"4", "5"}


def test_registries_name_what_they_know():
    assert list_samplers() == ["kmeans", "random"]
    assert list_methods() == ["cmd", "finetune", "lottery", "mtl", "proxy"]
    with pytest.raises(UnknownNameError, match="unknown sampler 'kmedoids'; known: kmeans, random"):
        get_sampler("kmedoids")
    with pytest.raises(ValueError, match="unknown adaptation method 'dann'; known: cmd, finetune, lottery, mtl, proxy"):
        get_method("dann")


# ----------------------------------------------------------------------------------------------------------- methods
@pytest.fixture(scope="module")
def two_cpus(mlp_dataset):
    """A small cdmpp trained on one CPU's mlp records; the other CPU's records of two tasks to adapt to."""
    from perfcast.data.store import Dataset
    from perfcast.features.cache import dataset_features
    from perfcast.models import get_model

    data, df = mlp_dataset
    X = dataset_features(Dataset(data), df, jobs=1, progress=False)
    y = df.latency_s.to_numpy()
    devs = set(df.device_key)
    intel, amd = "local@Intel(R) Xeon(R) Processor/emeraldrapids", "local@AMD EPYC/znver3"
    assert {intel, amd} <= devs  # the bundled data holds both CPUs' measurements of the mlp
    src = np.flatnonzero(df.device_key.to_numpy() == amd)
    tgt_tasks = sorted(df.workload_key.unique())[:2]
    tgt = np.flatnonzero((df.device_key.to_numpy() == intel) & df.workload_key.isin(tgt_tasks).to_numpy())
    base = get_model("cdmpp", **SMALL_CDMPP).fit(X.take(src), y[src])
    return base, X, y, src, tgt


@pytest.mark.parametrize("method", list_methods())
def test_every_method_fits_the_target_and_leaves_the_base_alone(method, two_cpus, tmp_path):
    import torch

    from perfcast.models import load_model

    base, X, y, src, tgt = two_cpus
    before_state = {k: v.clone() for k, v in base.net_.state_dict().items()}
    err0 = np.mean(np.abs(base.predict(X.take(tgt)) - y[tgt]) / y[tgt])
    extra = {"then": "finetune"} if method == "proxy" else {}  # proxy alone moves no weight (its own test below)
    m = get_method(method, epochs=30, val_frac=0.0, seed=0, **extra).adapt(base, X.take(tgt), y[tgt], X.take(src),
                                                                           y[src])
    err1 = np.mean(np.abs(m.predict(X.take(tgt)) - y[tgt]) / y[tgt])
    assert err0 > 0.15  # the other CPU really differs
    assert err1 < 0.7 * err0, (method, err0, err1)  # it learned the target's measurements
    assert all(torch.equal(before_state[k], v) for k, v in base.net_.state_dict().items())  # base untouched
    assert m.adapt_info_["method"] == method and m.adapt_info_["n_target"] == len(tgt)
    m.save(tmp_path / "m")
    np.testing.assert_allclose(load_model(tmp_path / "m").predict(X.take(tgt)), m.predict(X.take(tgt)), rtol=1e-5)


@pytest.mark.parametrize("method", ["cmd", "lottery"])
def test_a_model_on_assembly_features_adapts(method, two_cpus, mlp_dataset):
    """cdmpp reading the assembly features (`use_asm`): adapting keeps its asm standardizer (the source's) and
    learns the target like the model without them."""
    from perfcast.data.store import Dataset
    from perfcast.features.asm_cache import dataset_asm
    from perfcast.models import get_model

    _, X, y, src, tgt = two_cpus
    data, df = mlp_dataset
    X.asm = dataset_asm(Dataset(data), df, jobs=1, progress=False)
    try:
        base = get_model("cdmpp", use_asm=True, **SMALL_CDMPP).fit(X.take(src), y[src])
        m = get_method(method, epochs=30, val_frac=0.0, seed=0).adapt(base, X.take(tgt), y[tgt], X.take(src), y[src])
        err0, err1 = (np.mean(np.abs(p - y[tgt]) / y[tgt]) for p in (base.predict(X.take(tgt)), m.predict(X.take(tgt))))
        assert err0 > 0.15 and err1 < 0.7 * err0, (method, err0, err1)
        np.testing.assert_array_equal(m.asm_norm_.mean_, base.asm_norm_.mean_)
        X.asm = None
        with pytest.raises(PerfcastError, match="assembly"):
            m.predict(X.take(tgt))
    finally:
        X.asm = None


def test_an_ensemble_adapts_each_member(two_cpus, tmp_path):
    """Adapting an ensemble (cdmpp + an mlp regressing latency per unit of work) = adapting each member alone."""
    from perfcast.models import get_model, load_model

    base, X, y, src, tgt = two_cpus
    ens = get_model("ensemble", threads=1, members=[["cdmpp", SMALL_CDMPP],
                                                    ["mlp", dict(epochs=30, hidden=32, target_scale="work")]])
    ens.fit(X.take(src), y[src])
    before = ens.predict(X.take(tgt))
    meth = lambda: get_method("finetune", epochs=20, val_frac=0.0, seed=0)  # noqa: E731
    m = meth().adapt(ens, X.take(tgt), y[tgt])
    alone = [meth().adapt(mm, X.take(tgt), y[tgt]).predict(X.take(tgt)) for mm in ens.members_]
    np.testing.assert_allclose(m.predict(X.take(tgt)), np.sqrt(alone[0] * alone[1]), rtol=1e-5)
    np.testing.assert_array_equal(ens.predict(X.take(tgt)), before)  # the base ensemble is untouched
    err0, err1 = (np.mean(np.abs(p - y[tgt]) / y[tgt]) for p in (before, m.predict(X.take(tgt))))
    assert err1 < 0.7 * err0, (err0, err1)
    # the work-scaled member learned latency per unit of work: its own error fell too
    e_mlp0 = np.mean(np.abs(ens.members_[1].predict(X.take(tgt)) - y[tgt]) / y[tgt])
    assert np.mean(np.abs(alone[1] - y[tgt]) / y[tgt]) < 0.8 * e_mlp0, e_mlp0
    assert m.adapt_info_["method"] == "finetune" and len(m.adapt_info_["members"]) == 2
    m.save(tmp_path / "ens")
    np.testing.assert_allclose(load_model(tmp_path / "ens").predict(X.take(tgt)), m.predict(X.take(tgt)), rtol=1e-5)


def test_an_ensembles_residual_stage_is_boosted_on_what_the_adapted_members_miss(two_cpus, tmp_path):
    """After the members, the residual stage gets up to tree_rounds more trees fitted to the target's measured /
    (adapted members' geometric mean), by hand here; the target error falls below keeping the source stage."""
    from perfcast.models import get_model, load_model

    base, X, y, src, tgt = two_cpus
    s_tr, s_va = src[: int(0.8 * len(src))], src[int(0.8 * len(src)):]
    ens = get_model("ensemble", threads=1, members=[["xgb", {"n_estimators": 60}],
                                                    ["lgbm", {"features": "program", "target_scale": "work"}]],
                    residual={"n_estimators": 30, "early_stopping": 5})
    ens.fit(X.take(s_tr), y[s_tr], X.take(s_va), y[s_va])
    Xt, yt = X.take(tgt), y[tgt]
    meth = lambda: get_method("finetune", val_frac=0.0, seed=0, tree_rounds=30)  # noqa: E731
    m = meth().adapt(ens, Xt, yt)
    members = [meth().adapt(mm, Xt, yt) for mm in ens.members_]
    mean = np.sqrt(members[0].predict(Xt) * members[1].predict(Xt))
    stage = ens.residual_.boosted(Xt, yt / mean, rounds=30, val_frac=0.0, seed=0)
    np.testing.assert_allclose(m.predict(Xt), mean * stage.predict(Xt), rtol=1e-6)
    kept = ens.with_members(members)  # the source devices' stage as it was
    err = lambda p: np.mean(np.abs(p - yt) / yt)  # noqa: E731
    assert err(m.predict(Xt)) < 0.9 * err(kept.predict(Xt)), (err(m.predict(Xt)), err(kept.predict(Xt)))
    assert m.adapt_info_["residual"] == {"method": "boosting", "rounds": 30, "n_target": len(tgt)}
    assert ens.residual_.predict(Xt).tolist() == kept.residual_.predict(Xt).tolist()  # the base stage untouched
    m.save(tmp_path / "ens")
    np.testing.assert_allclose(load_model(tmp_path / "ens").predict(Xt), m.predict(Xt), rtol=1e-6)


def test_lottery_updates_only_the_transferable_half(two_cpus):
    base, X, y, src, tgt = two_cpus
    meth = get_method("lottery", epochs=1, val_frac=0.0, seed=0, decay=0.0)
    m = meth.adapt(base, X.take(tgt), y[tgt])
    w0, w1 = base.net_.decoder[0].weight.detach(), m.net_.decoder[0].weight.detach()
    mask = meth.masks_["decoder.0.weight"]
    assert abs(mask.float().mean().item() - 0.5) < 0.01  # ratio 0.5 of the entries
    assert bool((w0[~mask] == w1[~mask]).all())  # decay 0: the domain-variant half did not move
    assert bool((w0[mask] != w1[mask]).any())


def test_mtl_moves_the_siamese_network_by_momentum(two_cpus):
    base, X, y, src, tgt = two_cpus
    slow = get_method("mtl", epochs=2, val_frac=0.0, seed=0, momentum=0.999).adapt(base, X.take(tgt), y[tgt])
    fast = get_method("mtl", epochs=2, val_frac=0.0, seed=0, momentum=0.9).adapt(base, X.take(tgt), y[tgt])
    w0 = base.net_.decoder[0].weight.detach()
    d_slow = (slow.net_.decoder[0].weight.detach() - w0).abs().mean().item()
    d_fast = (fast.net_.decoder[0].weight.detach() - w0).abs().mean().item()
    assert 0 < d_slow < d_fast


@pytest.mark.parametrize("name,params", [("xgb", {}), ("lgbm", {"features": "program", "target_scale": "work"})])
def test_tree_models_adapt_by_continued_boosting(name, params, two_cpus, tmp_path):
    """A tree model (alone or as an ensemble member) is adapted by boosting more trees on the target's residuals:
    its first trees and target transform stay (the base model is untouched), its target error falls, and the
    adapted model round-trips through save/load."""
    from perfcast.models import get_model, load_model

    base, X, y, src, tgt = two_cpus
    trees = get_model(name, n_estimators=60, threads=1, **params).fit(X.take(src), y[src])
    before = trees.predict(X.take(tgt))
    m = get_method("cmd", val_frac=0.0, seed=0, tree_rounds=40).adapt(trees, X.take(tgt), y[tgt],
                                                                       X.take(src), y[src])
    np.testing.assert_array_equal(trees.predict(X.take(tgt)), before)
    err0, err1 = (np.mean(np.abs(p - y[tgt]) / y[tgt]) for p in (before, m.predict(X.take(tgt))))
    assert err0 > 0.15 and err1 < 0.5 * err0, (err0, err1)
    assert m.adapt_info_ == {"method": "boosting", "rounds": 40, "n_target": len(tgt)}
    m.save(tmp_path / name)
    np.testing.assert_allclose(load_model(tmp_path / name).predict(X.take(tgt)), m.predict(X.take(tgt)), rtol=1e-5)


def test_crossfit_intervals_are_the_out_of_fold_errors(two_cpus, mlp_dataset):
    """A new CPU has no record but the measured tasks: with one fold per task, each task is predicted by the model
    adapted to the others, and the interval is the conformal bounds of those errors (computed by hand here)."""
    from perfcast.adapt.workflow import adapt_model, crossfit_intervals
    from perfcast.eval.intervals import MIN_PROGRAMS, conformal_bounds
    from perfcast.features.cache import ProgramFeatures

    base, X, y, src, _ = two_cpus
    _, df = mlp_dataset
    intel = df.device_key.to_numpy() == "local@Intel(R) Xeon(R) Processor/emeraldrapids"
    wk = df.workload_key.to_numpy()
    tasks = sorted(set(wk[intel]))
    measured = {t: (X.take(np.flatnonzero(intel & (wk == t))), y[intel & (wk == t)]) for t in tasks}
    n = sum(len(v[1]) for v in measured.values())
    assert len(tasks) >= 3 and n >= MIN_PROGRAMS
    table = crossfit_intervals(base, "proxy", measured, X.take(src), y[src], folds=len(tasks))
    logs = []
    for t in tasks:
        rest = [u for u in tasks if u != t]
        m = adapt_model(base, "proxy", ProgramFeatures.concat([measured[u][0] for u in rest]),
                        np.concatenate([measured[u][1] for u in rest]), X.take(src), y[src])
        logs.append(np.log(measured[t][1] / m.predict(measured[t][0])))
    np.testing.assert_allclose(table["all"], conformal_bounds(np.concatenate(logs)), rtol=1e-6)
    assert table["n"] == n and table["level"] == 0.8
    assert table["fitted_on"] == f"the {len(tasks)} measured tasks, cross-fitted in {len(tasks)} folds"
    assert crossfit_intervals(base, "proxy", {tasks[0]: measured[tasks[0]]}, X.take(src), y[src]) is None


def test_the_mape_scale_is_the_best_single_factor():
    from perfcast.adapt.proxy import mape_scale

    rng = np.random.default_rng(0)
    pred, y = rng.lognormal(size=41), rng.lognormal(size=41)
    s = mape_scale(pred, y)
    cost = lambda c: np.mean(np.abs(c * pred / y - 1.0))  # noqa: E731  convex, piecewise linear: kinks at y / pred
    assert cost(s) == pytest.approx(min(cost(c) for c in y / pred), abs=1e-12)
    assert mape_scale(2.0 * y, y) == pytest.approx(0.5)


def test_the_measured_proxy_is_scored_on_the_tasks_not_measured():
    """The oracle of bench/device_oracle.py, by hand: task a's programs run exactly 2x slower on the target, task b's
    2x and 3x. Fitted on a, the factor is 2 and b's programs are off by 0 and 1/3; fitted on b, the factor is the
    weighted median of {2, 3} (weights 1/2, 1/3: 2), and a's programs are exact."""
    from perfcast.adapt.proxy import measured_proxy_mape

    ys = np.array([1.0, 5.0, 2.0, 4.0])
    yt = np.array([2.0, 10.0, 4.0, 12.0])
    tasks = np.array(["a", "a", "b", "b"])
    assert measured_proxy_mape(yt, ys, tasks, {"a"}) == pytest.approx((0 + 1 / 3) / 2)
    assert measured_proxy_mape(yt, ys, tasks, {"b"}) == pytest.approx(0.0)
    with pytest.raises(PerfcastError, match="all 2 tasks were measured, none is left to score"):
        measured_proxy_mape(yt, ys, tasks, {"a", "b"})
    with pytest.raises(PerfcastError, match=r"none of the measured tasks \['c'\] has a program measured on both"):
        measured_proxy_mape(yt, ys, tasks, {"c"})


def test_proxy_predicts_the_target_as_its_nearest_source_device(two_cpus, tmp_path):
    """Two source CPUs (the base model trained on both); the target's programs relabelled to a made-up device vector
    the model never saw: the proxy is the source device whose scaled predictions fit them best, found by hand."""
    import dataclasses

    from perfcast.adapt.proxy import distinct_devices, mape_scale
    from perfcast.models import get_model, load_model

    _, X, y, src, tgt = two_cpus
    both = np.setdiff1d(np.arange(len(y)), tgt)  # every record of both CPUs but the target's
    base = get_model("cdmpp", **SMALL_CDMPP).fit(X.take(both), y[both])
    new_vec = np.asarray(X.device[tgt[0]], np.float32) * np.float32(1.5)  # a device between/beyond nothing known
    Xt = dataclasses.replace(X.take(tgt), device=np.tile(new_vec, (len(tgt), 1)))
    devs = distinct_devices(X.device[both])  # (znver3's records carry two vectors 1e-6 apart: one device)
    assert len(devs) >= 2 and len(distinct_devices(X.device[src])) == 1
    by_hand = []
    for d in [*devs, new_vec]:
        p = base.predict(dataclasses.replace(Xt, device=np.tile(d, (len(tgt), 1))))
        s = mape_scale(p, y[tgt])
        by_hand.append((np.mean(np.abs(s * p / y[tgt] - 1)), s, d, p))
    err, s, d, p = min(by_hand, key=lambda t: t[0])
    m = get_method("proxy").adapt(base, Xt, y[tgt], X.take(both), y[both])
    np.testing.assert_allclose(m.predict(Xt), s * p, rtol=1e-6)  # the proxy's prediction times its factor
    np.testing.assert_array_equal(m.predict(X.take(both)), base.predict(X.take(both)))  # source devices: as before
    assert m.device_proxy_[0]["as"] == pytest.approx(d.tolist()) and m.adapt_info_["scale"] == pytest.approx(s)
    assert np.mean(np.abs(m.predict(Xt) - y[tgt]) / y[tgt]) == pytest.approx(err)
    assert len(m.adapt_info_["candidates"]) == len(devs) + 1 and not hasattr(base, "device_proxy_")
    m.save(tmp_path / "p")
    back = load_model(tmp_path / "p")
    np.testing.assert_allclose(back.predict(Xt), m.predict(Xt), rtol=1e-6)
    np.testing.assert_allclose(back.latent(Xt), base.latent(dataclasses.replace(Xt, device=np.tile(d, (len(tgt), 1)))),
                               rtol=1e-5)
    # adapting again to the same device replaces its proxy; then=cmd also trains the weights, through the proxy
    m2 = get_method("proxy", then="cmd", epochs=20, val_frac=0.0).adapt(m, Xt, y[tgt], X.take(both), y[both])
    assert len(m2.device_proxy_) == 1 and m2.adapt_info_["inner"]["method"] == "cmd"
    assert np.mean(np.abs(m2.predict(Xt) - y[tgt]) / y[tgt]) < err
    with pytest.raises(PerfcastError, match=r"unknown parameter\(s\) \['epochs'\] .* pass then=cmd"):
        get_method("proxy", epochs=3).adapt(base, Xt, y[tgt], X.take(both), y[both])
    with pytest.raises(PerfcastError, match="then=proxy adapts nothing more"):
        get_method("proxy", then="proxy").adapt(base, Xt, y[tgt], X.take(both), y[both])
    with pytest.raises(UnknownNameError, match="adaptation method"):
        get_method("proxy", then="magic").adapt(base, Xt, y[tgt], X.take(both), y[both])
    with pytest.raises(PerfcastError, match="picks among the source devices"):
        get_method("proxy").adapt(base, Xt, y[tgt])


def test_methods_need_a_trainable_model_and_target_data(two_cpus):
    base, X, y, src, tgt = two_cpus

    class Table:  # not a cost model any method can train
        name = "table"

    with pytest.raises(PerfcastError, match="adapts the neural cost models .* the model is 'table'"):
        get_method("finetune").adapt(Table(), X.take(tgt), y[tgt])
    with pytest.raises(PerfcastError, match="no measured target programs"):
        get_method("finetune").adapt(base, X.take([]), np.zeros(0))
    with pytest.raises(PerfcastError, match="'cmd' needs records of the source devices"):
        get_method("cmd").adapt(base, X.take(tgt), y[tgt])
    with pytest.raises(PerfcastError, match=r"unknown parameter\(s\) \['epoch'\] for adaptation method 'mtl'"):
        get_method("mtl", epoch=3).adapt(base, X.take(tgt), y[tgt])


# ---------------------------------------------------------------------------------------------------------- workflow
def test_adapt_measures_a_new_target_for_real(two_cpus, mlp_dataset, tmp_path):
    """The data has no record of local:mcpu=nehalem,threads=1: the chosen task's programs are measured by the
    collector (SSE4.2 code, one thread), the model adapted to them and saved with the device among its training
    devices (so `perfcast predict` does not warn about it), without the base's prediction intervals."""
    from perfcast.adapt.workflow import AdaptConfig, run
    from perfcast.data.frame import records_frame
    from perfcast.data.store import Dataset
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key
    from perfcast.models import load_model

    from perfcast.models.base import update_model_info

    base = two_cpus[0]
    base.save(tmp_path / "base")
    update_model_info(tmp_path / "base", "intervals", {"level": 0.8, "n": 100, "all": [0.8, 1.3], "regions": {}})
    data, _ = mlp_dataset
    dev = "local:mcpu=nehalem,threads=1"
    r = run(AdaptConfig(device=dev, model=str(tmp_path / "base"), data=str(data), budget_tasks=1,
                        programs_per_task=2, method="finetune", out=str(tmp_path / "adapted"),
                        params={"epochs": 3}), log=lambda m: None, progress=False)
    assert r["n_tasks"] == 1 and r["programs"] == 2 and r["reused_records"] == 0
    assert r["measure_seconds"] > 0 and r["mape_before"] is None and r["held_out_records"] == 0
    assert r["interval"] is None  # one measured task: nothing to cross-fit an interval on
    assert r["resumed_records"] == 0
    recs = records_frame(Dataset(tmp_path / "adapted" / "measurements"))
    assert len(recs) == 2 and set(recs.device_id) == {dev} and set(recs.workload_key) == set(r["tasks"])
    assert (recs.latency_s > 0).all()
    m = load_model(tmp_path / "adapted")
    assert m.info_["train_devices"][device_key(get_device(dev))] == 2
    assert m.info_["adapted"]["method"] == "finetune"
    # the base's intervals were its errors on its own devices; no held-out record of the target to refit them on
    assert load_model(tmp_path / "base").info_["intervals"]["all"] == [0.8, 1.3] and "intervals" not in m.info_
    # CDMPP Fig. 11 for it: the target's latents come from the measurements beside the adapted model
    from perfcast.adapt.workflow import latent_report

    png, dist = latent_report(tmp_path / "adapted", str(data), tmp_path / "report", progress=False)
    assert png.endswith("latent_pca.png") and (tmp_path / "report" / "latent_pca.png").stat().st_size > 10_000
    assert set(dist) == {"before adaptation", "after adaptation"} and all(v > 0 for v in dist.values())
    with pytest.raises(PerfcastError, match="is not an adapted model; make one with `perfcast adapt --out DIR`"):
        latent_report(tmp_path / "base", str(data), tmp_path / "report", progress=False)
    # a second run into the same measurement directory measures nothing again and counts the time spent before
    r2 = run(AdaptConfig(device=dev, model=str(tmp_path / "base"), data=str(data), budget_tasks=1,
                         programs_per_task=2, method="finetune", out=str(tmp_path / "again"),
                         measure_out=str(tmp_path / "adapted" / "measurements"), params={"epochs": 3}),
             log=lambda m: None, progress=False)
    assert r2["tasks"] == r["tasks"] and r2["resumed_records"] == 2 and r2["programs"] == 2
    assert len(records_frame(Dataset(tmp_path / "adapted" / "measurements"))) == 2
    assert r2["measure_seconds"] >= round(float((recs.build_s + recs.measure_s).sum()), 1) - 0.1
    # `--calibrate` with the adapted model times the device against the measurements it learned the device from
    import shutil
    from pathlib import Path

    from perfcast.collect.calibrate import calibrate, reference_dataset

    meas = (tmp_path / "adapted" / "measurements").resolve()
    assert Path(reference_dataset(dev, tmp_path / "adapted")).resolve() == meas
    shutil.copytree(tmp_path / "adapted", tmp_path / "moved", ignore=shutil.ignore_patterns("measurements"))
    assert Path(reference_dataset(dev, tmp_path / "moved")).resolve() == meas  # the model names where they are
    assert reference_dataset("local:mcpu=x86-64,threads=1", tmp_path / "adapted") is None
    assert reference_dataset(dev, tmp_path / "base") is None and reference_dataset(dev) is None
    cal = calibrate(dev, data=reference_dataset(dev, tmp_path / "adapted"), programs=2, exclude_networks=())
    assert cal.programs == 2 and cal.reference_protocol == 2 and 0.5 < cal.speed_ratio < 2.0


def test_adapt_without_a_collectable_task_says_so_before_measuring(two_cpus, mlp_dataset, tmp_path):
    """A dataset without network rows (nothing the collector could collect) and without records of the target: a
    one-line error naming the target and the fix, before anything is measured."""
    import shutil

    from perfcast.adapt.workflow import AdaptConfig, run
    from perfcast.data.store import Dataset

    two_cpus[0].save(tmp_path / "base")
    data = shutil.copytree(mlp_dataset[0], tmp_path / "d")
    for part in Dataset(data)._parts("networks"):
        part.unlink()
    with pytest.raises(PerfcastError, match=r"no task to measure on local:mcpu=nehalem,threads=1@.*: the dataset has "
                                            r"no network at batch size 1 .* pass --data a dataset collected"):
        run(AdaptConfig(device="local:mcpu=nehalem,threads=1", model=str(tmp_path / "base"), data=str(data),
                        budget_tasks=1, method="finetune", out=str(tmp_path / "a")), log=lambda m: None,
            progress=False)
    assert not (tmp_path / "a").exists()


def test_adapt_with_proxy_names_the_device_the_target_is_predicted_as(two_cpus, mlp_dataset, tmp_path):
    """`proxy` picks among the other devices (and the target's own vector), and the result and the saved model name
    the pick by its device key. Where the data has this machine's mlp records they are reused (nothing measured);
    on a CPU it lacks, the chosen task is measured."""
    from perfcast.adapt.workflow import AdaptConfig, run
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key
    from perfcast.models import load_model

    base, X = two_cpus[:2]
    base.save(tmp_path / "base")
    data, df = mlp_dataset
    here = device_key(get_device("local"))
    reuse = bool((df.device_key == here).any())
    r = run(AdaptConfig(device="local", model=str(tmp_path / "base"), data=str(data), budget_tasks=1,
                        sampler="random", method="proxy", programs_per_task=2, out=str(tmp_path / "adapted")),
            log=lambda m: None, progress=False)
    assert (r["reused_records"] > 0) == reuse and r["programs"] > 0 and r["proxy"]["then"] == "none"
    assert r["proxy"]["device_key"] in set(df.device_key) | {here}
    m = load_model(tmp_path / "adapted")
    assert m.info_["adapted"]["proxy"] == r["proxy"] and m.device_proxy_[-1]["scale"] == r["proxy"]["scale"]
    vec = (get_device("local").feature_vector() if r["proxy"]["device_key"] == here else
           X.device[np.flatnonzero(df.device_key.to_numpy() == r["proxy"]["device_key"])[0]])
    np.testing.assert_allclose(vec, m.device_proxy_[-1]["as"], rtol=1e-6)  # the key named is the vector used
    with pytest.raises(UnknownNameError, match="unknown adaptation method 'magic'"):  # before loading or measuring
        run(AdaptConfig(device="local", model=str(tmp_path / "base"), data=str(data), method="proxy",
                        params={"then": "magic"}), log=lambda m: None, progress=False)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "perfcast.cli.app", *args], capture_output=True, text=True,
                          timeout=600)


def test_adapt_command_help_and_errors():
    res = _cli("adapt", "--help")
    assert res.returncode == 0 and "Example: perfcast adapt --device" in res.stdout
    res = _cli("adapt", "--device", "local", "--method", "dann")
    assert res.returncode == 2
    assert res.stderr.strip() == "error: unknown adaptation method 'dann'; known: cmd, finetune, lottery, mtl, proxy"
    res = _cli("adapt", "--device", "local:mcpu=nosuchcpu", "--budget-tasks", "3")
    assert res.returncode == 2 and "LLVM does not know mcpu 'nosuchcpu'" in res.stderr


def test_certainty_is_the_cv_of_the_last_three_rounds():
    from perfcast.adapt.workflow import certainty_cv

    assert certainty_cv([0.5, 0.4]) == float("inf")
    e = [0.9, 0.30, 0.33, 0.27]
    assert certainty_cv(e) == pytest.approx(np.std(e[-3:]) / np.mean(e[-3:]))
    assert certainty_cv(e) == pytest.approx(0.08165, abs=1e-4)  # sqrt(0.0018 / 3) / 0.30


def test_until_certain_measures_in_rounds(two_cpus, mlp_dataset, tmp_path):
    from perfcast.adapt.workflow import AdaptConfig, certainty_cv, run

    two_cpus[0].save(tmp_path / "base")
    data, _ = mlp_dataset
    r = run(AdaptConfig(device="local:mcpu=nehalem,threads=1", model=str(tmp_path / "base"), data=str(data),
                        budget_tasks=3, round_tasks=1, programs_per_task=2, method="finetune", until_certain=True,
                        certain_cv=0.0, out=str(tmp_path / "a"), params={"epochs": 2}),
            log=lambda m: None, progress=False)
    # certain_cv 0 is never reached: every round of the budget is measured, one task each
    assert [x["tasks"] for x in r["rounds"]] == [1, 2, 3] and r["programs"] == 6
    errs = [x["mape_on_new"] for x in r["rounds"]]
    assert all(e > 0 for e in errs) and r["rounds"][0]["cv"] is None
    assert r["rounds"][2]["cv"] == pytest.approx(certainty_cv(errs))
