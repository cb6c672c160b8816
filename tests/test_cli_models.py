"""The model commands: help texts with examples, one-line errors, and train -> eval -> predict-records end to end
on a small dataset holding the bundled dataset's mlp records (about 90 programs of 3 tasks)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from perfcast.cli.app import app

runner = CliRunner()


def _cli(*args):
    """Run the real console entry point (the top-level error handler included)."""
    return subprocess.run([sys.executable, "-m", "perfcast.cli.app", *args], capture_output=True, text=True,
                          timeout=600)


def _one_line_error(res) -> str:
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize("cmd", ["train", "eval", "predict-records", "report", "hpo", "predict", "tune"])
def test_model_commands_have_help_with_an_example(cmd):
    res = runner.invoke(app, [cmd, "--help"])
    assert res.exit_code == 0
    assert "Example: perfcast " + cmd in " ".join(res.output.split())


def test_unknown_model_is_one_line(tmp_path):
    line = _one_line_error(_cli("train", "--model", "nosuch", "--out", str(tmp_path / "m")))
    assert line == "error: unknown model 'nosuch'; known: cdmpp, ensemble, lgbm, mlp, xgb"
    assert not (tmp_path / "m").exists()


def test_param_without_equals_is_one_line(tmp_path):
    line = _one_line_error(_cli("train", "--param", "foo", "--out", str(tmp_path / "m")))
    assert line == "error: --param 'foo' is not KEY=VALUE; e.g. --param epochs=100"


def test_unknown_param_is_one_line(tmp_path):
    line = _one_line_error(_cli("train", "--model", "xgb", "--param", "depth=3", "--out", str(tmp_path / "m")))
    assert line.startswith("error: unknown parameter(s) ['depth'] for model 'xgb'; known: ")
    assert "max_depth" in line


def test_eval_of_a_directory_that_is_no_model(tmp_path):
    line = _one_line_error(_cli("eval", "--model", str(tmp_path), "--json"))
    assert "is not a perfcast model (no model.json)" in line and "perfcast train --out DIR" in line


# ------------------------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def trained(mlp_dataset, tmp_path_factory):
    data, df = mlp_dataset
    model = tmp_path_factory.mktemp("model") / "xgb"
    res = _cli("train", "--data", str(data), "--model", "xgb", "--split", "random", "--out", str(model),
               "--param", "n_estimators=20", "--param", "threads=1", "--json")
    assert res.returncode == 0, res.stderr
    return model, json.loads(res.stdout.strip().splitlines()[-1])


def test_train_json(trained, mlp_dataset):
    model, r = trained
    _, df = mlp_dataset
    n = len(df)
    assert r["model"] == "xgb" and r["path"] == str(model)
    assert r["split"] == {"name": "random", "params": {"seed": 0, "val_frac": 0.1, "test_frac": 0.1}, "seed": 0}
    n_test = int(np.floor(0.1 * n + 0.5))
    assert r["sizes"] == {"train": n - 2 * n_test, "val": n_test, "test": n_test}
    overall = r["xgb"]["overall"]
    assert isinstance(overall["mape"], float) and 0 < overall["mape"] < 10
    assert overall["n"] == n_test and set(r["xgb"]["per_network"]) == {"mlp"}
    assert r["xgb"]["per_network"]["mlp"]["mape"] == pytest.approx(overall["mape"])  # every task is mlp's
    meta = json.loads((model / "model.json").read_text())
    assert meta["name"] == "xgb" and meta["n_train"] == r["sizes"]["train"]
    assert meta["params"]["n_estimators"] == 20 and meta["params"]["threads"] == 1
    assert meta["info"]["split"]["name"] == "random" and meta["info"]["test_mape"] == pytest.approx(overall["mape"])
    assert meta["info"]["default_weight"] == 10.0  # the training recipe's default, recorded


def test_train_stores_intervals_fitted_on_the_validation_part(trained, mlp_dataset):
    """The saved model keeps the split-conformal bounds of its own errors on the split's validation programs."""
    from perfcast.eval.intervals import conformal_bounds, program_regions
    from perfcast.eval.workflow import load_data, make_split
    from perfcast.models import load_model

    model, r = trained
    data, _ = mlp_dataset
    _, df, X = load_data(data, progress=False)
    sp = make_split(df, "random", 0, None)
    m = load_model(model)
    Xv = X.take(sp.val)
    log_err = np.log(df["latency_s"].to_numpy()[sp.val] / m.predict(Xv))
    t = m.info_["intervals"]
    assert t["level"] == 0.8 and t["n"] == len(sp.val) >= 20 and t["fitted_on"] == "validation"
    assert t["all"] == pytest.approx(conformal_bounds(log_err, 0.8), rel=1e-9)
    k = np.argsort(log_err)  # by hand: ranks floor(0.1 (n + 1)) and ceil(0.9 (n + 1))
    n = len(k)
    assert t["all"] == pytest.approx([np.exp(log_err[k[int(0.1 * (n + 1) + 1e-9) - 1]]),
                                      np.exp(log_err[k[math.ceil(0.9 * (n + 1) - 1e-9) - 1]])], rel=1e-9)
    assert t["all"][0] < 1 < t["all"][1]
    regions = program_regions(Xv)
    for reg, bounds in t["regions"].items():
        assert (regions == int(reg)).sum() >= 50
        assert bounds == pytest.approx(conformal_bounds(log_err[regions == int(reg)], 0.8), rel=1e-9)
    # the test part's coverage, reported by train and eval alike, by hand
    Xt, yt = X.take(sp.test), df["latency_s"].to_numpy()[sp.test]
    pt, rt = m.predict(Xt), program_regions(Xt)
    lo = np.array([t["regions"].get(str(g), t["all"])[0] for g in rt])
    hi = np.array([t["regions"].get(str(g), t["all"])[1] for g in rt])
    cov = np.mean((yt >= pt * lo) & (yt <= pt * hi))
    assert r["xgb"]["interval"] == {"level": 0.8, "coverage": pytest.approx(cov, abs=1e-12)}
    res = _cli("eval", "--model", str(model), "--data", str(data), "--json")
    assert json.loads(res.stdout.strip().splitlines()[-1])["xgb"]["interval"]["coverage"] == pytest.approx(cov)


def test_default_weight_is_validated_before_training(tmp_path):
    line = _one_line_error(_cli("train", "--model", "xgb", "--default-weight", "-1", "--out", str(tmp_path / "m")))
    assert line.startswith("error: default weight -1.0 must be a positive number")


def test_eval_reproduces_the_training_test_score(trained, mlp_dataset):
    model, r = trained
    data, _ = mlp_dataset
    res = _cli("eval", "--model", str(model), "--data", str(data), "--json")
    assert res.returncode == 0, res.stderr
    e = json.loads(res.stdout.strip().splitlines()[-1])
    assert e["model"] == "xgb" and e["split"]["name"] == "random" and e["sizes"] == r["sizes"]
    assert isinstance(e["xgb"]["overall"]["mape"], float)
    # the same model on the same test part: the same numbers
    assert e["xgb"]["overall"]["mape"] == pytest.approx(r["xgb"]["overall"]["mape"], rel=1e-9)
    assert e["xgb"]["overall"]["rmse"] == pytest.approx(r["xgb"]["overall"]["rmse"], rel=1e-9)


def test_eval_refuses_another_split_of_the_training_data(trained, mlp_dataset):
    model, _ = trained
    data, _ = mlp_dataset
    line = _one_line_error(_cli("eval", "--model", str(model), "--data", str(data), "--split", "by_task"))
    assert "trained on this dataset with split 'random'" in line and "use --split random" in line
    # the same split with another seed shuffles training records into the test part just as well
    line = _one_line_error(_cli("eval", "--model", str(model), "--data", str(data), "--seed", "1"))
    assert "would score records it was trained on" in line and "omit --split and --seed" in line


def test_predict_records_json(trained, mlp_dataset):
    from perfcast.eval.metrics import mape

    model, r = trained
    data, df = mlp_dataset
    res = _cli("predict-records", str(data), "--model", str(model), "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert [x["record_id"] for x in rows] == df.record_id.tolist()
    measured = np.array([x["measured_s"] for x in rows])
    pred = np.array([x["predicted_s"] for x in rows])
    np.testing.assert_array_equal(measured, df.latency_s.to_numpy())
    assert np.isfinite(pred).all() and (pred > 0).all()
    # the training part is most of the records: overall MAPE is below that of a constant (the median)
    assert mape(measured, pred) < mape(measured, np.full_like(measured, np.median(measured)))
    # the model's intervals (fitted on its validation records) around every prediction: one of its table's
    # (low, high) factor pairs each
    low, high = np.array([x["predicted_low_s"] for x in rows]), np.array([x["predicted_high_s"] for x in rows])
    table = json.loads((model / "model.json").read_text())["info"]["intervals"]
    pairs = np.array([table["all"], *table["regions"].values()])
    f = np.stack([low / pred, high / pred], axis=1)
    assert np.isclose(f[:, None, :], pairs[None], rtol=1e-9).all(axis=2).any(axis=1).all()
    assert (low < pred).all() and (pred < high).all()


def test_predict_records_flags_element_types_the_model_never_trained_on(trained, mlp_dataset, tmp_path):
    """The trained model knows it saw float32 only (no entry, no warning); a copy told it trained on int8 programs
    only marks every float32 record `unseen_dtypes` and the CLI says so in one line on stderr, JSON on stdout."""
    import shutil

    from perfcast.models.base import update_model_info

    model, _ = trained
    data, df = mlp_dataset
    res = _cli("predict-records", str(data), "--model", str(model), "--json")
    assert res.returncode == 0 and "warning" not in res.stderr
    assert not any("unseen_dtypes" in x for x in json.loads(res.stdout.strip().splitlines()[-1]))
    other = shutil.copytree(model, tmp_path / "int8-only")
    update_model_info(other, "train_dtypes", {"int8": 10})
    res = _cli("predict-records", str(data), "--model", str(other), "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(rows) == len(df) and all(x["unseen_dtypes"] == ["float32"] for x in rows)
    lines = [x for x in res.stderr.splitlines() if x.startswith("warning:")]
    assert lines == [f"warning: {len(df)} of {len(df)} programs use float32, which none of the model's training "
                     "programs use: their predictions are extrapolations and can be off many times over; measure "
                     "them, or collect such programs (`perfcast collect`) and retrain"]


def test_predict_records_scaled_by_a_speed_ratio(trained, mlp_dataset):
    """`speed_ratio` (what `--calibrate` measures for a device) multiplies the predictions of that device's records
    and keeps the unscaled ones; the dataset's other devices' records stay as they were. A ratio that is no positive
    number, or a device the dataset has no record of, is a one-line error."""
    from perfcast.errors import PerfcastError
    from perfcast.eval.workflow import check_calibratable, predict_records

    model, _ = trained
    data, df = mlp_dataset
    key = df.device_key.iloc[0]
    mine = (df.device_key == key).to_numpy()
    assert 0 < mine.sum() < len(df)  # records of this device and of others
    plain = predict_records(data, model)
    scaled = predict_records(data, model, device=key, speed_ratio=1.25)
    assert [r["record_id"] for r in scaled] == [r["record_id"] for r in plain]
    p, s = np.array([r["predicted_s"] for r in plain]), np.array([r["predicted_s"] for r in scaled])
    np.testing.assert_allclose(s[mine], 1.25 * p[mine])
    np.testing.assert_array_equal(s[~mine], p[~mine])
    assert [r["uncalibrated_predicted_s"] for r in scaled if "uncalibrated_predicted_s" in r] == p[mine].tolist()
    assert [r["measured_s"] for r in scaled] == [r["measured_s"] for r in plain]
    assert "uncalibrated_predicted_s" not in plain[0]
    with pytest.raises(PerfcastError, match=r"speed ratio 0.0 is not a positive number; .*perfcast calibrate"):
        predict_records(data, model, device=key, speed_ratio=0.0)
    other = "local:mcpu=sandybridge,threads=1"
    for call in (lambda: predict_records(data, model, device=other, speed_ratio=1.25),
                 lambda: check_calibratable(data, other)):
        with pytest.raises(PerfcastError, match=r"the dataset has no records of device 'local:mcpu=sandybridge,"
                                                r"threads=1@.*; its devices: "):
            call()
    check_calibratable(data, key)  # records of the device: passes
    res = runner.invoke(app, ["predict-records", "--help"])
    assert "--calibrate" in res.output


def test_predict_records_calibrate_a_device_the_dataset_lacks_fails_before_measuring(trained, mlp_dataset):
    """`--calibrate` scales a dataset's records of `--device`; a dataset with none is a one-line error that names its
    devices, given before the 40 reference programs are timed (it returns in well under their ~30 s)."""
    import time

    model, _ = trained
    data, df = mlp_dataset
    t0 = time.perf_counter()
    line = _one_line_error(_cli("predict-records", str(data), "--model", str(model),
                                "--device", "local:mcpu=sandybridge,threads=1", "--calibrate", "--json"))
    assert time.perf_counter() - t0 < 25
    assert "the dataset has no records of device 'local:mcpu=sandybridge,threads=1@" in line
    assert df.device_key.iloc[0] in line


def test_feature_cache_computes_only_wanted_records(mlp_dataset, tmp_path):
    """Features of some records compute those records only (a partition's cache file then holds part of it); a
    later call adds the rest to the same files."""
    import shutil

    from perfcast.data.frame import records_frame
    from perfcast.data.store import Dataset
    from perfcast.features.cache import _read_cache, cache_root, dataset_features

    data, df = mlp_dataset
    full = dataset_features(Dataset(data), df, jobs=1, progress=False)  # read from the fixture's cache
    copy = Dataset(shutil.copytree(data, tmp_path / "d", ignore=shutil.ignore_patterns("features")))
    cdf = records_frame(copy)
    assert cdf.record_id.tolist() == df.record_id.tolist()
    parts = copy._parts("records")
    assert len(parts) == 2 and not list(cache_root(copy).glob("*.parquet"))
    key = cdf.workload_key[0]
    one = cdf[cdf.workload_key == key]
    X1 = dataset_features(copy, one, jobs=None, progress=False)  # one partition: computed in this process
    holding = [p.name for p in parts if key in pq_keys(p)]
    assert [c.name for c in cache_root(copy).glob("*.parquet")] == holding
    cached = set().union(*(_read_cache(cache_root(copy) / h) for h in holding))
    assert cached == set(one.record_id) and len(one) < len(cdf)  # not the partitions' other records
    for i, j in enumerate(one.index):
        np.testing.assert_array_equal(X1.leaves[i], full.leaves[j])
        np.testing.assert_array_equal(X1.stores[i], full.stores[j])
    np.testing.assert_array_equal(X1.analytic, full.analytic[one.index])
    np.testing.assert_array_equal(X1.device, full.device[one.index])
    Xall = dataset_features(copy, cdf, jobs=1, progress=False)
    assert len(list(cache_root(copy).glob("*.parquet"))) == 2
    assert sorted(i for c in cache_root(copy).glob("*.parquet") for i in _read_cache(c)) == sorted(cdf.record_id)
    np.testing.assert_array_equal(Xall.analytic, full.analytic)
    assert all(np.array_equal(a, b) for a, b in zip(Xall.ordering, full.ordering))


def test_feature_cache_of_another_version_is_recomputed_not_read(mlp_dataset, tmp_path):
    """A cache file written under another feature tag (a removed extractor version whose number came back) is not
    read as today's: a warning names it, its records are recomputed and the file is rewritten under today's tag."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from perfcast.data.store import Dataset
    from perfcast.features.cache import CACHE_TAG, cache_file_tag, cache_root, dataset_features

    data, df = mlp_dataset
    full = dataset_features(Dataset(data), df, jobs=1, progress=False)
    copy = Dataset(shutil.copytree(data, tmp_path / "d"))
    files = sorted(cache_root(copy).glob("*.parquet"))
    assert len(files) == 2 and all(cache_file_tag(f) == CACHE_TAG for f in files)
    t = pq.read_table(files[0])
    an = t.column("analytic").to_pylist()
    t = t.set_column(t.schema.get_field_index("analytic"), "analytic",
                     pa.array([[v + 1.0 for v in a] for a in an], pa.list_(pa.float32())))
    pq.write_table(t.replace_schema_metadata({b"feature_tag": b"ca6-ps1-an4"}), files[0])  # stale, other values
    with pytest.warns(UserWarning, match=f"holds ca6-ps1-an4 features, not {CACHE_TAG}: recomputing"):
        X = dataset_features(copy, df, jobs=1, progress=False)
    np.testing.assert_array_equal(X.analytic, full.analytic)  # not the stale file's values
    assert all(cache_file_tag(f) == CACHE_TAG for f in files)
    np.testing.assert_array_equal(dataset_features(copy, df, jobs=1, progress=False).analytic, full.analytic)


def test_data_compact_keeps_every_feature_without_recomputing(mlp_dataset, tmp_path, monkeypatch):
    """`perfcast data compact` (the real entry point) on a dataset with a feature cache: the same records in fewer
    partitions, and their features read from the carried-over cache, equal to the original's, none recomputed."""
    import json
    import math
    import shutil

    import perfcast.features.cache as cache_mod
    from perfcast.data.frame import records_frame
    from perfcast.data.store import Dataset

    data, df = mlp_dataset
    full = cache_mod.dataset_features(Dataset(data), df, jobs=1, progress=False)
    copy = shutil.copytree(data, tmp_path / "d")
    res = _cli("data", "compact", str(copy), "--rows-per-part", "25", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    n_parts = math.ceil(len(df) / 25)
    records = out["tables"]["records"]
    assert records["partitions_before"] == 2 and records["partitions_after"] == n_parts
    assert out["feature_cache_files"] == n_parts
    cdf = records_frame(Dataset(copy))
    assert cdf.record_id.tolist() == df.record_id.tolist()  # the frame's order is the records', not the storage's

    def recompute(*a, **k):
        raise AssertionError("a feature was recomputed after compaction")

    monkeypatch.setattr(cache_mod, "_compute", recompute)
    X = cache_mod.dataset_features(Dataset(copy), cdf, jobs=1, progress=False)
    at = {r: i for i, r in enumerate(df.record_id)}
    for i, r in enumerate(cdf.record_id):
        j = at[r]
        np.testing.assert_array_equal(X.leaves[i], full.leaves[j])
        np.testing.assert_array_equal(X.stores[i], full.stores[j])
        np.testing.assert_array_equal(X.ordering[i], full.ordering[j])
        np.testing.assert_array_equal(X.analytic[i], full.analytic[j])


def pq_keys(part) -> set:
    import pyarrow.parquet as pq

    return set(pq.read_table(part, columns=["workload_key"]).column("workload_key").to_pylist())


@pytest.mark.parametrize("args, expect", [
    (["nosuchnet"], "unknown network 'nosuchnet'"),
    (["mlp", "--batch-size", "0"], "batch size 0"),
    (["mlp", "--plot", "x.png"], "--plot x.png draws predicted vs measured kernels; add --measure"),
    (["missing.onnx"], "ONNX file 'missing.onnx' not found"),
    (["mlp", "--schedules", "tuned:nowhere"], "'nowhere' is not a meta-schedule JSON database"),
    (["mlp", "--selection-sigma", "3"], "selection sigma 3.0 must be between 0 and 2"),
])
def test_predict_bad_input_is_one_line(args, expect):
    assert expect in _one_line_error(_cli("predict", *args))


def test_min_protocol_trains_and_evaluates_on_newer_records_only(mlp_dataset, tmp_path):
    """`--min-protocol 2` keeps only records timed under protocol 2 (here: a re-timed copy of 40 protocol-1 programs
    beside the bundled protocol-2 ones); the model remembers it and `eval` scores it on the same records."""
    import dataclasses
    import shutil

    from perfcast.data.frame import records_frame
    from perfcast.data.schema import MeasureRecord, from_row
    from perfcast.data.store import Dataset

    src, _ = mlp_dataset
    data = tmp_path / "d"
    shutil.copytree(src, data)
    ds = Dataset(data)
    rows = sorted((r for r in ds.read("records").to_pylist() if r["protocol"] == 1),
                  key=lambda r: r["record_id"])[:40]
    ds.add_records([dataclasses.replace(from_row(MeasureRecord, r), protocol=2, record_id="p2" + r["record_id"],
                                        latency_s=r["latency_s"] * 0.9) for r in rows])
    assert len(records_frame(ds)) == len(records_frame(Dataset(src)))  # superseded, not added
    res = _cli("train", "--data", str(data), "--model", "xgb", "--split", "random", "--min-protocol", "2",
               "--out", str(tmp_path / "m"), "--param", "n_estimators=20", "--param", "threads=1", "--json")
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout.strip().splitlines()[-1])
    # the 40 re-timed copies plus the bundled data's own protocol-2 mlp records (the rocketlake host's)
    n_new = len(records_frame(Dataset(src), min_protocol=2))
    assert sum(r["sizes"].values()) == 40 + n_new == len(records_frame(ds, min_protocol=2))
    assert json.loads((tmp_path / "m" / "model.json").read_text())["info"]["min_protocol"] == 2
    e = _cli("eval", "--model", str(tmp_path / "m"), "--data", str(data), "--json")
    assert e.returncode == 0, e.stderr
    e = json.loads(e.stdout.strip().splitlines()[-1])
    assert e["sizes"] == r["sizes"] and e["xgb"]["overall"]["mape"] == pytest.approx(r["xgb"]["overall"]["mape"])
    line = _one_line_error(_cli("train", "--data", str(data), "--model", "xgb", "--min-protocol", "3",
                                "--out", str(tmp_path / "m3")))
    assert "has no ok records of protocol >= 3" in line


def test_measured_before_trains_on_the_earlier_records_and_records_their_latest_time(mlp_dataset, tmp_path):
    """`--measured-before T` keeps the records timed before T (counted here from the stored timestamps), the model
    records T and the latest time among its records, eval and `own_split` (the benches) apply the model's cut by
    default (same sizes, same MAPE) and eval refuses another cut for a seeded random split; retraining just after
    `measured_through` gives the same data and split again. Bad times are one-line errors."""
    import pandas as pd

    from perfcast.data.store import Dataset
    from perfcast.errors import PerfcastError
    from perfcast.eval.workflow import evaluate, own_split, train

    data, df = mlp_dataset
    stamps = Dataset(data).read("records", ["record_id", "timestamp"]).to_pandas().set_index("record_id")
    t = pd.to_datetime(df["record_id"].map(stamps["timestamp"]), utc=True, format="ISO8601").sort_values()
    cut = t.iloc[len(t) * 2 // 3]  # a time between records: the earlier two thirds stay
    n = int((t < cut).sum())
    assert 40 <= n < len(df)
    when = cut.strftime("%Y-%m-%dT%H:%M:%S.%f")  # no zone: UTC
    res = _cli("train", "--data", str(data), "--model", "xgb", "--split", "random", "--out", str(tmp_path / "m"),
               "--param", "n_estimators=20", "--param", "threads=1", "--measured-before", when, "--json")
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout.strip().splitlines()[-1])
    assert sum(r["sizes"].values()) == n
    info = json.loads((tmp_path / "m" / "model.json").read_text())["info"]
    assert info["measured_before"] == cut.isoformat()
    latest = pd.Timestamp(info["measured_through"])
    assert latest == t[t < cut].max()
    own = evaluate(tmp_path / "m", data, progress=False)
    assert own["sizes"] == r["sizes"] and own["measured_before"] == cut.isoformat()
    _, _, own_df, _, _, own_sp = own_split(tmp_path / "m", data)  # the benches' parts: the same cut and split
    assert len(own_df) == n and own_sp.sizes() == r["sizes"]
    assert own["xgb"]["overall"]["mape"] == pytest.approx(r["xgb"]["overall"]["mape"])
    with pytest.raises(PerfcastError, match="a random split of the records measured before any time would score "
                                            "records it was trained on; omit --measured-before"):
        evaluate(tmp_path / "m", data, progress=False, measured_before="all")
    again = train(data=data, model="xgb", split="random", params={"n_estimators": 20, "threads": 1},
                  progress=False, measured_before=(latest + pd.Timedelta(microseconds=1)).isoformat())
    assert again["sizes"] == r["sizes"] and again["estimator"].info_["measured_through"] == latest.isoformat()
    assert again["test"]["overall"]["mape"] == pytest.approx(r["xgb"]["overall"]["mape"])
    line = _one_line_error(_cli("train", "--data", str(data), "--model", "xgb", "--measured-before", "yesterday",
                                "--out", str(tmp_path / "bad")))
    assert line == ("error: --measured-before 'yesterday' is not a time; give ISO 8601 UTC, e.g. "
                    "2026-11-28T14:50")
    with pytest.raises(PerfcastError, match=r"was measured before 2000-01-01T00:00:00\+00:00; pick a later time"):
        train(data=data, model="xgb", split="random", progress=False, measured_before="2000-01-01")
    assert not (tmp_path / "bad").exists()


def test_eval_min_protocol_rescores_the_same_test_tasks(mlp_dataset, tmp_path):
    """A by_network model trained with eval_min_protocol=2 is scored on its protocol-2 test records by default;
    `evaluate(eval_min_protocol=0)` scores every record of the same test tasks (the training part does not depend
    on it, so this is no leak), while another seed is still refused. Scores come per measured device too."""
    import dataclasses

    from perfcast.data.frame import records_frame
    from perfcast.data.schema import MeasureRecord, NetworkTaskRecord, TaskRecord, from_row
    from perfcast.data.store import Dataset
    from perfcast.eval.metrics import mape
    from perfcast.errors import PerfcastError
    from perfcast.eval.workflow import evaluate, train

    src = Dataset(mlp_dataset[0])
    ds = Dataset(tmp_path / "d", create=True)
    recs = sorted(src.read("records").to_pylist(), key=lambda r: r["record_id"])
    ds.add_records([from_row(MeasureRecord, r) for r in recs])
    ds.add_records([dataclasses.replace(from_row(MeasureRecord, r), protocol=2, record_id="p2" + r["record_id"])
                    for r in recs[::2]])  # every other program re-timed: protocol 2 supersedes it
    ds.add_tasks([from_row(TaskRecord, r) for r in src.read("tasks").to_pylist()])
    nets = sorted(src.read("networks").to_pylist(), key=lambda r: r["workload_key"])  # mlp's 3 tasks: the first
    ds.add_network_tasks([from_row(NetworkTaskRecord, {**r, "network": "mlp" if i == 0 else "mlp_twin"})  # stays
                          for i, r in enumerate(nets)])
    df = records_frame(ds)
    test_key = nets[0]["workload_key"]
    sp = {"test_networks": "mlp", "val_frac": 0.5, "eval_min_protocol": 2}
    r = train(data=ds.root, model="xgb", split="by_network", split_params=sp, out=tmp_path / "m",
              params={"n_estimators": 20, "threads": 1}, progress=False)
    assert r["estimator"].info_["train_dtypes"] == {"float32": r["sizes"]["train"]}  # the mlp's dense layers
    assert r["estimator"].info_["train_networks"] == {"mlp_twin": r["sizes"]["train"]}  # mlp's own task: test only
    is_test = (df["workload_key"] == test_key).to_numpy()
    assert r["sizes"]["test"] == int((is_test & (df["protocol"] == 2).to_numpy()).sum()) > 0
    own = evaluate(tmp_path / "m", ds.root, progress=False)
    assert own["sizes"] == r["sizes"] and own["xgb"]["overall"]["mape"] == pytest.approx(r["test"]["overall"]["mape"])
    every = evaluate(tmp_path / "m", ds.root, progress=False, eval_min_protocol=0)
    assert every["sizes"]["train"] == r["sizes"]["train"] and every["sizes"]["test"] == int(is_test.sum())
    rows, pred = every["_predictions"]["_rows"], every["_predictions"]["xgb"]
    assert every["xgb"]["overall"]["mape"] == pytest.approx(mape(rows["latency_s"].to_numpy(), pred))
    for key, s in every["xgb"]["per_device"].items():
        m = (rows["device_key"] == key).to_numpy()
        assert s["n"] == m.sum() and s["mape"] == pytest.approx(mape(rows["latency_s"].to_numpy()[m], pred[m]))
    with pytest.raises(PerfcastError, match="would score records it was trained on"):
        evaluate(tmp_path / "m", ds.root, progress=False, eval_min_protocol=0, seed=1)
