"""Collecting: the isolated worker, random programs, the collector's resume guarantees (real TVM, tiny tasks)."""

import hashlib
import json
import os
import signal
import statistics
import subprocess
import re
import sys
import time

import pytest

from perfcast.collect.measure import MeasureConfig
from perfcast.collect.worker import IsolatedRunner
from perfcast.errors import PerfcastError

FAST = MeasureConfig(repeats=3, min_repeat_s=0.001, run_timeout_s=30, build_timeout_s=60)


def _crash_mod():
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def crash(A: T.Buffer((16,), "float32")):
        for i in range(16):
            A[i * 100000000] = T.float32(1)  # gigabytes past the end: SIGSEGV

    return tvm.IRModule({"main": crash.with_attr("global_symbol", "main")})


def _hang_mod():
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def hang(A: T.Buffer((1,), "float32")):
        for i in range(100000):
            for j in range(100000):
                A[0] = A[0] + T.float32(1)  # ~1e10 dependent adds: far beyond the timeout

    return tvm.IRModule({"main": hang.with_attr("global_symbol", "main")})


def test_worker_times_a_matmul(matmul64, target_json):
    import tvm

    with IsolatedRunner(1, FAST) as runner:
        r = runner.run(tvm.ir.save_json(matmul64), target_json)
    assert r["status"] == "ok", r
    lats = r["latencies_s"]
    assert len(lats) in (3, 6)  # 6 when re-measured for high spread
    assert r["latency_s"] == statistics.median(lats)
    assert r["latency_min_s"] == min(lats) and r["latency_max_s"] == max(lats)
    # 2*64^3 = 524k flops: between 0.5 GFLOPS and 500 GFLOPS on any CPU
    assert 1e-6 < r["latency_s"] < 1e-3
    assert r["number"] >= 1 and r["latency_s"] * r["number"] >= 0.5e-3


def test_time_modules_reads_each_programs_cache_part(matmul64, target_json):
    """`time_modules(..., cache_s=)` (timing_repeatability's split by host state) gets the cache part's reading of
    each program's kept round: a few microseconds with the host gate, NaN without it; the latencies are the same
    kind either way."""
    import dataclasses

    import numpy as np
    import tvm

    from perfcast.collect.calibrate import time_modules

    mods = [tvm.ir.save_json(matmul64)] * 2
    for cfg, gated in [(FAST, True), (dataclasses.replace(FAST, host_gate=None), False)]:
        cache = np.full(2, -1.0)
        with IsolatedRunner(1, cfg, workers=1, per_worker=2) as runner:
            now = time_modules(runner, mods, target_json, cache_s=cache)
        assert np.all((1e-6 < now) & (now < 1e-3))
        if gated:
            assert np.all((1e-7 < cache) & (cache < 1e-3)), cache
        else:
            assert np.isnan(cache).all()


def test_worker_survives_crash_and_hang(matmul64, target_json):
    import tvm

    cfg = MeasureConfig(repeats=3, min_repeat_s=0.001, run_timeout_s=3, build_timeout_s=60)
    with IsolatedRunner(1, cfg) as runner:
        crashed = runner.run(tvm.ir.save_json(_crash_mod()), target_json)
        assert crashed["status"] == "run_error"
        assert "crashed the worker" in crashed["error"]
        t0 = time.time()
        hung = runner.run(tvm.ir.save_json(_hang_mod()), target_json)
        assert hung["status"] == "timeout" and "exceeded 3 s" in hung["error"]
        assert time.time() - t0 < 20
        ok = runner.run(tvm.ir.save_json(matmul64), target_json)
        assert ok["status"] == "ok"
        assert runner.restarts == 2


def test_parallel_builds_time_one_program_at_a_time(matmul64, target_json):
    """Two workers build a batch at once; a crash or a hang in one slot leaves the other slot's result intact,
    results come back in input order, and `quiet` sees every timing (and may ask for it again)."""
    import tvm

    cfg = MeasureConfig(repeats=3, min_repeat_s=0.001, run_timeout_s=3, build_timeout_s=60, rounds=1)
    good = tvm.ir.save_json(matmul64)
    calls = []

    def quiet(measure_all):  # like the collector's load check: the first batch is "loaded" once
        rs = measure_all()
        calls.append([r["status"] for r in rs])
        return measure_all() if len(calls) == 1 else rs

    with IsolatedRunner(1, cfg, workers=2, per_worker=1) as runner:
        assert runner.slots == 2
        crashed, ok = runner.run_batch([tvm.ir.save_json(_crash_mod()), good], target_json, quiet)
        assert crashed["status"] == "run_error" and "crashed the worker" in crashed["error"]
        assert ok["status"] == "ok" and 1e-6 < ok["latency_s"] < 1e-3
        assert calls == [["run_error", "ok"]]  # the repeat timed only the program that ran, not the crash
        ok2, hung = runner.run_batch([good, tvm.ir.save_json(_hang_mod())], target_json, quiet)
        assert ok2["status"] == "ok" and hung["status"] == "timeout" and "exceeded 3 s" in hung["error"]
        assert calls[1] == ["ok", "timeout"]
        assert runner.restarts == 2
        # same program, two timings in different workers: the same latency within the timer's noise. Each is the
        # lowest of three batches, as measurement protocol 2 labels a program: this shared host runs up to 2x slow
        # for seconds at a time (README, Measurement protocol), which one batch of this 1-round config can catch
        ta, tb = [], []
        for _ in range(3):
            a, b = runner.run_batch([good, good], target_json)
            assert a["status"] == b["status"] == "ok"
            ta.append(a["latency_s"])
            tb.append(b["latency_s"])
        assert abs(min(ta) / min(tb) - 1) < 0.5
        with pytest.raises(ValueError, match="3 programs for 2 slots"):
            runner.run_batch([good] * 3, target_json)


def test_timing_rounds_label_the_lowest_round_and_survive_a_crash(matmul64, target_json):
    """Protocol 2: each program is timed in `rounds` rounds (at least `round_gap_s` apart), labelled with the
    lowest round median; a crash takes its worker's other programs with it, and they are built again and timed in
    the same round instead of being lost."""
    import tvm

    from perfcast.data.schema import MEASURE_PROTOCOL

    cfg = MeasureConfig(repeats=3, min_repeat_s=0.001, run_timeout_s=10, build_timeout_s=60, rounds=3,
                        round_gap_s=0.2)
    good, crash = tvm.ir.save_json(matmul64), tvm.ir.save_json(_crash_mod())
    rounds_seen = []

    def quiet(measure_all):
        rs = measure_all()
        rounds_seen.append(len(rs))
        return rs

    with IsolatedRunner(1, cfg, workers=2, per_worker=2) as runner:
        assert runner.slots == 4 and runner.protocol == MEASURE_PROTOCOL == 2
        t0 = time.time()
        # each worker holds two programs (which two depends on whose build ends first); the crash (1) kills its
        # worker; its other program, if not yet timed, is built again and timed in the same round
        res = runner.run_batch([good, crash, good, good], target_json, quiet)
        took = time.time() - t0
    assert [r["status"] for r in res] == ["ok", "run_error", "ok", "ok"]
    assert all(r["protocol"] == 2 for r in res)
    assert rounds_seen == [4, 3, 3]  # round 1 times all four (one crashes), rounds 2 and 3 the other three
    for r in (res[0], res[2], res[3]):
        assert len(r["round_latencies_s"]) == 3
        assert r["latency_s"] == min(r["round_latencies_s"])
        assert 1e-6 < r["latency_s"] < 1e-3
    assert runner.restarts == 1
    assert took >= 2 * 0.2  # three rounds of one program are at least two gaps apart


def test_host_gate_judges_each_round_against_a_low_quantile_of_recent_readings():
    """Per part (cpu, cache), the ratio is the slower of a round's two readings over the part's baseline: the 10th
    percentile of its window of recent readings (this round's added first; with few readings, their minimum); a
    round is contended when either part is over the gate; no gate never is; bad readings are a one-line error."""
    from perfcast.collect.sentinel import WINDOW, HostGate, summary

    g = HostGate(1.5)
    assert g.judge([[1.0e-4, 2e-6], [1.1e-4, 2e-6]]) == pytest.approx([1.1, 1.0])
    parts = g.judge([[1.2e-4, 3.4e-6], [1.0e-4, 3e-6]])  # the cache part slow (someone else in the L2)
    assert parts == pytest.approx([1.2, 1.7]) and g.contended(max(parts)) and not g.contended(parts[0])
    assert g.judge([[0.8e-4, 1.0e-6], [1.0e-4, 1e-6]]) == pytest.approx([1.25, 1.0])  # a faster host lowers the bar
    assert g.base_s == {"": [0.8e-4, 1e-6]}  # 6 readings: index int(0.1 * 5) = 0, the minimum
    for i in range(10):  # 26 readings: the baseline is the third smallest, so the lucky ones no longer set it
        g.judge([[1.0e-4 + i * 1e-6, 2e-6]] * 2)
    assert g.base_s[""] == pytest.approx([1.0e-4, 2e-6]) and len(g.window_s[""][0]) == 26
    for _ in range(WINDOW):  # only the most recent WINDOW readings count: a slower host moves the baseline
        g.judge([[2e-4, 4e-6]])
    assert g.base_s[""] == [2e-4, 4e-6] and len(g.window_s[""][1]) == WINDOW
    g.ratios += [1.1, 1.25, 1.0]
    st = g.stats()
    assert st["sentinel_baseline_us"] == {"cpu": 200.0, "cache": 4.0} and st["ratio_median"] == 1.1
    assert st["ratio_max"] == 1.25 and st["retimed_by"] == {"cpu": 0, "cache": 0}
    assert st["readings_from_store"] == {"cpu": 0, "cache": 0}
    g.rounds, g.retimed, g.retimed_by["cache"], g.waited_s = 10, 3, 3, 1.5
    assert summary(g.stats()) == ("host gate 1.5x: 3 of 10 timing rounds timed again (over the gate: cache 3), "
                                  "1.5 s waited, 0 kept slow")
    assert not HostGate(None).contended(5.0)
    # `run`: only the CPU part decides (GATED_PARTS); a slow cache part is reported in `host_parts`, nothing more
    h = HostGate(1.5)
    h.judge([[1e-4, 1e-6]])
    r = h.run(lambda: {"status": "ok", "host_s": [[1e-4, 9e-6]]}, 0.0, 1.0)
    assert (r["host_ratio"], r["host_parts"], h.retimed) == (1.0, pytest.approx([1.0, 9.0]), 0)
    r = h.run(lambda: {"status": "ok", "host_s": [[3e-4, 1e-6]]}, 0.25, 1.0)  # timed again 4x, then kept
    assert r["host_ratio"] == pytest.approx(3.0)
    assert (h.retimed, h.retimed_by, h.kept_contended) == (4, {"cpu": 4, "cache": 0}, 1)
    with pytest.raises(ValueError, match=r"sentinel readings \[\[0.0, 1e-06\]\]: need \[cpu, cache\] positive"):
        g.judge([[0.0, 1e-6]])
    with pytest.raises(ValueError, match="sentinel readings"):
        g.judge([1e-4, 1e-4])


def test_host_gate_keeps_recent_readings_per_host_across_runs(tmp_path, monkeypatch):
    """With a store, a runner starts from the readings the runners before it saved (per key), so a run that starts
    inside a spell is judged against the host's recent speed, not against the spell; a stored window older than
    MAX_AGE_S is not used; an unreadable file counts as empty; other keys stay."""
    from perfcast.collect import sentinel
    from perfcast.collect.sentinel import MAX_AGE_S, HostGate

    store = tmp_path / "host_gate.json"
    a = HostGate(1.5, store=store)
    for i in range(20):
        a.judge([[1.0e-4 + i * 1e-6, 2e-6 + i * 1e-8]], "k")
    a.judge([[5e-4, 5e-6]], "other")
    a.save()
    saved = json.loads(store.read_text())
    assert saved["k"]["cpu"] == [1.0e-4 + i * 1e-6 for i in range(20)] and saved["other"]["cache"] == [5e-6]

    b = HostGate(1.5, store=store)  # starts inside a cache spell: judged against the stored readings, not itself
    assert b.judge([[1.0e-4, 3.4e-6], [1.0e-4, 3.4e-6]], "k") == pytest.approx([1.0, 3.4 / 2.02])
    assert b.stats()["readings_from_store"] == {"cpu": 20, "cache": 20}
    assert b.contended(max(b.judge([[1.0e-4, 3.4e-6]], "k")))
    HostGate(1.5).save()  # no store: nothing written, no error
    unwritable = HostGate(1.5, store=tmp_path / "missing" / "host_gate.json")
    unwritable.judge([[1e-4, 1e-6]], "k")
    unwritable.save()  # a cache that cannot be written does not fail the run that measured
    assert not (tmp_path / "missing").exists()

    now = sentinel.time.time()
    monkeypatch.setattr(sentinel.time, "time", lambda: now + MAX_AGE_S + 1)
    assert HostGate(1.5, store=store).judge([[2e-4, 4e-6]], "k") == [1.0, 1.0]  # the stored window expired
    store.write_text("{not json")
    c = HostGate(1.5, store=store)
    assert c.judge([[2e-4, 4e-6]], "k") == [1.0, 1.0]
    c.save()
    assert list(json.loads(store.read_text())) == ["k"]


def test_sentinel_is_built_for_the_hosts_cpu_whatever_the_programs_mcpu():
    """The sentinel measures the host, not the code: an SSE2 (mcpu=x86-64) or AVX2 (haswell) program gets the
    sentinel of the host's own CPU and shares its baseline; another thread count, or a target that names another
    triple (not built for the host) or is not llvm, keeps its own."""
    import tvm

    from perfcast.collect.sentinel import baseline_key, sentinel_target

    host = tvm.target.codegen.llvm_get_system_cpu()
    sse2 = '{"kind": "llvm", "mcpu": "x86-64", "num-cores": 2}'
    assert json.loads(sentinel_target(sse2)) == {"kind": "llvm", "mcpu": host, "num-cores": 2}
    avx2 = '{"kind": "llvm", "mcpu": "haswell", "num-cores": 2}'
    assert sentinel_target(avx2) == sentinel_target(sse2) and baseline_key(avx2, 2) == baseline_key(sse2, 2)
    assert baseline_key(sse2, 1) != baseline_key(sse2, 2) and baseline_key(sse2, 2).endswith(
        hashlib.sha1(sentinel_target(sse2).encode()).hexdigest()[:12])
    for other in ('{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}', '{"kind": "cuda"}'):
        assert sentinel_target(other) == other


def test_a_worker_serving_two_mcpus_builds_one_host_sentinel():
    """The worker's sentinels are cached by the sentinel's target, not the program's: SSE2 and AVX2 programs of one
    host get the same (real) sentinel object, built once; its CPU part reads a positive time."""
    import tvm

    from perfcast.collect.sentinel import Sentinel, sentinel_target
    from perfcast.collect.worker import host_sentinel

    cache: dict = {}
    sse2 = '{"kind": "llvm", "mcpu": "x86-64", "num-cores": 1}'
    first = host_sentinel(cache, sse2, 1, tvm.cpu(0))
    again = host_sentinel(cache, '{"kind": "llvm", "mcpu": "haswell", "num-cores": 1}', 1, tvm.cpu(0))
    assert isinstance(first, Sentinel) and again is first and list(cache) == [sentinel_target(sse2)]
    assert first.seconds()[0] > 0


def test_sentinel_kernel_does_its_fixed_work_per_thread(target_json):
    """Each row of a sentinel part is updated `passes` times with a <- 0.999 a + 0.001: from zeros, every element
    ends at 1 - 0.999^passes (float32), so its work is fixed and independent of anything measured."""
    import numpy as np
    import tvm

    from perfcast.collect.sentinel import CACHE_WIDTH, SENTINEL_WIDTH, sentinel_module

    target = tvm.target.Target(json.loads(target_json))
    for passes, width in ((10, SENTINEL_WIDTH), (1, CACHE_WIDTH)):  # the CPU part (shortened) and the cache part
        lib = tvm.build(sentinel_module(2, passes, width), target=target)
        a = tvm.runtime.tensor(np.zeros((2, width), "float32"), tvm.cpu())
        lib["main"](a)
        want = np.float32(0.0)
        for _ in range(passes):
            want = want * np.float32(0.999) + np.float32(0.001)
        np.testing.assert_allclose(a.numpy(), np.full((2, width), want, "float32"), rtol=1e-6)
    assert abs(float(want) - 0.001) < 1e-9 and CACHE_WIDTH * 4 == 200 * 1024  # one pass; 200 KB per thread
    with pytest.raises(ValueError, match="sentinel needs threads >= 1"):
        sentinel_module(0)
    with pytest.raises(ValueError, match="a width that is a multiple of 16, got 2, 1, 100"):
        sentinel_module(2, 1, 100)


def test_host_gate_times_contended_rounds_again_then_keeps_them(matmul64, target_json):
    """The real path: the worker times the sentinel around every round and the runner judges it. With the gate at
    1.5 on a quiet machine rounds pass with a ratio near 1; with the gate below 1 every round counts as contended
    (no load can be staged that the sentinel reliably sees: `bench/host_contention.py` shows the real thing), so
    each is timed again after every pause until `host_wait_s`, then kept and counted."""
    import dataclasses

    import tvm

    cfg = MeasureConfig(repeats=3, min_repeat_s=0.001, run_timeout_s=30, build_timeout_s=60, rounds=2,
                        round_gap_s=0.0, host_pause_s=0.2, host_wait_s=0.6)
    good = tvm.ir.save_json(matmul64)
    with IsolatedRunner(1, cfg, workers=1, per_worker=1) as runner:
        r = runner.run_batch([good], target_json)[0]
    assert r["status"] == "ok" and len(r["host_parts"]) == len(r["round_sentinel_s"]) == 2
    # each round's ratio to the baseline, per part: near 1, and below 1 when both readings beat the 10th percentile
    # of the stored window (`HostGate`: a quantile, not the minimum)
    assert all(0.5 < cpu < 3.0 for cpu, _ in r["host_parts"]), r["host_parts"]
    assert all(1e-5 < cpu < 1e-2 and 1e-7 < cache < 1e-3 for cpu, cache in r["round_sentinel_s"])  # seconds
    assert runner.host.rounds >= 2 and all(0 < b < 0.01 for v in runner.host.base_s.values() for b in v)
    t0 = time.time()
    with IsolatedRunner(1, dataclasses.replace(cfg, host_gate=0.5), workers=1, per_worker=1) as runner:
        r = runner.run_batch([good], target_json)[0]
    assert r["status"] == "ok" and len(r["round_latencies_s"]) == 2
    g = runner.host.stats()
    assert (g["rounds"], g["retimed"], g["kept_contended"], g["waited_s"]) == (8, 6, 2, 1.2)  # 2 x (3 + 1 kept)
    assert g["retimed_by"] == {"cpu": 6, "cache": 0}  # (every part is over a gate below 1, but only the CPU part gates)
    assert all(b > 0 for b in g["sentinel_baseline_us"].values())
    assert time.time() - t0 >= 1.2
    with IsolatedRunner(1, dataclasses.replace(cfg, host_gate=None), workers=1, per_worker=1) as runner:
        r = runner.run_batch([good], target_json)[0]
    assert r["status"] == "ok" and r["host_parts"] == r["round_sentinel_s"] == [] and runner.host.rounds == 0


def test_build_error_is_a_record_not_a_crash(target_json):
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def bad(A: T.Buffer((4,), "float32")):
        for i in range(4):
            A[i] = T.call_extern("float32", "perfcast_no_such_symbol", A[i])

    with IsolatedRunner(1, FAST) as runner:
        r = runner.run(tvm.ir.save_json(tvm.IRModule({"main": bad.with_attr("global_symbol", "main")})),
                       target_json)
    assert r["status"] in ("build_error", "run_error")
    assert "perfcast_no_such_symbol" in r["error"]


def test_random_programs_are_distinct_and_replayable(matmul64):
    from perfcast._tvm.util import apply_trace, structural_key
    from perfcast.collect.space import default_program, random_programs
    from perfcast.devices import get_device

    target = get_device("local:threads=1").target()
    progs = []
    for p in random_programs(matmul64, target, seed=3):
        progs.append(p)
        if len(progs) == 12:
            break
    hashes = [p.program_hash for p in progs]
    assert len(set(hashes)) == 12
    assert default_program(matmul64).program_hash not in hashes
    rebuilt = apply_trace(matmul64, progs[5].trace_json)
    assert structural_key(rebuilt["main"]) == progs[5].program_hash


def test_mlp_tasks_and_weights():
    from perfcast.collect.tasks import extract
    from perfcast.devices import get_device

    nt = extract("mlp", get_device("local").target())
    # 784-512-512-10: three dense layers, the first two fused with ReLU, each once
    assert sorted(t.weight for t in nt.tasks) == [1, 1, 1]
    names = sorted(t.task_name for t in nt.tasks)
    assert sum("relu" in n for n in names) == 2
    again = extract("mlp", get_device("local").target())
    assert {t.workload_key for t in nt.tasks} == {t.workload_key for t in again.tasks}


def test_m5_tasks_are_one_dimensional_convolutions():
    from perfcast.collect.tasks import extract
    from perfcast.devices import get_device

    names = sorted(t.task_name for t in extract("m5", get_device("local").target()).tasks)
    # four distinct Conv1d layers (bias folded in), each once; Relax lowers MaxPool1d to expand_dims + max_pool2d
    # + squeeze, so the 1-D pooling arrives as four 2-D pooling tasks, BatchNorm + ReLU fused with the expand_dims
    assert [n for n in names if "conv" in n] == ["fused_conv1d1_add1", "fused_conv1d2_add2", "fused_conv1d3_add3",
                                                  "fused_conv1d_add"]
    assert sum(n.startswith("max_pool2d") for n in names) == 4
    assert sum(n.startswith("fused_batch_norm") and "expand_dims" in n for n in names) == 4
    assert len(names) == 18


def test_op_kinds_suite_gives_one_task_per_operator_kind():
    from pathlib import Path

    from perfcast.collect.tasks import extract
    from perfcast.devices import get_device

    suite = Path(__file__).parents[1] / "perfcast" / "layerwise" / "suites" / "op_kinds.py"
    nt = extract(f"{suite}:op_kinds", get_device("local").target())
    names = sorted(t.task_name for t in nt.tasks)
    assert nt.network == "op_kinds:op_kinds" and len(names) == 31 and {t.weight for t in nt.tasks} == {1}
    # four LayerNorm widths, two resizes (nearest, bilinear), the transposed convolution, the stem, SwiGLU's gate
    assert sum(n.startswith("layer_norm") for n in names) == 4 and sum(n.startswith("resize2d") for n in names) == 2
    for kind in ("argmax", "avg_pool2d", "adaptive_avg_pool2d", "fused_conv2d_transpose_add", "softmax", "pad",
                 "fused_conv2d_add4_relu1", "fused_matmul_tir_sigmoid_multiply3_multiply3", "take"):
        assert kind in names
    # what the suite leaves to bench/outside_zoo.py: no max pooling window, no grouped or 1-D / 3-D convolution
    assert not [n for n in names if "max_pool" in n or "conv1d" in n or "conv3d" in n or "group_norm" in n]
    # the file still yields exactly the tasks the bundled dataset measured from it (its fifty-second round)
    from perfcast import paths
    from perfcast.data.store import Dataset

    rows = Dataset(paths.bundled_dataset_dir()).read("networks").to_pandas()
    rows = rows[(rows["network"] == "op_kinds:op_kinds") & (rows["batch_size"] == 1)]
    assert set(rows["workload_key"]) == {t.workload_key for t in nt.tasks}


def test_collect_mlp_then_rerun_adds_nothing(tmp_path):
    from perfcast.collect.collector import CollectConfig, collect
    from perfcast.data.store import Dataset

    cfg = CollectConfig(networks=("mlp",), device="local:threads=1", programs_per_task=3, check_load=False,
                        measure=FAST)
    res = collect(cfg, str(tmp_path / "d"), log=lambda m: None, progress=False)
    assert res.measured == 9 and res.by_status["ok"] == 9
    t = Dataset(tmp_path / "d").read("records").to_pylist()
    assert len(t) == 9
    assert sum(r["schedule_kind"] == "default" for r in t) == 3
    for r in t:
        assert r["latency_s"] == statistics.median(r["latencies_s"])
        assert r["networks"] == ["mlp"] and r["device_id"] == "local:threads=1"
        assert json.loads(r["target_json"])["num-cores"] == 1
    again = collect(cfg, str(tmp_path / "d"), log=lambda m: None, progress=False)
    assert again.measured == 0
    assert Dataset(tmp_path / "d").read("records").num_rows == 9
    # a new network sharing the stored one's tasks, listed first: extracting it must not hide the stored tasks'
    # TIR from the network after it (a KeyError 'tir_script' once); every program is recorded already
    f = tmp_path / "same.py"
    f.write_text("from perfcast.networks import get_network\n"
                 "def build(batch_size):\n"
                 "    return get_network('mlp').build(batch_size)\n")
    both = CollectConfig(networks=(f"{f}:build", "mlp"), device="local:threads=1", programs_per_task=3,
                         check_load=False, measure=FAST)
    res = collect(both, str(tmp_path / "d"), log=lambda m: None, progress=False)
    assert res.tasks == 3 and res.measured == 0
    assert {r["network"] for r in Dataset(tmp_path / "d").read("networks").to_pylist()} == {"mlp", "same:build"}


def test_collect_keeps_stdout_for_results_when_the_host_runs_slow(tmp_path, capsys):
    """`perfcast adapt --json` prints the collector's JSON on stdout: its "the host runs slow" warning (a gate below
    1 makes every round contended, as in the host-gate test above) must go to stderr, or the JSON does not parse."""
    import dataclasses

    from perfcast.collect.collector import CollectConfig, collect

    slow = dataclasses.replace(FAST, host_gate=0.5, host_pause_s=0.05, host_wait_s=0.1, host_gate_store=False)
    cfg = CollectConfig(networks=("mlp",), device="local:threads=1", programs_per_task=1, check_load=False,
                        measure=slow)
    res = collect(cfg, str(tmp_path / "d"), log=lambda m: None, progress=False)
    assert res.measured == 3 and res.host_gate["retimed"] >= 3
    out, err = capsys.readouterr()
    assert out == "" and "the host runs slow" in err


def test_local_records_of_another_machine_do_not_count_here(tmp_path):
    """`local` is a different CPU on every machine: programs measured on another machine are measured again here,
    and the two machines' records are two devices in the summary (device_key)."""
    import dataclasses

    from perfcast.collect.collector import CollectConfig, collect
    from perfcast.data.schema import MeasureRecord, from_row
    from perfcast.data.store import Dataset
    from perfcast.data.summary import summarize
    from perfcast.devices import DeviceSpec, get_device
    from perfcast.devices.base import device_key

    cfg = CollectConfig(networks=("mlp",), device="local:threads=1", programs_per_task=2, check_load=False,
                        measure=FAST)
    first = str(tmp_path / "a")
    collect(cfg, first, log=lambda m: None, progress=False)
    here = get_device("local:threads=1")
    other = dataclasses.replace(here, name="Other CPU", source="probed /proc/cpuinfo and /sys; LLVM 22 detects zen9")
    assert device_key(here).startswith("local:threads=1@") and device_key(other) == "local:threads=1@Other CPU/zen9"
    moved = [dataclasses.replace(from_row(MeasureRecord, r), device_spec_json=other.to_json(),
                                 record_id=r["record_id"][::-1])
             for r in Dataset(first).read("records").to_pylist()]
    second = str(tmp_path / "b")
    ds = Dataset(second, create=True)
    ds.add_records(moved)
    res = collect(cfg, second, log=lambda m: None, progress=False)
    assert res.measured == 6  # 3 tasks x 2 programs, the other machine's 6 records notwithstanding
    s = summarize(second)
    assert s["devices"] == 2 and s["duplicates"] == 0
    assert sorted(s["ok_records_by_device"].values()) == [6, 6]
    two = {"tasks": 3, "min": 2, "p10": 2.0, "median": 2.0, "p90": 2.0, "max": 2}  # 3 tasks x 2 programs each
    assert s["programs_per_task_by_device"] == {device_key(here): two, device_key(other): two}
    assert s["network_programs_per_task_by_device"] == s["programs_per_task_by_device"]  # the mlp's tasks
    assert s["network_programs_per_task_by_device_and_batch"] == {device_key(here): {"1": two},
                                                                 device_key(other): {"1": two}}
    assert DeviceSpec.from_json(moved[0].device_spec_json).name == "Other CPU"


def test_records_of_an_older_protocol_are_measured_again_and_superseded(tmp_path):
    """Programs stored under timing protocol 1 (before the launching thread was pinned) are measured again under
    protocol 2 with new record ids; readers then see each program once, as its protocol-2 record."""
    import dataclasses

    from perfcast.collect.collector import CollectConfig, collect
    from perfcast.data.frame import records_frame
    from perfcast.data.schema import MeasureRecord, from_row
    from perfcast.data.store import Dataset
    from perfcast.data.summary import summarize

    cfg = CollectConfig(networks=("mlp",), device="local:threads=1", programs_per_task=2, check_load=False,
                        measure=FAST)
    first = str(tmp_path / "a")
    collect(cfg, first, log=lambda m: None, progress=False)
    old = [dataclasses.replace(from_row(MeasureRecord, r), protocol=1, round_latencies_s=(),
                               record_id=r["record_id"][::-1]) for r in Dataset(first).read("records").to_pylist()]
    second = str(tmp_path / "b")
    Dataset(second, create=True).add_records(old)
    res = collect(cfg, second, log=lambda m: None, progress=False)
    assert res.measured == 6 and res.skipped_existing == 0  # the same 6 programs, timed again
    df = records_frame(Dataset(second))
    assert len(df) == 6 and set(df["protocol"]) == {2}
    assert sorted(df["program_hash"]) == sorted(r.program_hash for r in old)
    s = summarize(second)
    assert (s["records"], s["superseded"], s["duplicates"]) == (6, 6, 0)
    assert collect(cfg, second, log=lambda m: None, progress=False).measured == 0  # protocol 2 is not redone


def test_calibrate_times_stored_programs_now_and_reports_the_median_ratio(tmp_path):
    """The programs of a dataset whose labels are K = 20x what this machine measures: calibrating against it finds the
    machine about 20x faster (ratio ~0.05), under protocol 2 or, for a device without protocol-2 records, against its
    older labels with a caution; it refuses an empty reference pool. Microsecond kernels timed twice by two protocols
    differ by up to ~1.6x (one CI run read 0.397 for a 4x scaling), so the bounds allow 2.5x either way: still far
    apart for the 1/K of scaled labels and the ~1 of true ones (1/K * 2.5 = 0.125 < 1 / 2.5 = 0.4)."""
    import dataclasses

    K, TOL = 20.0, 2.5

    def near(ratio, want):
        return want / TOL < ratio < want * TOL

    from perfcast.collect.calibrate import REFERENCE_MAX_S, calibrate, reference_records
    from perfcast.collect.collector import CollectConfig, collect
    from perfcast.data.schema import MeasureRecord, from_row
    from perfcast.data.store import Dataset
    from perfcast.errors import PerfcastError

    first = str(tmp_path / "a")
    collect(CollectConfig(networks=("mlp",), device="local:threads=1", programs_per_task=2, check_load=False,
                          measure=FAST), first, log=lambda m: None, progress=False)
    slow = [dataclasses.replace(from_row(MeasureRecord, r), latency_s=K * r["latency_s"])
            for r in Dataset(first).read("records").to_pylist()]
    second = str(tmp_path / "b")
    Dataset(second, create=True).add_records(slow)
    c = calibrate("local:threads=1", data=second, programs=10, exclude_networks=())
    assert (c.programs, c.failed) == (6, 0)  # the pool has 6 programs (3 tasks x 2): all of them
    assert near(c.speed_ratio, 1 / K)  # microsecond kernels timed twice: within timing noise
    assert c.ratio_p25 <= c.speed_ratio <= c.ratio_p75
    assert c.reference_protocol == 2 and c.note == ""
    # a device whose records all predate protocol 2 is calibrated against them, with a caution, and only against
    # its default kernels (here 20x; its random schedules' labels are the true times and would pull the ratio to 1);
    # where some records are of protocol 2, only those are references (here the 20x ones; protocol-1 labels true)
    old = [dataclasses.replace(r, protocol=1, round_latencies_s=()) for r in slow]
    third, mixed = str(tmp_path / "c"), str(tmp_path / "d")
    Dataset(third, create=True).add_records(
        [r if r.schedule_kind == "default" else dataclasses.replace(r, latency_s=r.latency_s / K) for r in old])
    c1 = calibrate("local:threads=1", data=third, programs=10, exclude_networks=())
    assert c1.programs == 3 and near(c1.speed_ratio, 1 / K)  # the 3 tasks' default kernels
    assert c1.reference_protocol == 1 and "calibrated against protocol-1 labels (default kernels;" in c1.note
    assert c1.reference_kinds == ("default",) and c.reference_kinds == ("default", "random")
    c1r = calibrate("local:threads=1", data=third, programs=10, exclude_networks=(), kinds=("random",))
    assert c1r.programs == 3 and near(c1r.speed_ratio, 1.0)  # asked for: the random schedules, true labels
    assert c1r.reference_kinds == ("random",) and "labels (random schedules;" in c1r.note
    with pytest.raises(PerfcastError, match=r"reference kinds \('tuned',\): choose among \('default', 'random'\)"):
        calibrate("local:threads=1", data=third, kinds=("tuned",))
    assert c1.to_dict()["note"] == c1.note and c.to_dict()["note"] == ""
    first_task = slow[0].workload_key
    Dataset(mixed, create=True).add_records(
        [r for r in slow if r.workload_key == first_task]
        + [dataclasses.replace(r, latency_s=r.latency_s / K) for r in old if r.workload_key != first_task])
    c2 = calibrate("local:threads=1", data=mixed, programs=10, exclude_networks=())
    assert (c2.programs, c2.reference_protocol) == (2, 2) and near(c2.speed_ratio, 1 / K)
    # references are drawn among labels of at most REFERENCE_MAX_S while there are enough of them (no timing here;
    # the other labels are set short: K x a kernel timed over 1 ms on a contended host is itself over the limit)
    long_ids = {slow[0].record_id, slow[3].record_id}
    fifth = str(tmp_path / "e")
    fifth_records = [dataclasses.replace(r, latency_s=1.0 if r.record_id in long_ids else
                                         min(r.latency_s, REFERENCE_MAX_S / 2)) for r in slow]
    Dataset(fifth, create=True).add_records(fifth_records)
    four = reference_records(Dataset(fifth), c.device_key, programs=4)
    assert len(four) == 4 and not set(four["record_id"]) & long_ids and (four["latency_s"] <= REFERENCE_MAX_S).all()
    five = reference_records(Dataset(fifth), c.device_key, programs=5)
    assert len(five) == 5 and five["record_id"].nunique() == 5  # only 4 short ones: drawn among all 6
    # the draw is a function of the records, not of how they are stored (e.g. before and after a compaction)
    shuffled = Dataset(str(tmp_path / "f"), create=True)
    recs = fifth_records[::-1]
    shuffled.add_records(recs[:3])
    shuffled.add_records(recs[3:])
    three = reference_records(Dataset(fifth), c.device_key, programs=3)["record_id"].tolist()
    assert reference_records(shuffled, c.device_key, programs=3)["record_id"].tolist() == three
    with pytest.raises(PerfcastError, match="no record of .* timed by perfcast .* to calibrate against"):
        calibrate("local:threads=1", data=second, exclude_networks=("mlp",))
    with pytest.raises(PerfcastError, match="--programs 0: calibrating needs at least one"):
        calibrate("local:threads=1", data=second, programs=0)
    # draw="time": probability proportional to the label, among labels <= TIME_DRAW_MAX_S (no timing here)
    from perfcast.collect.calibrate import TIME_DRAW_MAX_S

    tenth, over = {slow[1].record_id, slow[4].record_id}, slow[2].record_id
    sixth = str(tmp_path / "g")
    Dataset(sixth, create=True).add_records(
        [dataclasses.replace(r, latency_s=0.1 if r.record_id in tenth else 1.0 if r.record_id == over
                             else 1e-7) for r in slow])
    assert 0.1 <= TIME_DRAW_MAX_S < 1.0
    for seed in range(5):  # a 1e-7 s label is drawn with probability ~1e-6 beside two of 0.1 s; 1 s is over the cap
        got = reference_records(Dataset(sixth), c.device_key, programs=2, seed=seed, draw="time")
        assert set(got["record_id"]) == tenth
    assert over not in set(reference_records(Dataset(sixth), c.device_key, programs=6, draw="time")["record_id"])
    with pytest.raises(PerfcastError, match=r"reference draw 'big': choose among \('short', 'time'\)"):
        reference_records(Dataset(sixth), c.device_key, programs=2, draw="big")


def test_default_schedules_calibrate_against_default_kernels_else_every_kind(tmp_path):
    """`predict --calibrate` of TVM's default kernels takes the ratio of default-kernel references, tuned and random
    schedules that of every kind; a reference dataset without default kernels falls back to every kind. Here the
    default kernels' labels are K = 20x what this machine measures and the random schedules' true."""
    import dataclasses

    import perfcast.collect.calibrate as cal
    from perfcast.collect.collector import CollectConfig, collect
    from perfcast.data.schema import MeasureRecord, from_row
    from perfcast.data.store import Dataset

    K, TOL = 20.0, 2.5
    assert cal.schedule_reference_kinds("default") == ("default",)
    assert cal.schedule_reference_kinds("tuned:db") is None and cal.schedule_reference_kinds("random:0") is None
    first = str(tmp_path / "a")
    collect(CollectConfig(networks=("mlp",), device="local:threads=1", programs_per_task=2, check_load=False,
                          measure=FAST), first, log=lambda m: None, progress=False)
    recs = [from_row(MeasureRecord, r) for r in Dataset(first).read("records").to_pylist()]
    both, randoms = str(tmp_path / "b"), str(tmp_path / "c")
    Dataset(both, create=True).add_records(
        [dataclasses.replace(r, latency_s=K * r.latency_s) if r.schedule_kind == "default" else r for r in recs])
    Dataset(randoms, create=True).add_records([r for r in recs if r.schedule_kind == "random"])
    ratio, note = cal.speed_ratio_or_note("local:threads=1", None, ("default",), data=both)
    assert 1 / K / TOL < ratio < TOL / K and note is None  # the 3 default kernels only
    ratio, note = cal.speed_ratio_or_note("local:threads=1", None, ("default",), data=randoms)
    assert 1 / TOL < ratio < TOL and note is None  # no default kernel there: every kind (the random schedules)


def test_pin_launcher_moves_the_caller_off_a_pinned_thread_core():
    """A thread pinned to one core (as TVM pins its pool threads) pushes the calling thread onto the other cores
    while the pin holds; leaving the block gives the caller its affinity back."""
    import threading

    from perfcast.collect.affinity import LauncherPin, pinned_pool_cores

    allowed = frozenset(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    pool_core = max(allowed)
    ready, done = threading.Event(), threading.Event()

    def pool_thread():
        os.sched_setaffinity(0, {pool_core})  # pid 0 in a thread: this thread only
        ready.set()
        done.wait(10)

    t = threading.Thread(target=pool_thread)
    t.start()
    ready.wait(10)
    try:
        assert pinned_pool_cores(allowed) == {pool_core}
        with LauncherPin() as pin:
            pin.apply()
            assert os.sched_getaffinity(0) == allowed - {pool_core}
            assert pin.pinned == allowed - {pool_core}
        assert os.sched_getaffinity(0) == allowed
    finally:
        done.set()
        t.join()
    # join() returns when Python has finished with the thread, a moment before the OS thread has exited: until it
    # has, /proc/self/task still lists it with its one-core affinity (this made the check below flaky).
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/self/task/{t.native_id}") and time.monotonic() < deadline:
        time.sleep(0.01)
    with LauncherPin() as pin:  # no pinned thread left: nothing to do
        pin.apply()
        assert pin.pinned is None and os.sched_getaffinity(0) == allowed


def _export_unseen_onnx(path):
    """A small CNN that is in no zoo: conv-bn-relu, depthwise conv, pooling, linear."""
    import torch

    class Unseen(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 12, 3, padding=1)
            self.dw = torch.nn.Conv2d(12, 12, 3, padding=1, groups=12)
            self.fc = torch.nn.Linear(12 * 8 * 8, 7)

        def forward(self, x):
            x = torch.relu(self.c1(x))
            x = torch.nn.functional.max_pool2d(torch.relu(self.dw(x)), 2)
            return self.fc(x.flatten(1))

    torch.manual_seed(0)
    torch.onnx.export(Unseen().eval(), (torch.randn(1, 3, 16, 16),), str(path), input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}}, dynamo=False)


def _count(out):
    from perfcast.data.store import Dataset

    if not os.path.exists(os.path.join(out, "perfcast_dataset.json")):
        return 0
    return len(Dataset(out).record_ids())


@pytest.mark.slow
def test_sigkill_in_the_middle_then_rerun_measures_every_program_once(tmp_path):
    from perfcast.data.store import Dataset

    onnx_path = tmp_path / "unseen.onnx"
    _export_unseen_onnx(onnx_path)
    out = str(tmp_path / "d")
    cmd = [sys.executable, "-m", "perfcast.cli.app", "collect", "--network", str(onnx_path), "--device",
           "local:threads=1", "--programs-per-task", "6", "--out", out, "--no-load-check", "--json"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while _count(out) < 5 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGKILL)  # the collector and its worker
    proc.wait()
    killed_at = _count(out)
    assert killed_at >= 5
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    res = json.loads(done.stdout.strip().splitlines()[-1])
    assert res["recovered"] >= 0
    ds = Dataset(out)
    recs = ds.read("records", ["record_id", "workload_key", "program_hash", "status"]).to_pylist()
    keys = [(r["workload_key"], r["program_hash"]) for r in recs]
    assert len(keys) == len(set(keys))  # every program once
    tasks = {r["workload_key"] for r in ds.read("tasks").to_pylist()}
    per_task = {k: sum(r["workload_key"] == k for r in recs) for k in tasks}
    assert all(1 <= n <= 6 for n in per_task.values())
    assert sum(n == 6 for n in per_task.values()) >= len(tasks) - 2  # tiny elementwise spaces may run dry
    assert len(recs) == killed_at + res["measured"] - 0 or len(recs) >= killed_at
    assert not list((tmp_path / "d" / "journal").glob("*.jsonl"))


def test_bad_inputs_one_line_errors(tmp_path):
    from perfcast.collect.tasks import to_relax
    from perfcast.errors import PerfcastError, UnknownNameError

    with pytest.raises(UnknownNameError, match="unknown network 'resnet9000'.*resnet50"):
        to_relax("resnet9000")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"definitely not protobuf")
    with pytest.raises(PerfcastError, match="cannot read ONNX file .*junk.onnx"):
        to_relax(str(junk))
    with pytest.raises(PerfcastError, match="batch size 0 makes no sense"):
        to_relax("mlp", batch_size=0)
    with pytest.raises(PerfcastError, match="not found"):
        to_relax(str(tmp_path / "missing.onnx"))


def test_load_monitor_sees_another_process():
    from perfcast.collect.load import LoadMonitor

    mon = LoadMonitor(max_foreign_cores=0.3)
    # our own children count as ours (the worker): a busy child is not "load"
    mon.mark()
    subprocess.run([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.0: pass"])
    assert mon.foreign_cores() < 0.3
    # a process that is not ours (double fork: re-parented away from us) is
    mon.mark()
    subprocess.run(["sh", "-c", f"{sys.executable} -c 'import time\nt=time.time()\nwhile time.time()-t<1.5: pass' &"])
    time.sleep(1.6)
    assert mon.foreign_cores() > 0.5
    assert mon.was_loaded()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2, reason="needs 2 CPUs")
def test_pinned_collector_watches_its_own_cpus_and_refuses_too_many_threads(tmp_path):
    """`taskset -c 1 perfcast collect --device local:threads=1` measures on CPU 1 while CPU 0 stays usable: the
    load check counts only the CPUs the collector may run on, and a device with more threads than those is refused."""
    from perfcast.collect.collector import CollectConfig, collect
    from perfcast.collect.load import LoadMonitor
    from perfcast.errors import PerfcastError

    old = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {0})
        assert LoadMonitor().cpus == frozenset({0})
        with pytest.raises(PerfcastError, match=r"device local:threads=2 runs 2 threads but this process may use "
                                                r"only CPUs \[0\]; .* local:threads=1"):
            collect(CollectConfig(networks=("mlp",), device="local:threads=2"), str(tmp_path / "d"))
        assert not (tmp_path / "d").exists()  # refused before anything was written
    finally:
        os.sched_setaffinity(0, old)
    assert LoadMonitor().cpus == (None if len(old) >= os.cpu_count() else frozenset(old))


def _relu_onnx(path, dims):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def test_onnx_with_a_dynamic_non_batch_dimension_asks_for_input_shape(tmp_path):
    """A symbolic leading dimension is the batch; any other needs --input-shape, and the error says how."""
    from perfcast.collect.tasks import to_relax

    path = tmp_path / "dyn.onnx"
    _relu_onnx(path, ["batch", "seq", 8])
    with pytest.raises(PerfcastError, match=re.escape("ONNX input 'x' of dyn.onnx has a dynamic dimension 1 (seq); "
                                                      "give it with --input-shape 'x:NxNxN'")):
        to_relax(str(path), 1)
    _, _, mod = to_relax(str(path), 2, input_shape="x:2x5x8")
    assert 'x: R.Tensor((2, 5, 8), dtype="float32")' in mod["main"].script()
    with pytest.raises(PerfcastError, match=re.escape("bad --input-shape 'x:2xfivex8'; write NAME:1x3x224x224")):
        to_relax(str(path), 2, input_shape="x:2xfivex8")
