"""Layerwise multi-metric models: layer suites, layer features from TIR and from rows, the regressor families,
model selection, energy, save/load, and the real path (measure a layer suite, train, predict a network)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from perfcast.errors import PerfcastError, UnknownNameError
from perfcast.layerwise import (FEATURES, Layer, LayerwiseModel, features, holdout_eval, layer_of_row, layer_of_tir,
                                list_families, make_regressor)
from perfcast.layerwise.suite import LayerConfig, load_suite, parse_config, suite_to_relax
from perfcast.layerwise.table import table_from_csv

CONV = {"filters": 16, "kernel": [3, 3], "strides": [2, 2], "padding": "same", "dilation": [1, 1], "groups": 1,
        "input shape": [None, 8, 7, 4], "output shape": [None, 4, 4, 16], "workload": "conv2d"}
CONFIGS = {
    "net:conv": CONV,
    "net:dw": {**CONV, "filters": 4, "groups": 4, "strides": [1, 1], "padding": "valid"},
    "net:dil": {**CONV, "dilation": [2, 2], "strides": [1, 1], "padding": "valid"},
    "net:dense": {"units": 10, "input shape": [None, 32], "workload": "dense"},
    "net:maxpool": {"pool_size": [2, 2], "strides": [2, 2], "padding": "valid", "input shape": [None, 8, 8, 3],
                    "workload": "max_pool2d"},
    "random_avg_pool_1": {"pool_size": [3, 3], "stride": [1, 1], "padding": "same", "input shape": [None, 6, 6, 2],
                          "workload": "max_pool2d"},
    "random_max_pool_1": {"pool_size": [3, 3], "stride": [1, 1], "padding": "same", "input shape": [None, 6, 6, 2],
                          "workload": "avg_pool2d"},
    "net:conv_again": CONV,  # a duplicate: dropped
    "net:too_big_kernel": {**CONV, "kernel": [9, 9], "padding": "valid"},  # empty output: dropped
}


def _legalized(layers):
    from perfcast.collect.tasks import fuse

    import tvm

    mod = fuse(suite_to_relax(layers))
    return [mod[gv] for gv in mod.functions if isinstance(mod[gv], tvm.tirx.PrimFunc)]


# --- suites -------------------------------------------------------------------------------------------------------

def test_same_padding_follows_tensorflow():
    lc = parse_config("x", CONV)  # H=8, W=7, k=3, s=2: out ceil(8/2)=4, ceil(7/2)=4
    # H: total = (4-1)*2 + 3 - 8 = 1 -> (0, 1); W: total = (4-1)*2 + 3 - 7 = 2 -> (1, 1)
    assert lc.pads() == (0, 1, 1, 1)
    assert lc.out_hw() == (4, 4)
    assert lc.in_shape == (4, 8, 7)
    assert lc.flops() == 2 * 16 * 4 * 4 * 4 * 9
    dense = parse_config("d", CONFIGS["net:dense"])
    assert dense.flops() == 2 * 32 * 10 and dense.nbytes() == 4 * (32 + 320 + 10)


def test_dense_with_a_token_axis_is_a_matmul_over_the_tokens():
    tok = parse_config("t", {"units": 48, "input shape": [None, 7, 32], "use_bias": True, "workload": "dense"})
    assert tok.in_shape == (7, 32) and tok.rows == 7 and tok.bias
    assert tok.flops(batch=2) == 2 * 14 * 32 * 48
    assert tok.nbytes() == 4 * (7 * 32 + 32 * 48 + 7 * 48 + 48)
    assert tok.layer(batch=2) == Layer("dense", 14, 32, out_c=48, epilogue_ops=1)
    with pytest.raises(PerfcastError, match=r"dense input shape \[None, 2, 7, 32\] has more than one axis"):
        parse_config("x", {"units": 4, "input shape": [None, 2, 7, 32], "workload": "dense"})


def test_the_token_dense_suite_is_what_its_script_writes_and_leaves_the_test_networks_out():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mk", Path(__file__).parents[1] / "scripts" /
                                                  "make_token_dense_suite.py")
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    shipped = Path(__file__).parents[1] / "perfcast" / "layerwise" / "suites" / "token_dense.json"
    assert json.loads(shipped.read_text()) == mk.configs()
    layers = load_suite(f"layers:{shipped}")
    assert len(layers) == mk.N_LAYERS == 240  # none dropped as a duplicate or too big
    assert all(lc.flops() <= mk.MAX_FLOPS for lc in layers)
    shapes = {(lc.rows, lc.in_shape[-1], lc.out_channels) for lc in layers}
    assert not shapes & mk.HELD_OUT and mk.HELD_OUT == {(128, 128, 128), (128, 128, 512), (128, 512, 128)}

    aliased = Path(__file__).parents[1] / "perfcast" / "layerwise" / "suites" / "aliased_dense.json"
    assert json.loads(aliased.read_text()) == mk.aliased_configs()
    al = load_suite(f"layers:{aliased}")
    assert len(al) == mk.N_ALIASED == 200 and all(lc.flops() <= 2 * mk.ALIASED_MAX_MACS for lc in al)
    al_shapes = {(lc.rows, lc.in_shape[-1], lc.out_channels, lc.bias) for lc in al}
    assert not {s[:3] for s in al_shapes} & mk.HELD_OUT
    assert not al_shapes & {(lc.rows, lc.in_shape[-1], lc.out_channels, lc.bias) for lc in layers}
    # every weight row (4 x units bytes) is a multiple of 1 KiB: the column walk uses 4, 2 or 1 of L1's 64 sets
    assert all((4 * lc.out_channels) % 1024 == 0 for lc in al)
    assert {max(1, 4096 // ((4 * u) & -(4 * u))) for _, _, u, _ in al_shapes} == {1, 2, 4}


def test_load_suite_drops_duplicates_and_empty_outputs_and_samples(tmp_path):
    f = tmp_path / "cfg.json"
    f.write_text(json.dumps(CONFIGS))
    layers = load_suite(f"layers:{f}")
    assert [lc.name for lc in layers] == ["net:conv", "net:dw", "net:dil", "net:dense", "net:maxpool",
                                          "random_avg_pool_1", "random_max_pool_1"]
    # the random pools' workloads are swapped against their names; the name decides
    assert [lc.kind for lc in layers[-2:]] == ["avg_pool2d", "max_pool2d"]
    two = load_suite(f"layers:{f}@2")
    assert len(two) == 2 and two == load_suite(f"layers:{f}@2")  # seeded
    with pytest.raises(PerfcastError, match="bad layer suite 'layers:nofile'"):
        load_suite("layers:nofile")
    with pytest.raises(PerfcastError, match="not found"):
        load_suite(f"layers:{tmp_path}/missing.json")
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(PerfcastError, match="holds no layer configs"):
        load_suite(f"layers:{tmp_path}/bad.json")


# --- layers from TIR --------------------------------------------------------------------------------------------

def test_layer_of_tir_reads_the_hyper_parameters_back():
    layers = [LayerConfig("c", "conv2d", (4, 8, 7), 16, (3, 3), (2, 2), (1, 1), 1, "same"),
              LayerConfig("d", "conv2d", (4, 8, 8), 4, (3, 3), (1, 1), (1, 1), 4, "valid"),
              LayerConfig("l", "conv2d", (4, 9, 9), 8, (3, 3), (1, 1), (2, 2), 1, "valid"),
              LayerConfig("m", "max_pool2d", (3, 8, 8), 3, (2, 2), (2, 2)),
              LayerConfig("a", "avg_pool2d", (2, 6, 6), 2, (3, 3), (1, 1), padding="same"),
              LayerConfig("fc", "dense", (32,), 10),
              LayerConfig("tok", "dense", (5, 24), 12, bias=True)]
    got = sorted((layer_of_tir(f) for f in _legalized(layers)), key=lambda x: (x.layer_type, x.in_c))
    want = sorted([
        Layer("conv2d", 1, 4, 9, 9, 16, 4, 4, 3, 3, 2, 2, 1, 1, 1),  # padded input 8+0+1, 7+1+1
        Layer("depthwise_conv2d", 1, 4, 8, 8, 4, 6, 6, 3, 3, 1, 1, 1, 1, 4),
        Layer("dilated_conv2d", 1, 4, 9, 9, 8, 5, 5, 3, 3, 1, 1, 2, 2, 1),
        Layer("max_pool2d", 1, 3, 8, 8, 3, 4, 4, 2, 2, 2, 2),
        Layer("avg_pool2d", 1, 2, 8, 8, 2, 6, 6, 3, 3, 1, 1),
        Layer("dense", 1, 32, out_c=10),
        Layer("dense", 5, 24, out_c=12, epilogue_ops=1),
    ], key=lambda x: (x.layer_type, x.in_c))
    assert got == want
    # the same layers computed from the configs alone (how a suite's layers are matched without TVM)
    assert sorted((lc.layer() for lc in layers), key=lambda x: (x.layer_type, x.in_c)) == want


HAND_TIR = '''
# from tvm.script import tirx as T
@T.prim_func(s_tir=True)
def main(x: T.Buffer((T.int64(4), T.int64(64)), "float32"), w: T.Buffer((T.int64(64), T.int64(32)), "float32"),
         b: T.Buffer((T.int64(32),), "float32"), out: T.Buffer((T.int64(4), T.int64(32)), "float32")):
    T.func_attr({"tirx.noalias": True})
    mm = T.sblock_alloc_buffer((T.int64(4), T.int64(32)))
    for i, j, k in T.grid(T.int64(4), T.int64(32), T.int64(64)):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(x[vi, vk], w[vk, vj])
            T.writes(mm[vi, vj])
            with T.init():
                mm[vi, vj] = T.float32(0.0)
            mm[vi, vj] = mm[vi, vj] + x[vi, vk] * w[vk, vj]
    for i, j in T.grid(T.int64(4), T.int64(32)):
        with T.sblock("T_add"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(mm[vi, vj], b[vj])
            T.writes(out[vi, vj])
            out[vi, vj] = T.max(mm[vi, vj] + b[vj], T.float32(0.0))
'''


def test_hand_written_fused_dense_and_its_feature_vector():
    import tvm

    layer = layer_of_tir(tvm.script.from_source(HAND_TIR))
    assert layer == Layer("dense", 4, 64, out_c=32, epilogue_ops=1)
    f = features(layer)
    assert len(f) == len(FEATURES) == 20
    flops = 2 * 4 * 64 * 32
    assert f[:15] == [4, 64, 1, 1, 32, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    assert f[15:] == pytest.approx([math.log2(1 + flops), math.log2(1 + 256), math.log2(1 + 2048),
                                    math.log2(1 + 128), flops / 128])


def test_kernels_that_are_not_layers_have_no_layer():
    import tvm

    from perfcast.collect.tasks import fuse
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 8, 16), "float32"))
    y = relax.Var("y", relax.TensorType((2, 16, 4), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.softmax(relax.op.matmul(x, y)))
        bb.emit_func_output(out)
    mod = fuse(bb.get())
    funcs = [mod[gv] for gv in mod.functions if isinstance(mod[gv], tvm.tirx.PrimFunc)]
    assert funcs and all(layer_of_tir(f) is None for f in funcs)  # batched matmul, softmax: not layers


def test_layer_of_row_matches_the_profiling_dataset_columns():
    row = {"workload": "conv2d", "batch_size": 16, "filters": 192, "kernel_h": 3, "kernel_w": 3, "stride_h": 2,
           "stride_w": 2, "dilation_h": 1, "dilation_w": 1, "groups": 1, "in_h": 17, "in_w": 17, "in_c": 192,
           "out_h": 8, "out_w": 8, "out_c": 192, "units": float("nan")}
    assert layer_of_row(row) == Layer("conv2d", 16, 192, 17, 17, 192, 8, 8, 3, 3, 2, 2, 1, 1, 1)
    assert layer_of_row({"workload": "dense", "batch_size": 16, "in_features": 1024, "out_features": 1000}) == \
        Layer("dense", 16, 1024, out_c=1000)
    assert layer_of_row({**row, "groups": 192}).layer_type == "depthwise_conv2d"
    assert layer_of_row({**row, "dilation_h": 2}).layer_type == "dilated_conv2d"


# --- regressors and the model -----------------------------------------------------------------------------------

def _power_law_table(n=40, seed=0, devices=("devA",)):
    """Dense layers whose latency is 1e-7 (1 + in_c)(1 + out_c)^0.5 s and power 50 (1 + batch)^0.2 W."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for dev in devices:
        for i in range(n):
            layer = Layer("dense", int(rng.integers(1, 64)), int(rng.integers(16, 2048)),
                          out_c=int(rng.integers(16, 2048)))
            rows.append({"device": dev, "layer_type": "dense", "name": f"l{i}",
                         **dict(zip(FEATURES, features(layer))),
                         "latency_s": 1e-7 * (1 + layer.in_c) * (1 + layer.out_c) ** 0.5,
                         "power_w": 50 * (1 + layer.batch) ** 0.2, "memory_bytes": float("nan")})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("family", list_families())
def test_every_family_fits_and_predicts_positive_latencies(family):
    tab = _power_law_table()
    X, y = tab[list(FEATURES)].to_numpy(float), tab["latency_s"].to_numpy()
    p = make_regressor(family, seed=0).fit(X[:30], y[:30]).predict(X[30:])
    assert p.shape == (10,) and np.all(np.isfinite(p)) and np.all(p > 0)
    assert np.median(np.abs(p - y[30:]) / y[30:]) < 1.0  # every family learns the trend


def test_linear_family_recovers_a_power_law_within_one_percent():
    tab = _power_law_table()
    X, y = tab[list(FEATURES)].to_numpy(float), tab["latency_s"].to_numpy()
    p = make_regressor("linear").fit(X[:30], y[:30]).predict(X[30:])
    np.testing.assert_allclose(p, y[30:], rtol=1e-2)


def test_unknown_family_lists_the_known_ones():
    with pytest.raises(UnknownNameError, match="unknown regressor family 'gbm'; known: ert, knn, linear, mlp"):
        make_regressor("gbm")
    with pytest.raises(UnknownNameError, match="'gbm'"):
        LayerwiseModel(families=("gbm",)).fit(_power_law_table())


def test_model_selects_per_group_predicts_energy_and_round_trips(tmp_path):
    tab = _power_law_table(devices=("devA", "devB"))
    m = LayerwiseModel(families=("linear", "knn"), folds=4, min_rows=8).fit(tab)
    assert {(s["device"], s["metric"]) for s in m.summary()} == \
        {(d, k) for d in ("devA", "devB") for k in ("latency_s", "power_w")}  # memory: no rows -> no model
    sel = m.selection_[("devA", "dense", "latency_s")]
    assert sel["family"] == "linear" and sel["rows"] == 40 and set(sel["cv_mape"]) == {"linear", "knn"}
    assert sel["cv_mape"]["linear"] < 0.01 < sel["cv_mape"]["knn"]
    layers = [Layer("dense", 8, 100, out_c=400), Layer("conv2d", 1, 3, 8, 8, 4, 6, 6, 3, 3)]
    t = m.predict("devA", layers)
    assert t[0] == pytest.approx(1e-7 * 101 * 401 ** 0.5, rel=1e-2) and math.isnan(t[1])  # no conv model
    e = m.predict("devA", layers, "energy_j")
    assert e[0] == pytest.approx(t[0] * m.predict("devA", layers, "power_w")[0], rel=1e-12)
    back = LayerwiseModel.load(m.save(tmp_path / "lw"))
    np.testing.assert_array_equal(back.predict("devA", layers[:1]), t[:1])
    assert back.summary() == m.summary()
    with pytest.raises(PerfcastError, match="no data of device 'devC'.*perfcast layerwise train"):
        m.predict("devC", layers)
    with pytest.raises(PerfcastError, match="unknown metric 'watts'"):
        m.predict("devA", layers, "watts")
    with pytest.raises(PerfcastError, match="no .device, layer type, metric. group has 100 measured layers"):
        LayerwiseModel(min_rows=100).fit(tab)
    with pytest.raises(PerfcastError, match="not a layerwise model"):
        LayerwiseModel.load(tmp_path)


def test_a_group_the_families_cannot_learn_is_left_to_the_cost_model(tmp_path):
    tab = _power_law_table(devices=("devA", "devB"))
    noisy = tab.device == "devB"
    tab.loc[noisy, "latency_s"] = np.random.default_rng(1).lognormal(-6, 2, noisy.sum())  # unrelated to the sizes
    m = LayerwiseModel(families=("linear",), folds=4, min_rows=8, max_cv_mape=0.5).fit(tab)
    assert m.covers("devA", "dense") and not m.covers("devB", "dense") and m.covers("devB", "dense", "power_w")
    sel = m.selection_[("devB", "dense", "latency_s")]
    assert not sel["used"] and sel["cv_mape"]["linear"] > 0.5
    assert math.isnan(m.predict("devB", [Layer("dense", 8, 100, out_c=400)])[0])
    back = LayerwiseModel.load(m.save(tmp_path / "lw"))
    assert not back.covers("devB", "dense") and back.summary() == m.summary()


def test_holdout_eval_reports_each_metric_and_energy():
    rows = holdout_eval(_power_law_table(n=50), {"families": ("linear",), "min_rows": 8}, test_frac=0.2)
    by = {r["metric"]: r for r in rows}
    assert set(by) == {"latency_s", "power_w", "energy_j"}
    assert by["latency_s"]["test_rows"] == 10 and by["latency_s"]["train_rows"] == 40
    assert by["latency_s"]["mape"] < 0.01 and by["energy_j"]["mape"] < 0.01


def test_csv_table_converts_units(tmp_path):
    f = tmp_path / "m.csv"
    f.write_text("device,workload,batch_size,in_features,out_features,time_ms,power_w,memory_gb\n"
                 "A100,dense,16,1024,1000,0.5,120.0,0.25\nXeon,dense,16,1024,1000,2.0,90.0,-1\n")
    tab = table_from_csv(f)
    assert tab.latency_s.tolist() == [0.0005, 0.002] and tab.power_w.tolist() == [120.0, 90.0]
    assert tab.memory_bytes[0] == 0.25 * 2**30 and math.isnan(tab.memory_bytes[1])
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(PerfcastError, match=r"lacks the columns \['batch_size', 'device', 'time_ms', 'workload'\]"):
        table_from_csv(tmp_path / "x.csv")


# --- the real path: measure a suite of dense layers here, train, predict the MLP network ----------------------------

@pytest.fixture(scope="module")
def measured_dense(tmp_path_factory):
    from perfcast.collect.collector import CollectConfig, collect
    from perfcast.layerwise.table import table_from_dataset

    d = tmp_path_factory.mktemp("layers")
    sizes = [(784, 512), (512, 512), (512, 10), (256, 128), (1024, 256), (128, 64), (784, 128), (64, 10)]
    cfg = {f"fc{i}": {"units": u, "input shape": [None, k], "workload": "dense"} for i, (k, u) in enumerate(sizes)}
    (d / "dense.json").write_text(json.dumps(cfg))
    res = collect(CollectConfig(networks=(f"layers:{d}/dense.json",), device="local", programs_per_task=1,
                  check_load=False), str(d / "ds"), log=lambda m: None, progress=False)
    assert res.by_status["ok"] == 8
    return d / "ds", table_from_dataset(d / "ds")


def test_measured_layers_make_a_table(measured_dense):
    _, tab = measured_dense
    assert len(tab) == 8 and set(tab.layer_type) == {"dense"} and tab.device.nunique() == 1
    assert tab.device[0].startswith("local@")
    row = tab[tab.in_c == 784].sort_values("out_c")
    assert row.out_c.tolist() == [128, 512]
    # a 784x512 naive matmul costs more than a 784x128 one, and every time is a real, positive measurement
    assert row.latency_s.iloc[1] > row.latency_s.iloc[0] > 0


def test_predict_network_layerwise_uses_the_layer_model_for_dense_kernels(measured_dense, tmp_path):
    from perfcast.e2e import predict_network

    ds, tab = measured_dense
    lw = LayerwiseModel(families=("linear", "knn"), folds=2, min_rows=4).fit(tab)
    path = lw.save(tmp_path / "lw")
    r = predict_network("mlp", 1, "local", method="layerwise", layerwise_model=str(path))
    kr = predict_network("mlp", 1, "local")
    dense = [k for k in r["kernels"] if k["method"] == "layerwise"]
    assert len(dense) == 3 and r["layerwise"]["kernels"] == 3  # 784-512, 512-512, 512-10
    assert r["layerwise"]["share"] == pytest.approx(sum(k["total_predicted_s"] for k in dense) / r["predicted_s"])
    assert "no power measurements" in r["layerwise"]["energy_note"]
    # the kernels that are not layers keep the cost model's prediction
    others = {k["workload_key"]: k["predicted_s"] for k in kr["kernels"]}
    for k in r["kernels"]:
        if k["method"] == "kernel":
            assert k["predicted_s"] == others[k["workload_key"]]
    with pytest.raises(PerfcastError, match="--method layerwise predicts TVM's default"):
        predict_network("mlp", 1, "local", method="layerwise", schedules="random:0")
    with pytest.raises(PerfcastError, match="unknown method 'layers'"):
        predict_network("mlp", 1, "local", method="layers")


def test_cli_train_and_eval_on_a_layer_csv(tmp_path):
    from typer.testing import CliRunner

    from perfcast.cli.app import app

    tab = _power_law_table(n=20)
    csv = tmp_path / "m.csv"
    rows = ["device,workload,batch_size,in_features,out_features,time_ms,power_w"]
    rows += [f"gpu,dense,{int(r.batch)},{int(r.in_c)},{int(r.out_c)},{r.latency_s * 1e3},{r.power_w}"
             for r in tab.itertuples()]
    csv.write_text("\n".join(rows) + "\n")
    runner = CliRunner()
    res = runner.invoke(app, ["layerwise", "train", "--data", str(csv), "--out", str(tmp_path / "lw"),
                              "--families", "linear,knn", "--folds", "4", "--min-rows", "8", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert {(s["metric"], s["family"], s["used"]) for s in out["selection"]} == \
        {("latency_s", "linear", True), ("power_w", "linear", True)}
    assert LayerwiseModel.load(out["path"]).covers("gpu", "dense", "power_w")
    res = runner.invoke(app, ["layerwise", "eval", "--data", str(csv), "--families", "linear", "--min-rows", "8",
                              "--json"])
    assert res.exit_code == 0, res.output
    assert {r["metric"] for r in json.loads(res.output)} == {"latency_s", "power_w", "energy_j"}
    with pytest.raises(PerfcastError, match="--test-frac 1.5 must be between 0 and 1"):
        runner.invoke(app, ["layerwise", "eval", "--data", str(csv), "--test-frac", "1.5"],
                      catch_exceptions=False)
