"""perfcast.eval: metrics against hand math, scipy and scikit-learn; splits on a small synthetic record table."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.integrate import quad

from perfcast.errors import PerfcastError, UnknownNameError
from perfcast.eval import (SPLITS, Split, accuracy_within, by_device, by_network, by_task, get_split,
                           held_out_task_mask, kendall_tau_by_group, label_noise_split, lognormal_mape, mape, r2, random_split, rmse, summarize,
                           top_k_score)

# ------------------------------------------------------------------------------------------------------------ metrics

Y = [1.0, 2.0, 4.0, 5.0]
P = [1.08, 1.5, 4.0, 6.0]  # relative errors 0.08, 0.25, 0, 0.2; errors 0.08, -0.5, 0, 1


def test_pointwise_metrics_hand_math():
    assert mape(Y, P) == pytest.approx((0.08 + 0.25 + 0 + 0.2) / 4, rel=1e-12)
    assert rmse(Y, P) == pytest.approx(math.sqrt((0.0064 + 0.25 + 0 + 1) / 4), rel=1e-12)
    assert r2(Y, P) == pytest.approx(1 - 1.2564 / 10, rel=1e-12)  # mean 3, ss_tot = 4 + 1 + 1 + 4
    assert accuracy_within(Y, P, 0.05) == 0.25
    assert accuracy_within(Y, P, 0.10) == 0.5
    assert accuracy_within(Y, P, 0.20) == 0.75  # |6 - 5| / 5 == 0.2: the bound is inclusive
    assert accuracy_within(Y, P, 0.30) == 1.0
    assert mape(Y, Y) == 0.0 and rmse(Y, Y) == 0.0 and r2(Y, Y) == 1.0


def test_pointwise_metrics_match_sklearn():
    from sklearn import metrics as skm

    rng = np.random.default_rng(3)
    y = rng.uniform(1e-5, 1e-2, 200)
    p = y * rng.lognormal(0, 0.3, 200)
    assert mape(y, p) == pytest.approx(skm.mean_absolute_percentage_error(y, p), rel=1e-12)
    assert rmse(y, p) == pytest.approx(math.sqrt(skm.mean_squared_error(y, p)), rel=1e-12)
    assert r2(y, p) == pytest.approx(skm.r2_score(y, p), rel=1e-12)


def test_r2_of_constant_y_is_nan():
    assert math.isnan(r2([2.0, 2.0], [1.0, 3.0]))


# group a: tau(y=[1,2,3], p=[1,3,2]) = (2 - 1) / 3; group b: tau([5,6], [2,1]) = -1;
# group c: one distinct y (left out); group d: constant predictions (tau undefined, left out)
TAU_Y = [1, 5, 2, 7, 3, 6, 7, 1, 2]
TAU_P = [1, 2, 3, 1, 2, 1, 2, 3, 3]
TAU_G = ["a", "b", "a", "c", "a", "b", "c", "d", "d"]


def test_kendall_tau_hand_math():
    assert kendall_tau_by_group(TAU_Y, TAU_P, TAU_G) == pytest.approx((1 / 3 - 1) / 2, rel=1e-12)
    assert math.isnan(kendall_tau_by_group([1, 1, 2], [1, 2, 3], ["a", "a", "b"]))  # no rankable group


def test_kendall_tau_matches_scipy_per_group():
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 6, 300).astype(str)
    y = rng.uniform(1, 10, 300).round(1)  # rounded: ties within groups
    p = y + rng.normal(0, 2, 300)
    df = pd.DataFrame({"g": groups, "y": y, "p": p})
    want = np.mean([stats.kendalltau(d.y, d.p).statistic for _, d in df.groupby("g")])
    assert kendall_tau_by_group(y, p, groups) == pytest.approx(want, rel=1e-12)


# task a (weight 2, first record): y=[3,1,2], p=[0.5,0.9,0.7]; task b (weight 1): y=[4,8], p=[1,2]
TOP_Y = [3.0, 4.0, 1.0, 8.0, 2.0]
TOP_P = [0.5, 1.0, 0.9, 2.0, 0.7]
TOP_G = ["a", "b", "a", "b", "a"]
TOP_W = [2, 1, 9, 1, 9]


def test_top_k_hand_math():
    # k=1: a picks y=3 -> 1/3, b picks y=4 -> 1; weighted (2 * 1/3 + 1 * 1) / 3
    assert top_k_score(TOP_Y, TOP_P, TOP_G, TOP_W, k=1) == pytest.approx(5 / 9, rel=1e-12)
    # k=2: a picks y=3, y=2 -> 1/2; b picks both -> 1
    assert top_k_score(TOP_Y, TOP_P, TOP_G, TOP_W, k=2) == pytest.approx(2 / 3, rel=1e-12)
    assert top_k_score(TOP_Y, TOP_P, TOP_G, TOP_W, k=5) == 1.0  # fewer than k programs: all picked
    assert top_k_score(TOP_Y, TOP_P, TOP_G, None, k=1) == pytest.approx((1 / 3 + 1) / 2, rel=1e-12)
    assert top_k_score(TOP_Y, TOP_Y, TOP_G, TOP_W, k=1) == 1.0  # a perfect ranking
    assert top_k_score([2.0, 1.0], [1.0, 1.0], ["t", "t"], k=1) == 0.5  # tie: the earlier record is picked


def _top_k_reference(y, p, g, w, k):
    df = pd.DataFrame({"y": y, "p": p, "g": g, "w": w})
    num = den = 0.0
    for _, d in df.groupby("g", sort=False):
        picked = d.sort_values("p", kind="stable").head(k)
        num += d.w.iloc[0] * d.y.min() / picked.y.min()
        den += d.w.iloc[0]
    return num / den


@pytest.mark.parametrize("k", [1, 5])
def test_top_k_matches_reference(k):
    rng = np.random.default_rng(k)
    g = rng.integers(0, 8, 400).astype(str)
    task_w = {str(t): float(t + 1) for t in range(8)}
    w = [task_w[t] for t in g]
    y = rng.uniform(1, 10, 400)
    p = y * rng.lognormal(0, 0.5, 400)
    assert top_k_score(y, p, g, w, k) == pytest.approx(_top_k_reference(y, p, g, w, k), rel=1e-12)


def test_summarize():
    s = summarize(TOP_Y, TOP_P)
    assert list(s) == ["n", "mape", "rmse", "acc_5", "acc_10", "acc_20", "r2"]
    full = summarize(TOP_Y, TOP_P, TOP_G, TOP_W)
    assert list(full) == list(s) + ["kendall_tau", "top1", "top5"]
    assert full["n"] == 5 and type(full["n"]) is int
    assert all(type(v) is float for k, v in full.items() if k != "n")
    assert full["mape"] == mape(TOP_Y, TOP_P) and full["r2"] == r2(TOP_Y, TOP_P)
    assert full["acc_10"] == accuracy_within(TOP_Y, TOP_P, 0.1)
    assert full["top1"] == pytest.approx(5 / 9, rel=1e-12) and full["top5"] == 1.0
    # a: tau([3,1,2], [.5,.9,.7]) = -1; b: tau([4,8], [1,2]) = 1
    assert full["kendall_tau"] == pytest.approx(0.0, abs=1e-12)
    assert json.loads(json.dumps(full)) == full


def test_label_noise_split_hand_math():
    # p = 1; log(p / y) = e, log(p / y_again) = e2, so y = exp(-e), y_again = exp(-e2)
    e, e2 = np.array([0.3, -0.1, -0.2, 0.1]), np.array([0.2, -0.3, 0.0, 0.1])
    s = label_noise_split(np.exp(-e), np.exp(-e2), np.ones(4))
    # E[e^2] = 0.15 / 4, E[e e2] = 0.10 / 4: the model's own 0.025, the labels' noise 0.0125
    assert s["n"] == 4
    assert s["total_rms"] == pytest.approx(math.sqrt(0.0375), rel=1e-12)
    assert s["model_rms"] == pytest.approx(math.sqrt(0.025), rel=1e-12)
    assert s["label_noise_rms"] == pytest.approx(math.sqrt(0.0125), rel=1e-12)
    assert s["model_share"] == pytest.approx(2 / 3, rel=1e-12)
    # y_again / y = exp(e - e2) = exp(0.1), exp(0.2), exp(-0.2), exp(0)
    floor = (math.expm1(0.1) + math.expm1(0.2) - math.expm1(-0.2) + 0) / 4
    assert s["floor_mape"] == pytest.approx(floor, rel=1e-12)
    assert s["model_mape"] == mape(np.exp(-e), np.ones(4)) and s["model_mape_again"] == mape(np.exp(-e2), np.ones(4))
    assert s["model_rms_as_mape"] == pytest.approx(lognormal_mape(math.sqrt(0.025)), rel=1e-12)


def test_label_noise_split_recovers_known_parts_and_lognormal_mape_matches_scipy():
    rng = np.random.default_rng(0)
    n = 200_000
    truth = np.exp(rng.normal(-7, 2, n))
    pred = truth * np.exp(rng.normal(0, 0.25, n))  # the model's own error: rms 0.25
    y, y_again = truth * np.exp(rng.normal(0, 0.10, n)), truth * np.exp(rng.normal(0, 0.15, n))
    s = label_noise_split(y, y_again, pred)
    assert s["model_rms"] == pytest.approx(0.25, abs=0.003)
    assert s["label_noise_rms"] == pytest.approx(0.10, abs=0.006)
    # E|exp(Z) - 1|, Z ~ N(0, sigma^2), by scipy's quadrature
    for sigma in (0.05, 0.25, 1.0):
        ref = quad(lambda z: abs(math.expm1(sigma * z)) * stats.norm.pdf(z), -12, 12, points=[0])[0]
        assert lognormal_mape(sigma) == pytest.approx(ref, rel=1e-6)
    assert lognormal_mape(0.0) == 0.0 and lognormal_mape(0.2) == pytest.approx(0.16172, abs=1e-5)
    # and the MAPE of the simulated model against the truth is that of its rms
    assert mape(truth, pred) == pytest.approx(lognormal_mape(0.25), rel=0.01)


@pytest.mark.parametrize("call, match", [
    (lambda: mape([1, 2, 3], [1, 2]), "3 measured values but 2 predictions"),
    (lambda: rmse([1, 0, -1], [1, 1, 1]), r"2 of 3 \(first: index 1 = 0.0\) measured values are not positive"),
    (lambda: r2([1, np.nan], [1, 1]), "measured values are not positive and finite"),
    (lambda: mape([1, 2], [1, np.inf]), r"1 of 2 \(first: index 1 = inf\) predictions are not finite"),
    (lambda: mape([], []), "no records to evaluate"),
    (lambda: kendall_tau_by_group([1, 2], [1, 2], ["a"]), "1 groups for 2 records"),
    (lambda: top_k_score([1, 2], [1, 2], ["a", "a"], [1], k=1), "1 weights for 2 records"),
    (lambda: top_k_score([1, 2], [1, 2], ["a", "a"], [-1, 1], k=1), "weights are not finite and non-negative"),
    (lambda: top_k_score([1, 2], [1, 2], ["a", "a"], [0, 0], k=1), "weights sum to 0"),
    (lambda: top_k_score([1, 2], [1, 2], ["a", "a"], k=0), "integer k >= 1"),
    (lambda: summarize([1, 2], [1, 2], weights=[1, 1]), "need groups"),
    (lambda: label_noise_split([1, 2], [1, 0], [1, 1]), "measured values are not positive"),
    (lambda: lognormal_mape(-0.1), "root mean square log error of -0.1"),
])
def test_metric_input_errors(call, match):
    with pytest.raises(PerfcastError, match=match) as e:
        call()
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------------------------- splits


def _records(n_tasks: int = 20, per_task: int = 5, with_imported: bool = True) -> pd.DataFrame:
    """t0-t2 in resnet50 only, t3 in resnet50 and resnet18 (shared), the rest in resnet18 or vgg11, and the last
    task (if with_imported) in no network; records alternate between two devices."""
    rows = []
    for t in range(n_tasks):
        if t < 3:
            nets = ("resnet50",)
        elif t == 3:
            nets = ("resnet18", "resnet50")
        elif with_imported and t == n_tasks - 1:
            nets = ()
        else:
            nets = ("resnet18",) if t % 2 else ("vgg11",)
        for j in range(per_task):
            rows.append({"record_id": f"r{t}.{j}", "workload_key": f"t{t}", "networks": nets,
                         "device_id": ("dev_a", "dev_b")[j % 2]})
    return pd.DataFrame(rows)


def _tasks(df: pd.DataFrame, idx: np.ndarray) -> set[str]:
    return set(df["workload_key"].iloc[idx])


def _check_partition(split: Split, n: int) -> None:
    parts = [split.train, split.val, split.test]
    assert all(len(part) > 0 and part.dtype == np.int64 for part in parts)
    assert all(np.all(np.diff(part) > 0) for part in parts)  # sorted, no duplicates
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n))  # disjoint and covering


def test_registry():
    assert set(SPLITS) == {"random", "by_network", "by_task", "by_device"}
    with pytest.raises(UnknownNameError, match=re.escape("unknown split 'nope'; known: by_device, by_network, "
                                                         "by_task, random")) as e:
        get_split("nope")
    assert isinstance(e.value, ValueError)
    with pytest.raises(PerfcastError, match="bad parameters for split 'by_task'.*test_networks"):
        get_split("by_task", test_networks=["resnet50"])
    df = _records()
    bound = get_split("by_network", test_networks=["resnet50"], val_frac=0.2)
    assert np.array_equal(bound(df, seed=4).val, by_network(df, 4, test_networks=["resnet50"], val_frac=0.2).val)


def test_random_split():
    df = _records()
    s = random_split(df, seed=0)
    _check_partition(s, 100)
    assert s.sizes() == {"train": 80, "val": 10, "test": 10}
    assert s.name == "random" and s.params == {"seed": 0, "val_frac": 0.1, "test_frac": 0.1}
    with pytest.raises(ValueError):
        s.train[0] = 5  # read-only
    again, other = random_split(df, seed=0), random_split(df, seed=1)
    assert all(np.array_equal(getattr(s, k), getattr(again, k)) for k in ("train", "val", "test"))
    assert not np.array_equal(s.test, other.test)


def test_by_network_is_strict():
    df = _records()
    s = by_network(df, seed=0, test_networks=["resnet50"])
    _check_partition(s, 100)
    assert _tasks(df, s.test) == {"t0", "t1", "t2", "t3"}  # t3 is also in resnet18, still test
    assert not _tasks(df, np.concatenate([s.train, s.val])) & {"t0", "t1", "t2", "t3"}
    assert len(_tasks(df, s.val)) == 2 and not _tasks(df, s.val) & _tasks(df, s.train)  # round(0.1 * 16) tasks
    assert s.sizes() == {"train": 70, "val": 10, "test": 20}
    assert s.params == {"seed": 0, "test_networks": ["resnet50"], "val_frac": 0.1}
    assert np.array_equal(by_network(df, seed=0, test_networks="resnet50").val, s.val)  # comma-separated string form
    assert np.array_equal(by_network(df, seed=0, test_networks=["resnet50"]).val, s.val)
    # networks as numpy arrays (as read back from Parquet) give the same split
    arrays = df.assign(networks=[np.array(n, dtype=object) for n in df["networks"]])
    assert np.array_equal(by_network(arrays, seed=0, test_networks=["resnet50"]).test, s.test)
    # two networks: vgg11 tasks are test as well
    both = by_network(df, seed=0, test_networks=["resnet50", "vgg11"])
    assert _tasks(df, both.test) == {"t0", "t1", "t2", "t3"} | {f"t{t}" for t in range(4, 19, 2)}


def test_held_out_task_mask_is_by_networks_test_part():
    """The mask goes by task, not by each record's own networks: t0's second record names only resnet18 (as a record
    of a task measured before resnet50 was in the zoo would), yet it is a record of a test task."""
    df = pd.DataFrame({"workload_key": ["t0", "t0", "t1", "t2", "t3", "t4"],
                       "networks": [["resnet50"], ["resnet18"], ["resnet18"], [], ["vgg11", "resnet50"], ["vgg11"]]})
    mask = held_out_task_mask(df, "resnet50")
    assert mask.tolist() == [True, True, False, False, True, False]
    assert np.array_equal(np.flatnonzero(mask), by_network(df, seed=0, test_networks="resnet50", val_frac=0.5).test)
    assert held_out_task_mask(df, "vgg11,resnet18").tolist() == [True, True, True, False, True, True]
    with pytest.raises(PerfcastError, match=r"no record of networks \['bert_base'\] in the data; known networks: "
                                            r"resnet18, resnet50, vgg11; pick --test-networks"):
        held_out_task_mask(df, ["bert_base"])


def test_by_network_scores_only_new_protocol_records_when_asked():
    """eval_min_protocol=2: training keeps every record; val and test keep the protocol-2 records of their tasks."""
    df = _records()
    df["protocol"] = np.where(np.arange(len(df)) % 5 < 2, 2, 1)  # two of each task's five records re-timed
    plain = by_network(df, seed=0, test_networks=["resnet50"])
    s = by_network(df, seed=0, test_networks=["resnet50"], eval_min_protocol=2)
    assert np.array_equal(s.train, plain.train)
    assert np.array_equal(s.test, plain.test[df["protocol"].to_numpy()[plain.test] == 2])
    assert np.array_equal(s.val, plain.val[df["protocol"].to_numpy()[plain.val] == 2])
    assert s.sizes() == {"train": 70, "val": 4, "test": 8}
    assert s.params == {"seed": 0, "test_networks": ["resnet50"], "val_frac": 0.1, "eval_min_protocol": 2}
    with pytest.raises(PerfcastError, match=r"split by_network: test is empty: no record of the test networks is of "
                                            r"protocol >= 3; measure them again"):
        by_network(df, seed=0, test_networks=["resnet50"], eval_min_protocol=3)


def test_by_network_errors():
    df = _records()
    known = "known networks: resnet18, resnet50, vgg11; pick --test-networks among them"
    with pytest.raises(PerfcastError, match=re.escape(f"no record of networks ['mobilenet_v2', 'bert_tiny'] in the "
                                                      f"data; {known}")):
        by_network(df)  # the default test networks are not all in the data: an error, not a partial split
    with pytest.raises(PerfcastError, match=re.escape(f"no record of networks ['foo'] in the data; {known}")):
        by_network(df, test_networks=["resnet50", "foo"])
    with pytest.raises(PerfcastError, match="split by_network: train is empty: every task occurs in one of the test "
                                            "networks.*hold out fewer networks"):
        by_network(_records(with_imported=False), test_networks=["resnet50", "resnet18", "vgg11"])
    with pytest.raises(PerfcastError, match=r"split by_network: val is empty: val_frac=0.1 of the 3 non-test tasks "
                                            r"rounds to 0; raise val_frac"):
        by_network(_records(n_tasks=7), test_networks=["resnet50"])


def test_by_task():
    df = _records()
    s = by_task(df, seed=0)
    _check_partition(s, 100)
    train, val, test = _tasks(df, s.train), _tasks(df, s.val), _tasks(df, s.test)
    assert (len(train), len(val), len(test)) == (16, 2, 2)
    assert not (train & val or train & test or val & test)
    assert s.sizes() == {"train": 80, "val": 10, "test": 10}
    assert np.array_equal(by_task(df, seed=0).test, s.test) and not np.array_equal(by_task(df, seed=2).test, s.test)
    with pytest.raises(PerfcastError, match=r"split by_task: test is empty: test_frac=0.1 of 4 tasks rounds to 0"):
        by_task(_records(n_tasks=4))
    with pytest.raises(PerfcastError, match=r"split by_task: val_frac=0.5, test_frac=0.5 leave nothing for train"):
        by_task(df, val_frac=0.5, test_frac=0.5)


def test_by_device():
    df = _records()
    s = get_split("by_device", test_device="dev_a")(df)
    _check_partition(s, 100)
    assert set(df["device_id"].iloc[s.test]) == {"dev_a"}
    assert set(df["device_id"].iloc[np.concatenate([s.train, s.val])]) == {"dev_b"}
    assert s.sizes() == {"train": 36, "val": 4, "test": 60}
    assert s.params == {"seed": 0, "test_device": "dev_a", "val_frac": 0.1}
    with pytest.raises(PerfcastError, match=r"split by_device: test is empty: no record of device 'dev_c'; "
                                            r"known devices: dev_a, dev_b"):
        by_device(df, test_device="dev_c")
    with pytest.raises(PerfcastError, match="split by_device needs test_device; known devices: dev_a, dev_b"):
        by_device(df)
    with pytest.raises(PerfcastError, match="train is empty: 'dev_a' is the only device"):
        by_device(df[df["device_id"] == "dev_a"], test_device="dev_a")


def test_missing_column():
    with pytest.raises(PerfcastError, match="split by_network: the data has no column networks"):
        by_network(_records().drop(columns="networks"), test_networks=["resnet50"])


def test_scores_per_device_are_the_metrics_of_each_devices_rows():
    """`scores` adds one entry per measured device (device_key): the overall metrics of that device's rows alone."""
    from perfcast.eval.metrics import mape
    from perfcast.eval.workflow import scores

    df = _records(n_tasks=6, per_task=4, with_imported=False)
    df["device_key"] = df["device_id"].map({"dev_a": "local@A/x", "dev_b": "local@B/y"})
    df["task_weight"] = 1
    y = np.linspace(1e-3, 4e-3, len(df))
    idx = np.arange(4, len(df))  # tasks t1..t5
    pred = y[idx] * np.where(np.arange(len(idx)) % 2 == 0, 1.5, 0.8)  # dev_a rows +50 %, dev_b rows -20 %
    s = scores(df, y, pred, idx, networks=["resnet50"])
    assert set(s["per_device"]) == {"local@A/x", "local@B/y"}
    assert s["per_device"]["local@A/x"]["mape"] == pytest.approx(0.5)
    assert s["per_device"]["local@B/y"]["mape"] == pytest.approx(0.2)
    assert s["per_device"]["local@A/x"]["n"] == s["per_device"]["local@B/y"]["n"] == len(idx) // 2
    assert s["overall"]["mape"] == pytest.approx(mape(y[idx], pred)) == pytest.approx(0.35)
    assert "per_device" not in scores(df.drop(columns=["device_key"]), y, pred, idx)


def test_records_of_device_by_key_or_id():
    """A device key selects its rows; `local` means this machine's key; a device without rows is a one-line error
    that lists the frame's devices."""
    from perfcast.devices import get_device
    from perfcast.devices.base import device_key
    from perfcast.eval.workflow import records_of_device

    here = device_key(get_device("local"))
    df = pd.DataFrame({"device_key": ["local@A/x", here, "local@A/x"]})
    key, mask = records_of_device(df, "local@A/x")
    assert key == "local@A/x" and mask.tolist() == [True, False, True]
    key, mask = records_of_device(df, "local")
    assert key == here and mask.tolist() == [False, True, False]
    with pytest.raises(PerfcastError, match=re.escape(f"no records of device {here!r}; its devices: local@A/x")):
        records_of_device(df.iloc[[0]], "local")


# -------------------------------------------------------------------------------------------- prediction intervals
def test_conformal_bounds_are_the_order_statistics_by_hand():
    """n = 19 log errors, level 0.8: ranks ⌊20 · 0.1⌋ = 2 and ⌈20 · 0.9⌉ = 18 of the sorted errors; level 0.5:
    ranks 5 and 15; a level so wide that the rank falls outside 1..n clips to the extremes."""
    from perfcast.eval.intervals import conformal_bounds

    r = np.array([0.3, -0.2, 0.05, -0.6, 0.1, 0.0, 0.9, -0.05, 0.2, -0.1, 0.15, -0.3, 0.4, -0.15, 0.25, 0.02,
                  -0.4, 0.6, 0.07])
    s = np.sort(r)
    assert conformal_bounds(r, 0.8) == pytest.approx((math.exp(s[1]), math.exp(s[17])), rel=1e-12)
    assert conformal_bounds(r, 0.5) == pytest.approx((math.exp(s[4]), math.exp(s[14])), rel=1e-12)
    assert conformal_bounds(r, 0.99) == pytest.approx((math.exp(-0.6), math.exp(0.9)), rel=1e-12)
    with pytest.raises(PerfcastError, match=r"interval level 1.5 must be between 0 and 1"):
        conformal_bounds(r, 1.5)


def test_intervals_per_region_fall_back_to_all_and_cover_fresh_draws():
    """A region with fewer than REGION_MIN_PROGRAMS validation programs takes the bounds of all of them; fitted on
    log-normal errors (region 0: sd 0.1, region 3: sd 0.4) the bounds are the normal quantiles (scipy) and cover
    80 % of fresh draws from the same distributions."""
    from perfcast.eval.intervals import MIN_PROGRAMS, fit_intervals, interval_factors

    rng = np.random.default_rng(0)
    n0, n3, n1 = 4000, 4000, 30  # region 1 is too small for its own bounds
    regions = np.r_[np.zeros(n0), np.full(n3, 3), np.ones(n1)].astype(int)
    sd = np.where(regions == 0, 0.1, np.where(regions == 3, 0.4, 0.2))
    pred = rng.uniform(1e-4, 1e-2, len(regions))
    meas = pred * np.exp(rng.normal(0, sd))
    t = fit_intervals(meas, pred, regions, 0.8)
    assert t["level"] == 0.8 and t["n"] == len(regions) and set(t["regions"]) == {"0", "3"}
    z = stats.norm.ppf(0.9)
    assert t["regions"]["0"] == pytest.approx([math.exp(-0.1 * z), math.exp(0.1 * z)], rel=0.02)
    assert t["regions"]["3"] == pytest.approx([math.exp(-0.4 * z), math.exp(0.4 * z)], rel=0.04)
    lo, hi = interval_factors(t, [1, 0, 3])
    assert (lo[0], hi[0]) == tuple(t["all"]) and (lo[1], hi[1]) == tuple(t["regions"]["0"])
    fresh = pred * np.exp(rng.normal(0, sd))
    lo, hi = interval_factors(t, regions)
    inside = (fresh >= pred * lo) & (fresh <= pred * hi)
    assert inside[regions != 1].mean() == pytest.approx(0.8, abs=0.02)
    assert fit_intervals(meas[:MIN_PROGRAMS - 1], pred[:MIN_PROGRAMS - 1], regions[:MIN_PROGRAMS - 1]) is None
    with pytest.raises(PerfcastError, match="3 measured, 2 predicted latencies and 3 regions differ"):
        fit_intervals([1.0, 2.0, 3.0], [1.0, 2.0], [0, 0, 0])


# ------------------------------------------------------------------------------------------- training-data coverage
class _Seen:
    def __init__(self, train_dtypes):
        self.info_ = {} if train_dtypes is None else {"train_dtypes": train_dtypes}


def test_program_dtypes_of_hand_written_tir(naive_matmul, int8_matmul):
    from perfcast.eval.coverage import program_dtypes

    assert program_dtypes(naive_matmul(8, 8, 8)) == {"float32"}
    assert program_dtypes(int8_matmul) == {"int8", "int32"}
    assert program_dtypes(int8_matmul.script()) == {"int8", "int32"}  # the text gives the same
    assert program_dtypes('A: T.Buffer((4,), "float16"), T.Cast("bfloat16", x), "float32x8"') == \
        {"float16", "bfloat16", "float32x8"}


def test_dtype_warning_names_the_unseen_types_and_only_them(naive_matmul, int8_matmul):
    from perfcast.eval.coverage import dtype_warning, program_dtypes, unseen_dtypes

    seen = _Seen({"float32": 100, "int32": 3})  # int32 only as an index type, say: it counts as seen
    f, q = program_dtypes(naive_matmul(8, 8, 8)), program_dtypes(int8_matmul)
    assert unseen_dtypes(seen, q) == ["int8"] and unseen_dtypes(seen, f) == []
    assert dtype_warning(seen, [f, f]) is None
    w = dtype_warning(seen, [f, q, q], "kernels")
    assert w.startswith("2 of 3 kernels use int8, which none of the model's training programs use: ")
    assert "\n" not in w and "perfcast collect" in w
    assert dtype_warning(_Seen(None), [q]) is None and unseen_dtypes(_Seen(None), q) == []  # an older model
    assert dtype_warning(_Seen({"int8": 1}), [q]) == (
        "1 of 1 programs use int32, which none of the model's training programs use: their predictions are "
        "extrapolations and can be off many times over; measure them, or collect such programs (`perfcast "
        "collect`) and retrain")


def test_recomputed_share_and_its_warning(naive_matmul, recompute_rowsum):
    """The row sum's update store counts (1 add + 2 loads) x 256 runs, of which j repeats all but 1 in 8; Y's store
    (1 sub + 2 loads) x 32 runs once each: share 1 - (768 / 8 + 96) / (768 + 96). A matmul repeats nothing."""
    from perfcast.eval.coverage import RECOMPUTE_SHARE, counted_work, recompute_warning, recomputed_share

    assert counted_work(recompute_rowsum) == (768 + 96, 768 / 8 + 96)
    assert recomputed_share(recompute_rowsum) == pytest.approx(1 - (768 / 8 + 96) / (768 + 96))
    assert recomputed_share(recompute_rowsum.script()) == recomputed_share(recompute_rowsum)
    assert recomputed_share(naive_matmul(8, 8, 8)) == 0.0
    assert recompute_warning([0.0, RECOMPUTE_SHARE - 0.01]) is None
    w = recompute_warning([0.9, 0.0, RECOMPUTE_SHARE], "kernels")
    assert w.startswith("2 of 3 kernels repeat loop-invariant work (a reduction computed inside a loop it does not "
                        "use)") and "\n" not in w and w.endswith("(marked `recomputes`); measure them")


def test_training_dtypes_count_training_records_by_their_tasks(mlp_dataset):
    """Over the mlp dataset (float32 dense / add / relu tasks): every record counts for float32, and only the
    records asked about."""
    from perfcast.data.store import Dataset
    from perfcast.eval.coverage import training_dtypes

    root, df = mlp_dataset
    ds = Dataset(root)
    assert training_dtypes(ds, df, np.arange(len(df))) == {"float32": len(df)}
    assert training_dtypes(ds, df, np.arange(7)) == {"float32": 7}
    assert training_dtypes(ds, df, np.arange(0)) == {}


def test_bundled_model_warns_on_int8_programs_only(naive_matmul, int8_matmul, recompute_rowsum):
    """The bundled model knows its training dtypes; `predict_programs` warns on the int8 matmul (and still
    predicts it), not on a float32 one; and on a program that repeats loop-invariant work."""
    import warnings

    from perfcast.eval.workflow import predict_programs
    from perfcast.models import load_model

    m = load_model()
    seen = m.info_["train_dtypes"]
    assert set(seen) == {"float32", "int64", "int32", "bool"} and seen["float32"] > 100_000
    with pytest.warns(UserWarning, match=r"^1 of 2 programs use int8, which none of the model's training"):
        p = predict_programs([naive_matmul(16, 24, 32), int8_matmul], model=m)
    assert p.shape == (2,) and np.all(p > 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predict_programs([naive_matmul(16, 24, 32)], model=m)
    with pytest.warns(UserWarning, match=r"^1 of 2 programs repeat loop-invariant work"):
        p = predict_programs([naive_matmul(16, 24, 32), recompute_rowsum], model=m)
    assert p.shape == (2,) and np.all(p > 0)
