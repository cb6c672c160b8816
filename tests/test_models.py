"""perfcast.models: target transforms and losses against scipy and hand math; every registered model fit, predicted,
saved and loaded on the bundled dataset's real `mlp` records (about 90 programs of 3 tasks); cdmpp's architecture
recomputed by hand; model-directory errors; `predict_programs` on a hand-written matmul.

Tree and torch models run with threads=1: on this 2-core machine, with another process busy, xgboost's default
(all cores) is 20-200x slower (OpenMP threads waiting for a core).
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from perfcast.errors import PerfcastError, UnknownNameError
from perfcast.eval.metrics import mape
from perfcast.models import LOSSES, TRANSFORMS, TargetTransform, get_model, list_models, load_model
from perfcast.models.ensemble import RESIDUAL_DEFAULTS
from perfcast.models.losses import make_loss

# small, fast parameters of every registered model (a new model must add an entry: see test_small_params_cover...)
SMALL = {
    "cdmpp": dict(epochs=3, d_model=16, heads=2, layers=1, z_dim=16, decoder_hidden=32, threads=1),
    "mlp": dict(epochs=3, hidden=32, threads=1),
    "xgb": dict(n_estimators=20, threads=1),
    "lgbm": dict(n_estimators=20, threads=1),
}
SMALL["ensemble"] = dict(members=[["cdmpp", SMALL["cdmpp"]], ["mlp", {**SMALL["mlp"], "target_scale": "work"}]],
                         threads=1)
CDMPP = dict(SMALL["cdmpp"], epochs=6)


# ---------------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def mlp_data():
    """(records DataFrame, ProgramFeatures, latency s, train idx, val idx) of the bundled dataset's mlp network."""
    from perfcast import paths
    from perfcast.data.frame import records_frame
    from perfcast.data.store import Dataset
    from perfcast.features.cache import dataset_features

    ds = Dataset(paths.bundled_dataset_dir())
    df = records_frame(ds)
    keys = {r["workload_key"] for r in ds.read("networks", ["network", "batch_size", "workload_key"]).to_pylist()
            if r["network"] == "mlp" and r["batch_size"] == 1}  # (the bundled data also has it at batch size 2)
    sub = df[df.workload_key.isin(keys)].reset_index(drop=True)
    assert len(sub) >= 60 and sub.workload_key.nunique() == 3  # the MLP's three dense layers
    X = dataset_features(ds, sub, jobs=1, progress=False)
    y = sub.latency_s.to_numpy()
    idx = np.arange(len(y))
    return sub, X, y, idx[idx % 5 != 0], idx[idx % 5 == 0]


@pytest.fixture(scope="module")
def matmul_tir(naive_matmul):
    """C = A @ B, 64x64x64 float32, with an init block: two compact-AST leaves (init store, update store)."""
    return naive_matmul(64, 64, 64)


@pytest.fixture(scope="module")
def cdmpp(mlp_data):
    _, X, y, tr, va = mlp_data
    return get_model("cdmpp", **CDMPP).fit(X.take(tr), y[tr], X.take(va), y[va])


# ----------------------------------------------------------------------------------------------------------- targets
LAT = np.geomspace(1e-7, 1.0, 61)  # 0.1 us .. 1 s


@pytest.mark.parametrize("kind", TRANSFORMS)
def test_transform_round_trip_and_standardized(kind):
    t = TargetTransform(kind).fit(LAT)
    z = t.transform(LAT)
    np.testing.assert_allclose(t.inverse(z), LAT, rtol=1e-6)
    assert np.all(np.diff(z) > 0)  # monotone increasing
    assert z.mean() == pytest.approx(0, abs=1e-9) and z.std() == pytest.approx(1, rel=1e-9)
    # values between the training latencies invert too (quantile: piecewise linear both ways)
    mid = np.sqrt(LAT[1:] * LAT[:-1])
    np.testing.assert_allclose(t.inverse(t.transform(mid)), mid, rtol=1e-6)


@pytest.mark.parametrize("kind", TRANSFORMS)
def test_inverse_torch_equals_inverse(kind):
    import torch

    t = TargetTransform(kind).fit(LAT)
    z = np.linspace(-1.5, 1.5, 13)
    got = t.inverse_torch(torch.tensor(z, dtype=torch.float64)).numpy()
    # the numpy inverse (prediction) also keeps results within 100x of the training latencies
    lo, hi = LAT.min() / 100, LAT.max() * 100
    assert t.range_s_ == pytest.approx((lo, hi))
    np.testing.assert_allclose(np.clip(got, lo, hi), t.inverse(z), rtol=1e-12)
    far = t.inverse(np.array([40.0, -40.0]))
    assert lo <= far.min() and far.max() <= hi
    if kind in ("boxcox", "log"):  # unbounded inverses reach the limits
        assert far == pytest.approx([hi, lo])
    back = TargetTransform.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back.range_s_ == pytest.approx(t.range_s_)


@pytest.mark.parametrize("kind", ["boxcox", "log"])
def test_inverse_torch_has_finite_gradients_far_outside_the_data(kind):
    """A diverging prediction (z = 1e4) must not overflow to inf (NaN gradients): log-latency is capped at the
    largest latency `inverse` returns, and the gradient there is zero."""
    import torch

    t = TargetTransform(kind).fit(LAT)
    z = torch.tensor([1e4, 0.5], dtype=torch.float32, requires_grad=True)
    u = t.inverse_torch(z)
    assert float(u[0]) == pytest.approx(LAT.max() * 100, rel=1e-4)
    u.sum().backward()
    assert torch.isfinite(z.grad).all() and float(z.grad[0]) == 0.0 and float(z.grad[1]) > 0


def test_standardizer_treats_jitter_as_constant():
    from perfcast.models._torch import Standardizer

    # col 0: one CPU's clock probed twice (jitter), col 1: a real spread, col 2: constant zero
    s = Standardizer().fit(np.array([[11.0, 1.0, 0.0], [11.0 + 2e-6, 3.0, 0.0]]))
    np.testing.assert_allclose(s.std_, [11.000001, 1.0, 1.0], rtol=1e-9)
    np.testing.assert_allclose(s(np.array([[22.000001, 2.0, 5.0]])), [[1.0, 0.0, 5.0]], rtol=1e-6)


def test_standardizer_leaves_nan_out_and_maps_it_to_the_mean():
    from perfcast.models._torch import Standardizer

    rows = np.array([[1.0, np.nan], [np.nan, np.nan], [3.0, np.nan], [5.0, np.nan]])  # col 1: never computed
    s = Standardizer().fit(rows)
    np.testing.assert_allclose(s.mean_, [np.nanmean(rows[:, 0]), 0.0])
    np.testing.assert_allclose(s.std_, [np.nanstd(rows[:, 0]), 1.0])  # sqrt(8/3)
    np.testing.assert_allclose(s(rows)[:, 0], [-np.sqrt(1.5), 0.0, 0.0, np.sqrt(1.5)], rtol=1e-6)
    assert (s(rows)[:, 1] == 0).all()


def test_boxcox_and_yeo_johnson_lambda_is_scipy_mle(mlp_data):
    for u in (LAT * 1e6, mlp_data[2] * 1e6):  # the transforms act on microseconds
        _, lam = stats.boxcox(u)
        t = TargetTransform("boxcox").fit(u / 1e6)
        assert t.lambda_ == pytest.approx(lam, abs=1e-3)
        bc = stats.boxcox(u, t.lambda_)
        np.testing.assert_allclose(t.transform(u / 1e6), (bc - bc.mean()) / bc.std(), rtol=1e-9, atol=1e-9)
        _, lam_yj = stats.yeojohnson(u)
        assert TargetTransform("yeo-johnson").fit(u / 1e6).lambda_ == pytest.approx(lam_yj, abs=1e-3)


def test_log_transform_hand_math_and_gradient():
    import torch

    y = np.array([1e-6, 1e-5, 1e-4])  # 1, 10, 100 us: log u = 0, ln 10, 2 ln 10
    t = TargetTransform("log").fit(y)
    assert t.mean_ == pytest.approx(math.log(10)) and t.std_ == pytest.approx(math.log(10) * math.sqrt(2 / 3))
    np.testing.assert_allclose(t.transform(y), [-math.sqrt(1.5), 0, math.sqrt(1.5)], rtol=1e-12)
    z = torch.tensor([0.0, 0.5], dtype=torch.float64, requires_grad=True)
    lat = t.inverse_torch(z)
    lat.sum().backward()
    # d/dz exp(z std + mean) / 1e6 = std * latency
    np.testing.assert_allclose(z.grad.numpy(), t.std_ * lat.detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("kind", TRANSFORMS)
def test_transform_to_dict_round_trip(kind):
    t = TargetTransform(kind).fit(LAT[::3])
    t2 = TargetTransform.from_dict(json.loads(json.dumps(t.to_dict())))
    assert t2.kind == kind
    np.testing.assert_array_equal(t2.transform(LAT), t.transform(LAT))
    np.testing.assert_array_equal(t2.inverse(np.linspace(-2, 2, 9)), t.inverse(np.linspace(-2, 2, 9)))


def test_unknown_transform_lists_known():
    with pytest.raises(ValueError, match=r"unknown target transform 'cox'; known: boxcox, log, none, quantile, "
                                         r"yeo-johnson$"):
        TargetTransform("cox")


# ------------------------------------------------------------------------------------------------------------ losses
# transform `none` with mean 2 us, std 1 us: latency(z) = (z + 2) us
Z_HAT = [0.0, 1.0, -1.0]  # predicted 2, 3, 1 us
Z = [0.5, 1.0, -0.5]  # true 2.5, 3, 1.5 us
Y_S = [2.5e-6, 3e-6, 1.5e-6]
REL = np.array([2 / 2.5 - 1, 0.0, 1 / 1.5 - 1])  # -0.2, 0, -1/3
MSE = (0.25 + 0 + 0.25) / 3
HAND = {"mse": MSE, "mape": np.mean(np.abs(REL)), "mspe": np.mean(REL ** 2),
        "log_mse": (math.log(2 / 2.5) ** 2 + math.log(1 / 1.5) ** 2) / 3,
        "mse+mape": MSE + 0.5 * np.mean(np.abs(REL))}  # lam = 0.5


@pytest.fixture
def none_transform():
    return TargetTransform.from_dict({"kind": "none", "lambda": 0.0, "mean": 2.0, "std": 1.0})


@pytest.mark.parametrize("name", LOSSES)
def test_loss_hand_math(name, none_transform):
    import torch

    loss = make_loss(name, none_transform, lam=0.5)
    z_hat = torch.tensor(Z_HAT, dtype=torch.float64)
    got = float(loss(z_hat, torch.tensor(Z, dtype=torch.float64), torch.tensor(Y_S, dtype=torch.float64)))
    assert got == pytest.approx(HAND[name], rel=1e-9)


# weights 1, 2, 3 (sum 6): each term is sum(w * t) / 6
HAND_W = {"mse": (0.25 + 3 * 0.25) / 6, "mape": (0.2 + 3 / 3) / 6, "mspe": (0.04 + 3 / 9) / 6,
          "log_mse": (math.log(2 / 2.5) ** 2 + 3 * math.log(1 / 1.5) ** 2) / 6,
          "mse+mape": (0.25 + 3 * 0.25) / 6 + 0.5 * (0.2 + 3 / 3) / 6}


@pytest.mark.parametrize("name", LOSSES)
def test_weighted_loss_hand_math(name, none_transform):
    import torch

    loss = make_loss(name, none_transform, lam=0.5)
    args = [torch.tensor(v, dtype=torch.float64) for v in (Z_HAT, Z, Y_S)]
    got = float(loss(*args, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)))
    assert got == pytest.approx(HAND_W[name], rel=1e-9)
    # equal weights are the plain mean
    assert float(loss(*args, torch.full((3,), 7.0, dtype=torch.float64))) == pytest.approx(HAND[name], rel=1e-9)


def test_mape_loss_gradient_by_hand(none_transform):
    import torch

    z_hat = torch.tensor(Z_HAT, dtype=torch.float64, requires_grad=True)
    make_loss("mape", none_transform)(z_hat, torch.tensor(Z), torch.tensor(Y_S, dtype=torch.float64)).backward()
    # d/dz |(z + 2) - y_us| / y_us / 3 = sign / y_us / 3 (under-predictions: sign -1; exact at 0: torch gives 0)
    np.testing.assert_allclose(z_hat.grad.numpy(), [-1 / 2.5 / 3, 0.0, -1 / 1.5 / 3], rtol=1e-12)


def test_unknown_loss_lists_known(none_transform):
    with pytest.raises(UnknownNameError, match=r"unknown loss 'l1'; known: log_mse, mape, mse, mse\+mape, mspe"):
        make_loss("l1", none_transform)


# --------------------------------------------------------------------------------------------- contract, every model
def test_small_params_cover_every_registered_model():
    assert sorted(SMALL) == list_models() == ["cdmpp", "ensemble", "lgbm", "mlp", "xgb"]


def test_unknown_model_and_parameter():
    with pytest.raises(UnknownNameError, match=r"unknown model 'nosuch'; known: cdmpp, ensemble, lgbm, mlp, xgb"):
        get_model("nosuch")
    for name in list_models():
        with pytest.raises(PerfcastError, match=rf"unknown parameter\(s\) \['bogus'\] for model '{name}'; known: "):
            get_model(name, bogus=1)


@pytest.mark.parametrize("name", list_models())
def test_model_contract(name, mlp_data, tmp_path):
    from perfcast.features.cache import FEATURE_TAG

    _, X, y, tr, va = mlp_data
    m = get_model(name, **SMALL[name])
    assert m.get_params() == {**m.get_params(), **SMALL[name]}
    with pytest.raises(PerfcastError, match=f"the {name} model is not trained; call fit"):
        m.predict(X)
    bad = y[tr].copy()
    bad[3] = 0.0
    with pytest.raises(PerfcastError, match=r"latency 0\.0 at index 3 is not a positive number of seconds; "
                                            "train on records with status ok"):
        m.fit(X.take(tr), bad)
    bad[3] = np.nan
    with pytest.raises(PerfcastError, match=r"latency nan at index 3"):
        m.fit(X.take(tr), bad)
    with pytest.raises(PerfcastError, match=rf"{len(tr)} programs but {len(tr) - 1} latencies"):
        m.fit(X.take(tr), y[tr][1:])
    w = np.ones(len(tr))
    with pytest.raises(PerfcastError, match=rf"{len(tr)} programs but {len(tr) - 1} sample weights"):
        m.fit(X.take(tr), y[tr], sample_weight=w[1:])
    w[2] = -1.0
    with pytest.raises(PerfcastError, match=r"sample weight -1\.0 at index 2 is not a finite non-negative number"):
        m.fit(X.take(tr), y[tr], sample_weight=w)
    with pytest.raises(PerfcastError, match=r"every sample weight is 0"):
        m.fit(X.take(tr), y[tr], sample_weight=0 * w)
    assert not hasattr(m, "_sample_weight") and not hasattr(m, "n_train_")  # a failed fit leaves nothing behind

    assert m.fit(X.take(tr), y[tr], X.take(va), y[va]) is m
    assert m.n_train_ == len(tr)
    pred = m.predict(X)
    assert pred.shape == (len(y),) and pred.dtype == np.float64
    assert np.isfinite(pred).all() and (pred > 0).all()
    assert len(np.unique(pred)) >= 3  # it tells programs apart
    # even barely trained, it predicts the right scale: within 4x of the median latency (the data span 1000x)
    assert 0.25 < np.median(pred) / np.median(y) < 4
    assert m.predict(X.take([])).shape == (0,)

    saved = m.save(tmp_path / name)
    meta = json.loads((saved / "model.json").read_text())
    assert meta["name"] == name and meta["feature_tag"] == FEATURE_TAG and meta["n_train"] == len(tr)
    m2 = load_model(saved)
    assert type(m2) is type(m) and m2.get_params() == m.get_params() and m2.n_train_ == len(tr)
    np.testing.assert_allclose(m2.predict(X), pred, rtol=1e-5)
    np.testing.assert_allclose(m2.predict(X.take([5, 0])), pred[[5, 0]], rtol=1e-5)  # rows are independent
    if (saved / "weights.pt").exists():  # neural: training ends float16-exact, saved as float16, loads the same
        import torch

        state = torch.load(saved / "weights.pt", weights_only=True)
        assert {t.dtype for t in state.values() if t.is_floating_point()} == {torch.float16}
        np.testing.assert_array_equal(m2.predict(X), pred)


def test_round_weights_and_compact_state_by_hand():
    """round_weights rounds to the nearest float16 (0.1 -> 0.0999755859375, 1 + 2^-12 -> 1) and leaves a tensor
    float16 cannot hold (1e6) as it is; compact_state stores float16 exactly what it holds and nothing else."""
    import torch

    from perfcast.models._torch import compact_state, round_weights

    net = torch.nn.Sequential(torch.nn.Linear(2, 1), torch.nn.Linear(1, 1))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[0.1, 1 + 2 ** -12]]))
        net[0].bias.fill_(-3.0)
        net[1].weight.fill_(1e6)
        net[1].bias.fill_(2 ** -30)  # below float16's smallest subnormal (2^-24): rounded to 0
    state = compact_state(net.state_dict())
    assert [t.dtype for t in state.values()] == [torch.float32, torch.float16, torch.float32, torch.float32]
    round_weights(net)
    assert net[0].weight.tolist() == [[0.0999755859375, 1.0]] and net[0].bias.item() == -3.0
    assert net[1].weight.item() == 1e6 and net[1].bias.item() == 0.0
    state = compact_state(net.state_dict())
    assert [t.dtype for t in state.values()] == [torch.float16, torch.float16, torch.float32, torch.float16]
    assert all(p.dtype == torch.float32 for p in net.parameters())


# ------------------------------------------------------------------------------------------- target scale, ensemble
def test_work_scale_is_one_plus_flops_and_bytes():
    from perfcast.models.targets import target_scale

    # analytic columns hold log2(1 + x): flops 3, bytes read 7, bytes written 1 -> 1 + 11; then 0, 0, 0 -> 1
    an = np.zeros((2, 11), np.float32)
    an[0, :3] = np.log2(1 + np.array([3.0, 7.0, 1.0]))
    X = _Rows(an)
    np.testing.assert_allclose(target_scale("work", X), [12.0, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(target_scale("none", X), [1.0, 1.0])
    with pytest.raises(UnknownNameError, match="unknown target scale 'flops'; known: none, work"):
        target_scale("flops", X)


class _Rows:
    def __init__(self, analytic):
        self.analytic = analytic

    def __len__(self):
        return len(self.analytic)


def test_work_scaled_model_is_the_plain_model_on_latency_per_work(mlp_data):
    """lgbm with target_scale=work equals lgbm fitted on latency / work, its predictions multiplied by work."""
    from perfcast.models.targets import target_scale

    _, X, y, tr, va = mlp_data
    s = target_scale("work", X)
    assert s.min() > 1e4  # the mlp's dense layers do real work: the scale is not the identity
    scaled = get_model("lgbm", **SMALL["lgbm"], target_scale="work").fit(X.take(tr), y[tr], X.take(va), y[va])
    plain = get_model("lgbm", **SMALL["lgbm"]).fit(X.take(tr), y[tr] / s[tr], X.take(va), y[va] / s[va])
    np.testing.assert_allclose(scaled.predict(X), plain.predict(X) * s, rtol=1e-9)
    assert not np.allclose(scaled.predict(X), plain.predict(X))


def test_ensemble_is_the_geometric_mean_of_its_members(mlp_data):
    _, X, y, tr, va = mlp_data
    ens = get_model("ensemble", **SMALL["ensemble"]).fit(X.take(tr), y[tr], X.take(va), y[va])
    # the members, trained on their own with the same parameters and seed, are the independent reference
    a = get_model("cdmpp", **SMALL["cdmpp"], seed=0).fit(X.take(tr), y[tr], X.take(va), y[va]).predict(X)
    b = get_model("mlp", **SMALL["mlp"], target_scale="work", seed=0).fit(X.take(tr), y[tr], X.take(va),
                                                                         y[va]).predict(X)
    np.testing.assert_allclose(ens.predict(X), np.sqrt(a * b), rtol=1e-5)
    assert [m.name for m in ens.members_] == ["cdmpp", "mlp"]
    assert ens.latent(X).shape == (len(y), SMALL["cdmpp"]["z_dim"] + ens.members_[1].latent(X.take([0])).shape[1])


def test_ensemble_residual_stage_on_members_from_a_saved_ensemble(mlp_data, tmp_path):
    """members_from reuses a saved ensemble's members as they are; residual fits lgbm to measured / members' mean
    (the independent reference: that lgbm fitted by hand on the ratio) and multiplies it in; save/load keeps it."""
    _, X, y, tr, va = mlp_data
    base = get_model("ensemble", **SMALL["ensemble"]).fit(X.take(tr), y[tr], X.take(va), y[va])
    base.save(tmp_path / "base")
    stage = {"n_estimators": 30, "early_stopping": 5}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ens = get_model("ensemble", **SMALL["ensemble"], members_from=str(tmp_path / "base"), residual=stage).fit(
            X.take(tr), y[tr], X.take(va), y[va])
    assert not [w for w in caught if "residual stage trains on" in str(w.message)]  # the members' own programs
    m = base.predict(X)
    ref = get_model("lgbm", **{**RESIDUAL_DEFAULTS, **stage, "seed": 0, "threads": 1}).fit(
        X.take(tr), y[tr] / m[tr], X.take(va), y[va] / m[va])
    np.testing.assert_allclose(ens.predict(X), m * ref.predict(X), rtol=1e-6)
    assert not np.allclose(ens.predict(X), m, rtol=1e-3)  # the stage changes the predictions
    # it is fitted to the training programs' residual: their log error shrinks
    err = lambda p: np.mean(np.abs(np.log(p[tr] / y[tr])))  # noqa: E731
    assert err(ens.predict(X)) < err(m)
    assert ens.info_["members_from"] == str(tmp_path / "base") and 1 <= ens.info_["residual"]["trees"] <= 30
    ens.save(tmp_path / "stacked")
    np.testing.assert_allclose(load_model(tmp_path / "stacked").predict(X), ens.predict(X), rtol=1e-9)
    with pytest.raises(PerfcastError, match=r"ensemble residual 3 must be a dict of lgbm parameters, e\.g\. --param"):
        get_model("ensemble", **SMALL["ensemble"], members_from=str(tmp_path / "base"), residual=3).fit(
            X.take(tr), y[tr])
    with pytest.raises(PerfcastError, match=r"residual stage is early-stopped on validation programs and none were"):
        get_model("ensemble", **SMALL["ensemble"], members_from=str(tmp_path / "base"), residual={}).fit(
            X.take(tr), y[tr])
    # programs the members never trained on: the stage would learn their error there, and says so
    more, va2 = np.concatenate([tr, va[: len(va) // 2]]), va[len(va) // 2:]
    with pytest.warns(UserWarning, match=rf"the residual stage trains on {len(more)} programs, {len(va) // 2} more "
                                         rf"than the members of '.*base' were trained on \({len(tr)}\): it learns"):
        get_model("ensemble", **SMALL["ensemble"], members_from=str(tmp_path / "base"), residual=stage).fit(
            X.take(more), y[more], X.take(va2), y[va2])
    ref.save(tmp_path / "tree")
    with pytest.raises(PerfcastError, match=r"members_from '.*tree' is a 'lgbm' model, not an ensemble; pass a"):
        get_model("ensemble", members_from=str(tmp_path / "tree")).fit(X.take(tr), y[tr])


def test_ensemble_members_from_a_list_joins_an_ensembles_members_and_another_saved_model(mlp_data, tmp_path):
    """members_from=[ENS, MODEL]: ENS's members and MODEL itself, as trained (the reference: the geometric mean of
    the three saved models' own predictions); its feature needs come from the saved files; too few is an error."""
    _, X, y, tr, va = mlp_data
    get_model("ensemble", **SMALL["ensemble"]).fit(X.take(tr), y[tr], X.take(va), y[va]).save(tmp_path / "base")
    get_model("cdmpp", **SMALL["cdmpp"], seed=1).fit(X.take(tr), y[tr], X.take(va), y[va]).save(tmp_path / "seed1")
    src = [str(tmp_path / "base"), str(tmp_path / "seed1")]
    ens = get_model("ensemble", members_from=src, threads=1)
    assert not ens.needs_asm  # read from the three model.json files before anything is loaded
    ens.fit(X.take(tr), y[tr], X.take(va), y[va])
    assert [m.name for m in ens.members_] == ["cdmpp", "mlp", "cdmpp"] and ens.info_["members_from"] == src
    base, seed1 = load_model(tmp_path / "base"), load_model(tmp_path / "seed1")
    parts = [m.predict(X) for m in base.members_] + [seed1.predict(X)]
    np.testing.assert_allclose(ens.predict(X), np.exp(np.mean(np.log(parts), axis=0)), rtol=1e-5)
    assert not np.allclose(parts[0], parts[2], rtol=1e-2)  # the two cdmpp seeds differ, so the join is not a copy
    ens.save(tmp_path / "joined")
    joined = load_model(tmp_path / "joined")
    np.testing.assert_allclose(joined.predict(X), ens.predict(X), rtol=1e-9)
    # the saved parameters name the joined members as a recipe that trains them again, not the default members
    assert joined.params["members_from"] is None and joined.info_["members_from"] == src
    assert [name for name, _ in joined.params["members"]] == ["cdmpp", "mlp", "cdmpp"]
    assert joined.params["members"][2][1]["seed"] == 1 and "seed" not in joined.params["members"][0][1]
    assert [get_model(n, **p).params for n, p in joined.member_specs()] == [m.params for m in ens.members_]
    assert ens.params["members_from"] == src  # fitting left the estimator's own parameters as given
    with pytest.raises(PerfcastError, match=r"members_from \['.*seed1'\] gives 1 member; an ensemble needs at least"):
        get_model("ensemble", members_from=[src[1]]).fit(X.take(tr), y[tr])
    with pytest.raises(PerfcastError, match=r"members_from \[\] names no saved model; give an ensemble directory"):
        get_model("ensemble", members_from=[]).fit(X.take(tr), y[tr])


def test_ensemble_gate_weights_members_per_region_by_validation_mape(mlp_data, tmp_path, monkeypatch):
    """gate=annotations: per region (parallel x vectorized loops) the simplex-grid weights of the members' log
    predictions with the lowest validation MAPE (reference: a brute-force search written here), applied per program;
    save/load keeps them; a region with too few validation programs keeps equal weights."""
    from perfcast.models import ensemble as E

    _, X, y, tr, va = mlp_data
    base = get_model("ensemble", **SMALL["ensemble"]).fit(X.take(tr), y[tr], X.take(va), y[va])
    base.save(tmp_path / "base")
    region = E.annotation_region(X)
    counts = np.bincount(region[va], minlength=E.N_REGIONS)
    assert counts[0] > 0 and counts[1:].sum() > 0  # the mlp net has default kernels and scheduled ones
    monkeypatch.setattr(E, "GATE_MIN_PROGRAMS", int(counts[counts > 0].min()))  # every present region is fitted
    ens = get_model("ensemble", **SMALL["ensemble"], members_from=str(tmp_path / "base"), gate="annotations").fit(
        X.take(tr), y[tr], X.take(va), y[va])
    logs = np.log(np.stack([m.predict(X) for m in base.members_], axis=1))  # (n, 2)
    for r in np.flatnonzero(counts):
        sel = va[region[va] == r]
        best = min((np.mean(np.abs(np.exp(a / 20 * logs[sel, 0] + (1 - a / 20) * logs[sel, 1]) / y[sel] - 1)), a)
                   for a in range(21))
        assert ens.gate_[int(r)] == pytest.approx([best[1] / 20, 1 - best[1] / 20])
        gated = np.mean(np.abs(ens.predict(X.take(sel)) / y[sel] - 1))
        assert gated == pytest.approx(best[0]) and gated <= np.mean(np.abs(base.predict(X.take(sel)) / y[sel] - 1))
    w = np.array([ens.gate_.get(int(r), [0.5, 0.5]) for r in region])
    np.testing.assert_allclose(ens.predict(X), np.exp((w * logs).sum(axis=1)), rtol=1e-9)
    np.testing.assert_allclose(ens.gate_table(), [ens.gate_.get(r, [0.5, 0.5]) for r in range(E.N_REGIONS)])
    assert ens.info_["gate"] == {str(r): pytest.approx(v) for r, v in ens.gate_.items()}
    ens.save(tmp_path / "gated")
    np.testing.assert_allclose(load_model(tmp_path / "gated").predict(X), ens.predict(X), rtol=1e-12)
    monkeypatch.setattr(E, "GATE_MIN_PROGRAMS", len(va) + 1)  # no region has enough: equal weights everywhere
    plain = get_model("ensemble", **SMALL["ensemble"], members_from=str(tmp_path / "base"), gate="annotations").fit(
        X.take(tr), y[tr], X.take(va), y[va])
    assert plain.gate_ == {} and np.allclose(plain.predict(X), base.predict(X), rtol=1e-9)
    assert plain.gate_table().tolist() == [[0.5, 0.5]] * E.N_REGIONS
    with pytest.raises(PerfcastError, match=r"unknown ensemble gate 'kind'; known: annotations \(or leave it unset "
                                            r"for equal weights\)"):
        get_model("ensemble", **SMALL["ensemble"], gate="kind").fit(X.take(tr), y[tr], X.take(va), y[va])
    with pytest.raises(PerfcastError, match=r"the ensemble's gate is fitted on validation programs and none were"):
        get_model("ensemble", **SMALL["ensemble"], members_from=str(tmp_path / "base"), gate="annotations").fit(
            X.take(tr), y[tr])


def test_gate_regions_and_simplex_grid():
    from perfcast.features.analytic import ANALYTIC_FEATURES
    from perfcast.models.ensemble import annotation_region, simplex_grid

    a = np.zeros((4, len(ANALYTIC_FEATURES)))
    a[[2, 3], ANALYTIC_FEATURES.index("max_parallel_extent")] = 5.0
    a[[1, 3], ANALYTIC_FEATURES.index("max_vector_extent")] = 3.0
    assert annotation_region(_Rows(a)).tolist() == [0, 1, 2, 3]
    assert simplex_grid(2, 0.5).tolist() == [[0.0, 1.0], [0.5, 0.5], [1.0, 0.0]]
    g = simplex_grid(3, 0.05)
    assert g.shape == (231, 3) and np.allclose(g.sum(axis=1), 1) and g.min() == 0 and len(np.unique(g, axis=0)) == 231


@pytest.mark.parametrize("members, message", [
    ("cdmpp", r"ensemble members \[\['cdmpp', \{\}\]\] must list at least two models"),
    ([["cdmpp", {}], ["nosuch", {}]], r"ensemble member 'nosuch' is not a model; known: cdmpp, lgbm, mlp, xgb"),
    ([["cdmpp", {}], ["ensemble", {}]], r"ensemble member 'ensemble' is not a model"),
    ([["cdmpp", {}], "mlp"], r"ensemble member 'mlp' is not a \[model name, \{parameters\}\] pair; e\.g\. --param"),
])
def test_ensemble_member_errors(members, message, mlp_data):
    _, X, y, tr, _ = mlp_data
    with pytest.raises(PerfcastError, match=message):
        get_model("ensemble", members=members).fit(X.take(tr), y[tr])


# ---------------------------------------------------------------------------------------------------- accuracy
def _best_constant(y: np.ndarray) -> float:
    """The constant c minimizing mean |c - y| / y: the median of y weighted by 1 / y."""
    order = np.argsort(y)
    w = 1 / y[order]
    return float(y[order][np.searchsorted(np.cumsum(w), w.sum() / 2)])


def test_xgb_fits_its_training_programs(mlp_data):
    _, X, y, _, _ = mlp_data
    m = get_model("xgb", threads=1).fit(X, y)  # default parameters: 2000 trees, depth 8, log target, device vector
    fit_mape = mape(y, m.predict(X))
    assert fit_mape < 0.05  # measured 0.0008 on 120 records of two CPUs
    # without the device vector the same program has two latencies (one per CPU): it cannot fit (measured 0.15)
    blind = get_model("xgb", threads=1, use_device=False).fit(X, y)
    assert mape(y, blind.predict(X)) > 2 * fit_mape
    # a model that learned nothing fails the bound by far: the median (MAPE ~2.5) and even the MAPE-optimal
    # constant (~0.8; latencies span 1000x)
    c = _best_constant(y)
    assert mape(y, np.full_like(y, c)) > 0.5
    assert mape(y, np.full_like(y, np.median(y))) > mape(y, np.full_like(y, c))
    grid = np.geomspace(y.min(), y.max(), 500)
    assert mape(y, np.full_like(y, c)) <= min(mape(y, np.full_like(y, g)) for g in grid) + 1e-12


@pytest.mark.parametrize("name", ["xgb", "mlp"])
def test_sample_weight_zero_leaves_a_task_unfitted(name, mlp_data):
    """A task whose programs weigh 0 teaches the model nothing: it fits the other tasks, not that one; uniform
    weights of any size are no weights (they are rescaled to mean 1). The task is chosen by its latencies, the one
    whose programs the other tasks say least about."""
    sub, X, y, _, _ = mlp_data
    params = {"xgb": dict(threads=1, subsample=1.0, colsample=1.0), "mlp": dict(epochs=40, hidden=32, threads=1)}
    # the MLP's output layer, ten times faster than its two hidden layers: what the others teach does not fit it
    fastest = sub.groupby("workload_key").latency_s.median().idxmin()
    task = (sub.workload_key == fastest).to_numpy()
    err = {}
    for label, w in (("task ignored", np.where(task, 0.0, 1.0)), ("others ignored", np.where(task, 1.0, 0.0))):
        pred = get_model(name, **params[name]).fit(X, y, sample_weight=w).predict(X)
        err[label] = mape(y[task], pred[task])
    assert err["task ignored"] > 3 * err["others ignored"]
    plain = get_model(name, **params[name]).fit(X, y).predict(X)
    uniform = get_model(name, **params[name]).fit(X, y, sample_weight=np.full(len(y), 5.0)).predict(X)
    np.testing.assert_allclose(uniform, plain, rtol=1e-4)


def test_default_weight_sample_weights():
    import pandas as pd

    from perfcast.eval.workflow import sample_weights

    df = pd.DataFrame({"schedule_kind": ["default", "random", "random", "imported"]})
    np.testing.assert_array_equal(sample_weights(df, 10.0), [10.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(sample_weights(df, 10.0, 3.0), [10.0, 1.0, 1.0, 3.0])
    np.testing.assert_array_equal(sample_weights(df, 1.0, 3.0), [1.0, 1.0, 1.0, 3.0])
    assert sample_weights(df, 1.0) is None
    with pytest.raises(PerfcastError, match=r"default weight 0\.0 must be a positive number"):
        sample_weights(df, 0.0)
    with pytest.raises(PerfcastError, match=r"searched weight -1\.0 must be a positive number \(1 weighs searched"):
        sample_weights(df, 10.0, -1.0)


def test_program_matrix_pools_stores_and_leaves_by_hand():
    """`features="program"`: [per-store sum, max | leaf sum, max, min | n stores, n leaves | analytic | device]."""
    from perfcast.features.cache import LEAF_DIM, ProgramFeatures
    from perfcast.features.per_store import N_PER_STORE
    from perfcast.models.gbdt import program_matrix

    st = np.zeros((2, N_PER_STORE), np.float32)
    st[0, 0], st[1, 0], st[1, 5] = 1.0, 3.0, 2.0
    lv = np.zeros((3, LEAF_DIM), np.float32)
    lv[:, 1] = [4.0, -1.0, 2.0]
    X = ProgramFeatures([lv], [np.arange(3)], [st], np.full((1, 21), 0.5, np.float32),
                        np.full((1, 11), 7.0, np.float32))
    A = program_matrix(X, use_device=True)
    assert A.shape == (1, 2 * N_PER_STORE + 3 * LEAF_DIM + 2 + 21 + 11)
    row, o = A[0], 2 * N_PER_STORE
    assert (row[0], row[5], row[N_PER_STORE], row[N_PER_STORE + 5]) == (4.0, 2.0, 3.0, 2.0)  # sum, max of stores
    assert (row[o + 1], row[o + LEAF_DIM + 1], row[o + 2 * LEAF_DIM + 1]) == (5.0, 4.0, -1.0)  # leaf sum, max, min
    assert tuple(row[o + 3 * LEAF_DIM:o + 3 * LEAF_DIM + 2]) == (2, 3)
    assert np.count_nonzero(row[:o + 3 * LEAF_DIM]) == 7
    assert (row[-32:-11] == 0.5).all() and (row[-11:] == 7.0).all()
    assert program_matrix(X).shape == (1, A.shape[1] - 11)  # without the device vector


@pytest.fixture(scope="module")
def mlp_asm(mlp_data):
    """(records, ProgramFeatures with assembly features, latency s, train idx, val idx) of every 8th mlp record
    (building each for its own target: ~0.2 s a record; cached beside the dataset)."""
    from dataclasses import replace

    from perfcast import paths
    from perfcast.data.store import Dataset
    from perfcast.features.asm_cache import dataset_asm

    sub, X, y, _, _ = mlp_data
    rows = np.arange(0, len(y), 8)
    sub, X, y = sub.iloc[rows].reset_index(drop=True), X.take(rows), y[rows]
    X = replace(X, asm=dataset_asm(Dataset(paths.bundled_dataset_dir()), sub, jobs=1, progress=False))
    idx = np.arange(len(y))
    return sub, X, y, idx[idx % 5 != 0], idx[idx % 5 == 0]


def test_tree_model_on_assembly_features(mlp_asm, tmp_path, monkeypatch):
    """`features="program_asm"`: the program vector with the 55 assembly columns appended; the model says it needs
    them, refuses features without them, and round-trips."""
    from dataclasses import replace

    from perfcast.models import ensemble as ensemble_mod
    from perfcast.models.gbdt import program_asm_matrix, program_matrix

    _, Xa, y, tr, va = mlp_asm
    X, asm = replace(Xa, asm=None), Xa.asm
    assert asm.shape == (len(y), 55) and np.isfinite(asm).all() and len(y) >= 100
    A = program_asm_matrix(Xa, use_device=True)
    np.testing.assert_array_equal(A, np.hstack([program_matrix(X, use_device=True), asm]))
    np.testing.assert_array_equal(program_asm_matrix(Xa.take([4, 1])),  # take() keeps the rows' asm features
                                  np.hstack([program_matrix(X.take([4, 1])), asm[[4, 1]]]))
    m = get_model("lgbm", features="program_asm", target_scale="work", n_estimators=30, threads=1)
    assert m.needs_asm and not get_model("lgbm", features="program").needs_asm
    with pytest.raises(PerfcastError, match="reads the programs' assembly features and they were not loaded"):
        m.fit(X.take(tr), y[tr])
    pred = m.fit(Xa.take(tr), y[tr], Xa.take(va), y[va]).predict(Xa)
    assert np.isfinite(pred).all() and 0.25 < np.median(pred) / np.median(y) < 4
    np.testing.assert_allclose(load_model(m.save(tmp_path / "asm")).predict(Xa), pred, rtol=1e-6)
    assert load_model(tmp_path / "asm").needs_asm
    ens = get_model("ensemble", **{**SMALL["ensemble"], "residual": {"features": "program_asm"}})
    assert ens.needs_asm and not get_model("ensemble", **SMALL["ensemble"]).needs_asm
    # members_from: decided from the saved members' parameters, without loading their weights
    saved = get_model("ensemble", members=[["lgbm", {"features": "program_asm", "n_estimators": 5, "threads": 1}],
                                           ["lgbm", {"features": "program", "n_estimators": 5, "threads": 1}]])
    saved.fit(Xa.take(tr), y[tr], Xa.take(va), y[va]).save(tmp_path / "ens")
    monkeypatch.setattr(ensemble_mod, "load_model", lambda *a: pytest.fail("loaded weights to read parameters"))
    assert get_model("ensemble", members_from=str(tmp_path / "ens")).needs_asm
    with pytest.raises(PerfcastError, match=r"members_from '.*asm' is a 'lgbm' model, not an ensemble"):
        get_model("ensemble", members_from=str(tmp_path / "asm")).needs_asm


@pytest.mark.parametrize("name, first_layer", [("cdmpp", lambda net: net.analytic_mlp[0]),
                                               ("mlp", lambda net: net.head[0])])
def test_neural_models_on_assembly_features(mlp_asm, tmp_path, name, first_layer):
    """`use_asm=True`: the 55 assembly columns, standardized, join cdmpp's analytic MLP input / the TensetMLP head's
    input (that layer grows by 55); the model says it needs them, refuses features without them, and
    round-trips."""
    from dataclasses import replace

    _, Xa, y, tr, va = mlp_asm
    params = {**SMALL[name], **({"use_analytic": True} if name == "cdmpp" else {})}
    m = get_model(name, **params, use_asm=True)
    assert m.needs_asm and not get_model(name, **params).needs_asm
    with pytest.raises(PerfcastError, match="reads the programs' assembly features and they were not loaded"):
        m.fit(replace(Xa, asm=None).take(tr), y[tr])
    pred = m.fit(Xa.take(tr), y[tr], Xa.take(va), y[va]).predict(Xa)
    plain = get_model(name, **params).fit(Xa.take(tr), y[tr], Xa.take(va), y[va])
    assert first_layer(m.net_).in_features == first_layer(plain.net_).in_features + 55
    np.testing.assert_allclose(m.asm_norm_.mean_, Xa.asm[tr].astype(np.float64).mean(axis=0), rtol=1e-9)
    assert np.isfinite(pred).all() and 0.1 < np.median(pred) / np.median(y) < 10
    np.testing.assert_allclose(load_model(m.save(tmp_path / "c")).predict(Xa), pred, rtol=1e-5)


def test_unknown_tree_feature_set():
    with pytest.raises(UnknownNameError, match=r"unknown feature set 'ast'; known: per_store, program, program_asm"):
        get_model("lgbm", features="ast")



@pytest.mark.parametrize("name", ["lgbm", "xgb"])
def test_tree_objective_mape_fits_the_mape_optimal_constant(name, mlp_data):
    """Seven copies of one program (no split possible): the l2 trees on log latency predict the geometric mean,
    the mape trees the minimiser of the mean absolute percentage error, the median weighted by 1/y (by hand: weights
    1, 1, 1, 1/2, 1/3, 1/5, 1/8 of total 4.16; the three 1 ms points hold 3 > 4.16 / 2 of it: 1 ms)."""
    _, X, _, _, _ = mlp_data
    same = X.take([0] * 7)
    y = np.array([1, 1, 1, 2, 3, 5, 8]) * 1e-3
    # all rows in every tree (no bagging noise); xgb adds single-leaf trees: let them converge
    fast = dict(n_estimators=300, learning_rate=0.3, subsample=1.0, threads=1)
    l2 = get_model(name, **fast, target="log").fit(same, y).predict(same)
    np.testing.assert_allclose(l2, np.exp(np.log(y).mean()), rtol=1e-3)
    mape = get_model(name, **fast, objective="mape", target="none").fit(same, y).predict(same)
    np.testing.assert_allclose(mape, 1e-3, rtol=1e-3)
    with pytest.raises(PerfcastError, match=r"objective 'mape' needs target 'none' \(got 'log'\).*--param target=none"):
        get_model(name, objective="mape")
    with pytest.raises(UnknownNameError, match=r"unknown tree objective 'l1'; known: l2, mape"):
        get_model(name, objective="l1")


def test_lgbm_saves_only_what_prediction_reads_and_predicts_bit_identically(mlp_data, tmp_path):
    """The saved text drops the per-tree training statistics (gains, counts, hessian sums, inner values, tree sizes)
    and keeps every tree: loaded, it predicts exactly what the fitted booster and LightGBM's full text predict, and
    continued boosting from it (adapt's path) grows the same trees as from the fitted booster."""
    import lzma

    import lightgbm as lgb

    from perfcast.models.gbdt import TRAINING_ONLY_LINES

    _, X, y, tr, va = mlp_data
    m = get_model("lgbm", n_estimators=40, max_depth=4, threads=1, features="program").fit(
        X.take(tr), y[tr], X.take(va), y[va])
    full = m.booster_.model_to_string(num_iteration=m.booster_.best_iteration or None)
    n_trees = full.count("\nTree=")
    assert n_trees >= 10 and len(TRAINING_ONLY_LINES.findall(full)) == 1 + 6 * n_trees  # tree_sizes + 6 per tree
    text = lzma.decompress((m.save(tmp_path / "t") / "lgbm.txt.xz").read_bytes()).decode()
    assert not TRAINING_ONLY_LINES.search(text) and text.count("\nTree=") == n_trees
    removed = sum(len(x.group(0)) for x in TRAINING_ONLY_LINES.finditer(full))
    assert text.count("leaf_value=") == n_trees and len(text) == len(full) - removed and removed > 0.25 * len(full)
    back = load_model(tmp_path / "t")
    A = m._matrix(X)
    np.testing.assert_array_equal(back.booster_.predict(A), lgb.Booster(model_str=full).predict(A))
    np.testing.assert_array_equal(back.predict(X), m.predict(X))
    np.testing.assert_array_equal(back.boosted(X.take(va), y[va], rounds=5).predict(X),
                                  m.boosted(X.take(va), y[va], rounds=5).predict(X))


# ------------------------------------------------------------------------------------------------------ cdmpp
def test_cdmpp_inputs_are_standardized_leaves_plus_pe(cdmpp, mlp_data):
    from perfcast.features import positional_encoding
    from perfcast.features.compact_ast import D as LEAF_DIM

    _, X, _, tr, _ = mlp_data
    rows = np.concatenate([X.leaves[i] for i in tr]).astype(np.float64)
    std = rows.std(axis=0)
    std[std <= 1e-8] = 1.0
    seqs, vec = cdmpp._inputs(X.take([0, 1]))
    for i in range(2):
        want = (X.leaves[i] - rows.mean(axis=0)) / std + positional_encoding(X.ordering[i], LEAF_DIM)
        np.testing.assert_allclose(seqs[i], want, rtol=1e-5, atol=1e-5)
    assert vec.shape == (2, 11)  # device features only (use_analytic off)
    cdmpp.params["use_pe"] = False
    try:
        seqs_nope, _ = cdmpp._inputs(X.take([0]))
    finally:
        cdmpp.params["use_pe"] = True
    np.testing.assert_allclose(seqs[0] - seqs_nope[0], positional_encoding(X.ordering[0], LEAF_DIM), atol=1e-6)


def _by_hand(model, X, i: int) -> float:
    """Program i's prediction recomputed from the net's parts (the module docstring's diagram)."""
    import torch

    net = model.net_
    seqs, vec = model._inputs(X.take([i]))
    seq, v = torch.from_numpy(seqs[0][None]), torch.from_numpy(vec)
    with torch.no_grad():
        h = net.encoder(net.embed(seq))
        zx = net.shared(h.mean(dim=1))
        L = seq.shape[1]
        if str(L) in net.per_leaf:
            zx = zx + net.per_leaf[str(L)](h.reshape(1, -1))
        z = zx * (1 + net.device_mlp(v))
        return float(model.target_.inverse(net.decoder(z).squeeze(-1).numpy())[0])


def test_cdmpp_prediction_by_hand_seen_and_unseen_leaf_count(cdmpp, mlp_data, matmul_tir):
    from perfcast.features.cache import features_of_programs

    _, X, _, tr, _ = mlp_data
    assert sorted(int(k) for k in cdmpp.net_.per_leaf) == sorted({len(X.leaves[i]) for i in tr})
    pred = cdmpp.predict(X.take([0, 7]))
    assert [_by_hand(cdmpp, X, i) for i in (0, 7)] == pytest.approx(pred, rel=1e-5)
    # the 64x64 matmul has 2 leaves, a count no mlp program has: only the shared path predicts it
    Xm = features_of_programs([matmul_tir], "local")
    assert len(Xm.leaves[0]) == 2 and "2" not in cdmpp.net_.per_leaf
    pm = cdmpp.predict(Xm)
    assert pm.shape == (1,) and np.isfinite(pm).all() and pm[0] > 0
    assert _by_hand(cdmpp, Xm, 0) == pytest.approx(pm[0], rel=1e-5)


def test_cdmpp_training_is_seeded_and_use_pe_matters(cdmpp, mlp_data):
    _, X, y, tr, va = mlp_data
    again = get_model("cdmpp", **CDMPP).fit(X.take(tr), y[tr], X.take(va), y[va])
    np.testing.assert_allclose(again.predict(X), cdmpp.predict(X), rtol=1e-6)
    nope = get_model("cdmpp", **CDMPP, use_pe=False).fit(X.take(tr), y[tr], X.take(va), y[va])
    rel = np.abs(nope.predict(X) / cdmpp.predict(X) - 1)
    assert rel.max() > 1e-3


def test_cdmpp_compact_base_drops_the_access_signature(cdmpp, mlp_data):
    """leaf_features="compact_base" (the ablation) feeds the first 32 compact-AST columns, standardized the same way,
    with a 32-d positional encoding; a bad leaf_features value is a one-line error naming the choices."""
    from perfcast.features import positional_encoding

    _, X, y, tr, va = mlp_data
    base = get_model("cdmpp", **CDMPP, leaf_features="compact_base").fit(X.take(tr), y[tr], X.take(va), y[va])
    rows = np.concatenate([X.leaves[i] for i in tr]).astype(np.float64)[:, :32]
    std = rows.std(axis=0)
    std[std <= 1e-8] = 1.0
    seqs, _ = base._inputs(X.take([0]))
    want = (X.leaves[0][:, :32] - rows.mean(axis=0)) / std + positional_encoding(X.ordering[0], 32)
    np.testing.assert_allclose(seqs[0], want, rtol=1e-5, atol=1e-5)
    assert base.net_.embed.in_features == 32 and cdmpp.net_.embed.in_features == 50
    with pytest.raises(PerfcastError, match=r"leaf_features='ast' is not one of compact, compact_base, per_store"):
        get_model("cdmpp", **CDMPP, leaf_features="ast").fit(X.take(tr), y[tr], X.take(va), y[va])


def test_cdmpp_latent(cdmpp, mlp_data):
    import torch

    _, X, _, _, _ = mlp_data
    Xs = X.take(np.arange(12))
    lat = cdmpp.latent(Xs)
    assert lat.shape == (12, CDMPP["z_dim"]) and np.isfinite(lat).all()
    with torch.no_grad():  # the decoder of the latent is the prediction
        z_hat = cdmpp.net_.decoder(torch.from_numpy(lat)).squeeze(-1).numpy()
    np.testing.assert_allclose(cdmpp.target_.inverse(z_hat), cdmpp.predict(Xs), rtol=1e-5)
    assert cdmpp.latent(X.take([])).shape[0] == 0


def test_neural_training_info(cdmpp):
    info = cdmpp.info_
    assert 1 <= info["epochs"] <= CDMPP["epochs"] and len(info["history"]) == info["epochs"]
    best = min(h["val_mape"] for h in info["history"])
    assert info["best_val_mape"] == best and 0 < best < 10


def test_weight_average_ema_validates_and_keeps_the_average(cdmpp, mlp_data):
    """weight_average="ema": the trained trajectory is the plain loop's (val_mape_raw = the plain model's val_mape,
    epoch by epoch), the validated and kept weights are the moving average (a decay of 0, ema_cycles ~ 0, makes the
    average the trained weights themselves: the plain model exactly); bad values are one-line errors."""
    _, X, y, tr, va = mlp_data
    fit = dict(X_val=X.take(va), y_val=y[va])
    ema = get_model("cdmpp", **CDMPP, weight_average="ema").fit(X.take(tr), y[tr], **fit)
    raw = [h["val_mape_raw"] for h in ema.info_["history"]]
    plain = [h["val_mape"] for h in cdmpp.info_["history"]]
    assert raw == pytest.approx(plain[:len(raw)], rel=1e-6)
    kept = [h["val_mape"] for h in ema.info_["history"]]
    assert ema.info_["best_val_mape"] == min(kept) and kept != pytest.approx(raw, rel=1e-3)
    mape = float(np.mean(np.abs(ema.predict(X.take(va)) / y[va] - 1)))
    assert mape == pytest.approx(min(kept), rel=1e-2)  # the kept weights are the best average (float16-rounded)
    same = get_model("cdmpp", **CDMPP, weight_average="ema", ema_cycles=1e-9).fit(X.take(tr), y[tr], **fit)
    np.testing.assert_allclose(same.predict(X), cdmpp.predict(X), rtol=1e-6)
    with pytest.raises(PerfcastError, match=r"weight_average='swa' is not one of \['none', 'ema'\]"):
        get_model("mlp", **SMALL["mlp"], weight_average="swa").fit(X.take(tr), y[tr], **fit)
    for bad in (0, "abc"):
        with pytest.raises(PerfcastError, match=rf"ema_cycles={bad!r} must be a positive number"):
            get_model("mlp", **SMALL["mlp"], weight_average="ema", ema_cycles=bad).fit(X.take(tr), y[tr], **fit)


# ---------------------------------------------------------------------------------------------- model directories
@pytest.fixture(scope="module")
def saved_xgb(mlp_data, tmp_path_factory):
    _, X, y, tr, va = mlp_data
    return get_model("xgb", **SMALL["xgb"]).fit(X.take(tr), y[tr]).save(tmp_path_factory.mktemp("m") / "xgb")


def test_load_model_without_model_json(tmp_path):
    with pytest.raises(PerfcastError, match=r"is not a perfcast model \(no model\.json\); train one with "
                                            r"`perfcast train --out DIR`"):
        load_model(tmp_path)


@pytest.mark.parametrize("key, value, message", [
    ("feature_tag", "ca0-ps0-an0-dev0", r"was trained on features ca0-ps0-an0-dev0, this perfcast computes .*; "
                                        r"retrain it with `perfcast train`"),
    ("format", 99, r"has format 99, this perfcast reads 1; retrain it with `perfcast train`"),
])
def test_load_model_version_mismatch(saved_xgb, tmp_path, key, value, message):
    import shutil

    d = shutil.copytree(saved_xgb, tmp_path / "m")
    meta = json.loads((d / "model.json").read_text())
    meta[key] = value
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(PerfcastError, match=message):
        load_model(d)


@pytest.mark.parametrize("name, params", [("cdmpp", dict(SMALL["cdmpp"], use_analytic=True)),
                                          ("lgbm", dict(SMALL["lgbm"], features="program"))])
def test_model_of_a_prior_feature_tag_reads_the_leading_columns(name, params, mlp_data, tmp_path):
    """A model trained on an earlier feature tag that today's features extend by appended columns (`PRIOR_TAGS`)
    loads, predicts from the leading columns of today's features exactly as before, and saves under its own tag."""
    from perfcast.features.cache import FEATURE_TAG, PRIOR_TAGS

    _, X, y, tr, _ = mlp_data
    tag, dims = next(iter(PRIOR_TAGS.items()))
    old = X.prefix(*dims)  # what that perfcast computed
    assert (old.leaf_dim, old.analytic.shape[1]) == dims and dims < (X.leaf_dim, X.analytic.shape[1])
    np.testing.assert_array_equal(old.leaves[0], X.leaves[0][:, :dims[0]])
    m = get_model(name, **params).fit(old.take(tr), y[tr])
    d = m.save(tmp_path / "m")
    meta = json.loads((d / "model.json").read_text())
    meta["feature_tag"] = tag
    (d / "model.json").write_text(json.dumps(meta))
    loaded = load_model(d)
    np.testing.assert_allclose(loaded.predict(X), m.predict(old), rtol=1e-5)
    assert tag != FEATURE_TAG
    assert json.loads((loaded.save(tmp_path / "again") / "model.json").read_text())["feature_tag"] == tag


# --------------------------------------------------------------------------------------------------------- workflow
def test_predict_programs(cdmpp, saved_xgb, matmul_tir, matmul64):
    from perfcast.eval.workflow import predict_programs
    from perfcast.features.cache import features_of_programs

    p = predict_programs([matmul_tir], model=cdmpp, device="local")
    assert p.shape == (1,) and np.isfinite(p[0]) and p[0] > 0
    # the TE-built matmul (conftest) is the same program: same features, same prediction
    te = features_of_programs([matmul64], "local")
    hand = features_of_programs([matmul_tir], "local")
    np.testing.assert_array_equal(te.leaves[0], hand.leaves[0])
    np.testing.assert_array_equal(te.stores[0], hand.stores[0])
    assert predict_programs([matmul64, matmul_tir], model=cdmpp) == pytest.approx([p[0], p[0]], rel=1e-6)
    assert predict_programs([matmul_tir.script()], model=cdmpp) == pytest.approx(p, rel=1e-6)  # TVMScript text too
    # a model directory works as well as a model object
    px = predict_programs([matmul_tir], model=str(saved_xgb))
    assert px == pytest.approx(load_model(saved_xgb).predict(hand), rel=1e-6)


def test_train_checks_model_before_loading_data(tmp_path):
    from perfcast.eval.workflow import train

    missing = tmp_path / "no-such-dataset"  # would fail with "does not exist" if it were read first
    with pytest.raises(UnknownNameError, match=r"unknown model 'nosuch'; known: cdmpp, ensemble, lgbm, mlp, xgb"):
        train(data=missing, model="nosuch")
    with pytest.raises(PerfcastError, match=r"unknown parameter\(s\) \['depth'\] for model 'xgb'"):
        train(data=missing, model="xgb", params={"depth": 3})


# ------------------------------------------------------------------------------------------- within-task ranking term
def test_partners_pair_within_group_and_leaf_count():
    """Every partner has the program's label and leaf count, is never the program itself, every other member of
    the group is drawn, and a program alone in its (label, leaf count) group gets -1."""
    from perfcast.models._torch import Groups, Partners

    lengths = [1, 1, 2, 1, 2, 2, 1, 3]
    labels = np.array([0, 0, 0, 1, 0, 0, 0, 0])  # length 1: {0,1,6} label 0, {3} label 1; length 2: {2,4,5}
    g = Groups([np.zeros((L, 2), np.float32) for L in lengths], np.zeros((8, 1)))
    pairs = Partners(g, labels)
    rng = np.random.default_rng(0)
    seen: dict[int, set] = {}
    for L, (_, _, idx) in g.by_len.items():
        sel = np.arange(len(idx))
        for _ in range(200):
            part = pairs.draw(L, sel, rng)
            for q, pq in zip(sel, part):
                i = int(idx[q])
                if pq < 0:
                    seen.setdefault(i, set()).add(-1)
                    continue
                j = int(idx[pq])
                assert j != i and labels[j] == labels[i] and lengths[j] == lengths[i]
                seen.setdefault(i, set()).add(j)
    assert seen == {0: {1, 6}, 1: {0, 6}, 6: {0, 1}, 3: {-1}, 2: {4, 5}, 4: {2, 5}, 5: {2, 4}, 7: {-1}}


def test_rank_loss_hand_math():
    import torch

    from perfcast.models._torch import RANK_MARGIN, RANK_TEMPERATURE, rank_loss

    z_i, z_j = torch.tensor([0.3, -0.1, 0.5]), torch.tensor([0.1, 0.2, 0.5])
    y_i = torch.tensor([2.0, 1.0, 1.0])
    y_j = torch.tensor([1.0, 3.0, 1.0 + RANK_MARGIN / 2])  # the third pair is within the margin: left out
    sp = lambda x: math.log1p(math.exp(x))  # noqa: E731
    expect = (sp(-(0.3 - 0.1) / RANK_TEMPERATURE) + sp((-0.1 - 0.2) / RANK_TEMPERATURE)) / 2
    assert float(rank_loss(z_i, z_j, y_i, y_j)) == pytest.approx(expect, rel=1e-5)
    assert float(rank_loss(z_i[2:], z_j[2:], y_i[2:], y_j[2:])) == 0.0


def test_rank_term_pairs_programs_of_one_task(mlp_data):
    """rank_lambda > 0 with groups pairs programs (and changes the model); at 0 it is the plain model exactly,
    groups or not; rank_lambda > 0 without groups, or a wrong number of labels, is an error."""
    sub, X, y, tr, va = mlp_data
    groups = sub.workload_key.to_numpy()
    plain = get_model("cdmpp", **CDMPP).fit(X.take(tr), y[tr], X.take(va), y[va])
    off = get_model("cdmpp", **CDMPP).fit(X.take(tr), y[tr], X.take(va), y[va], groups=groups[tr])
    ranked = get_model("cdmpp", **CDMPP, rank_lambda=1.0).fit(X.take(tr), y[tr], X.take(va), y[va],
                                                               groups=groups[tr])
    np.testing.assert_array_equal(off.predict(X), plain.predict(X))
    assert plain.info_["rank_pairs"] == 0 and off.info_["rank_pairs"] == 0
    # every training program that shares its task and leaf count with another one is paired once per epoch
    from collections import Counter

    keys = [(g, max(1, len(a))) for g, a in zip(groups[tr], X.take(tr).leaves)]
    count = Counter(keys)
    pairable = sum(count[k] > 1 for k in keys)
    assert pairable > 0
    assert ranked.info_["rank_pairs"] == ranked.info_["epochs"] * pairable
    assert not np.allclose(ranked.predict(X), plain.predict(X))
    with pytest.raises(PerfcastError, match=r"3 group labels; pass one label per program"):
        get_model("cdmpp", **CDMPP).fit(X.take(tr), y[tr], groups=groups[:3])
    with pytest.raises(PerfcastError, match=r"rank_lambda=1\.0 needs the programs' task labels: pass fit\(\.\.\., "
                                            r"groups=\.\.\.\)"):
        get_model("cdmpp", **CDMPP, rank_lambda=1.0).fit(X.take(tr), y[tr])


def test_bundled_model_ships_seven_members_within_the_size_limit():
    """The bundled model is an ensemble of cdmpp, mlp and lgbm members with a residual stage fitted to the MAPE (since
    2026-11-27 22:31), its members gated by annotation region (since 2026-11-28 09:11; untuned kernels lean on the
    tree), every member and the residual reading the programs' assembly features (R7, since 2026-11-29 12:30), a
    selection sigma fitted for it; since 2026-12-07 with a second cdmpp seed and three more mlp seeds beside the
    first three members, which its LightGBM parts saved without their training statistics keep <= 20 MB (issue 3:
    it ships in the package)."""
    import lzma

    from perfcast import paths
    from perfcast.models.gbdt import TRAINING_ONLY_LINES

    root = paths.bundled_model_dir()
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    assert size <= 20 * 10**6, size
    m = load_model(root)
    assert [mm.name for mm in m.members_] == ["cdmpp", "mlp", "lgbm", "cdmpp", "mlp", "mlp", "mlp"]
    assert [mm.params["seed"] for mm in m.members_ if mm.name != "lgbm"] == [0, 0, 1, 1, 2, 3]
    assert all(mm.params["use_asm"] for mm in m.members_ if mm.name != "lgbm")
    assert all(mm.params["use_analytic"] for mm in m.members_ if mm.name == "cdmpp")
    assert m.members_[2].params["features"] == "program_asm" and m.members_[2].params["target_scale"] == "work"
    assert m.residual_.params["objective"] == "mape" and m.residual_.params["features"] == "program_asm"
    assert m.needs_asm and m.info_["selection"]["sigma"] == 0.05
    assert m.params["gate"] == "annotations" and m.params["members_from"] is None
    assert m.info_["measured_before"].startswith("2026-12-03T08:00")
    assert sorted(m.gate_) == [0, 1, 2, 3] and all(abs(sum(w) - 1) < 1e-9 for w in m.gate_.values())
    assert all(len(w) == 7 for w in m.gate_.values())
    assert m.gate_[0][2] == max(m.gate_[0])  # default kernels (region 0): the tree member weighs most
    for part in ("member2", "residual"):
        text = lzma.decompress((root / part / "lgbm.txt.xz").read_bytes()).decode()
        assert text.count("leaf_value=") >= 50 and not TRAINING_ONLY_LINES.search(text)
