"""Devices: the local probe against independent readings, variants, known specs, errors, RPC on loopback."""

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

import pytest

from perfcast.devices import DeviceSpec, get_device, list_device_specs, require_local
from perfcast.errors import PerfcastError, UnknownNameError


def test_local_matches_independent_readings():
    import tvm

    s = get_device("local")
    model = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M).group(1).strip()
    assert s.name == model
    assert s.threads == os.cpu_count()
    assert s.mcpu == tvm.target.codegen.llvm_get_system_cpu()
    assert json.loads(s.target_json) == {"kind": "llvm", "mcpu": s.mcpu, "num-cores": os.cpu_count()}


def test_variants_are_different_targets():
    x = get_device("local:mcpu=x86-64,threads=1")
    assert x.isa == ("sse2",) and x.vector_bits == 128 and x.threads == 1
    assert json.loads(x.target_json) == {"kind": "llvm", "mcpu": "x86-64", "num-cores": 1}
    h = get_device("local:mcpu=haswell,threads=2")
    assert "avx2" in h.isa and "avx512f" not in h.isa and h.vector_bits == 256
    # 2 threads x clock x (2 FMA pipes x 8 lanes x 2 flops)
    assert h.peak_fp32_gflops == pytest.approx(2 * h.clock_mhz * 32 / 1000)


def test_device_vector_drops_the_probe_drift():
    """Two readings of one CPU's clock (the bundled znver3 records: 2,445.404 and 2,445.424 MHz) give one feature
    vector: clock to 10 MHz, peaks to 3 significant figures, by hand; a vector saved before the rounding
    canonicalizes to it, and `same_device` matches them while another CPU's clock stays apart."""
    import dataclasses
    import math

    import numpy as np

    from perfcast.devices.base import canonical_vector
    from perfcast.models.base import same_device

    h = get_device("local:mcpu=haswell,threads=2")
    a = dataclasses.replace(h, clock_mhz=2445.404, peak_fp32_gflops=156.505856, peak_fp16_gflops=156.505856)
    b = dataclasses.replace(h, clock_mhz=2445.424, peak_fp32_gflops=156.507136, peak_fp16_gflops=156.507136)
    va, vb = a.feature_vector(), b.feature_vector()
    assert va == vb
    assert va[0] == math.log2(2450.0) and va[5] == va[6] == math.log2(157.0)
    assert va[1:5] == [math.log2(h.memory_gb), 0.0, float(h.cores), 2.0] and va[10] == 256.0
    raw = [math.log2(2445.404)] + va[1:5] + [math.log2(156.505856)] * 2 + va[7:]  # a version-1 vector
    np.testing.assert_allclose(canonical_vector(raw), va, rtol=0, atol=1e-12)
    rows = np.float32([raw, va, [math.log2(2596.12)] + va[1:]])
    assert canonical_vector(rows).dtype == np.float32
    assert same_device(rows, va).tolist() == [True, True, False]
    assert canonical_vector([0.0] * 11) == [0.0] * 11  # unknown figures stay unknown


@pytest.mark.parametrize("device,match", [
    ("nope", "unknown device 'nope'"),
    ("local:color=red", "unknown option 'color'"),
    ("local:mcpu=pentium9000", "LLVM does not know mcpu 'pentium9000'"),
    ("local:threads=64", "threads=64 is out of range"),
    ("local:threads=two", "threads='two' is not a number"),
    ("local:threads", "bad device option 'threads'"),
    ("rpc:key=k", "device rpc needs tracker"),
    ("t4:tracker=nohost", "is not HOST:PORT"),
])
def test_device_errors(device, match):
    with pytest.raises(PerfcastError, match=match):
        get_device(device)


def test_unknown_device_lists_the_known_ones():
    with pytest.raises(UnknownNameError, match="known: .*local.*t4"):
        get_device("nope")


def test_known_devices_carry_the_public_figures():
    v100 = get_device("v100")
    assert v100.peak_fp32_gflops == 15670 and v100.clock_mhz == 1530 and v100.bandwidth_gbps == 900
    assert get_device("t4").peak_fp16_gflops == 65130
    assert get_device("a100").kind == "gpu"
    t = get_device("t4:key=mine,tracker=10.0.0.1:9190")
    assert t.rpc_key == "mine" and t.rpc_tracker == "10.0.0.1:9190"


def test_measuring_a_remote_device_here_is_one_line_naming_the_fix():
    for dev in ("local", "local:mcpu=haswell,threads=1"):
        require_local(get_device(dev), "tuning")  # no error
    with pytest.raises(PerfcastError, match=r"^tuning runs on this machine; 't4' is remote\. Use --device local$"):
        require_local(get_device("t4"), "tuning")
    with pytest.raises(PerfcastError, match=r"'rpc:key=k,tracker=127\.0\.0\.1:9190' is remote\. Drop --measure"):
        require_local(get_device("rpc:key=k,tracker=127.0.0.1:9190"), "--measure", "drop --measure or use local")
    # the commands that measure say it before any work
    from perfcast.collect.calibrate import calibrate
    from perfcast.e2e.schedules import tune_network

    with pytest.raises(PerfcastError, match="^calibrate runs on this machine; 'v100' is remote"):
        calibrate(device="v100")
    with pytest.raises(PerfcastError, match="^tuning runs on this machine; 'v100' is remote"):
        tune_network("mlp", "/nonexistent/db", 4, device="v100")


def test_spec_json_round_trip():
    for dev in ("local", "local:mcpu=haswell,threads=1", "v100", "rpc:key=k,tracker=127.0.0.1:9190"):
        s = get_device(dev)
        back = DeviceSpec.from_json(s.to_json())
        assert back.to_json() == s.to_json() and back.isa == s.isa and back.device_id == s.device_id


def test_registry_listing_and_cli():
    from typer.testing import CliRunner

    from perfcast.cli.app import app

    ids = [s.device_id for s in list_device_specs()]
    assert ids[0] == "local" and "local:mcpu=x86-64,threads=1" in ids and "t4" in ids
    res = CliRunner().invoke(app, ["devices", "--json"])
    assert res.exit_code == 0
    listed = json.loads(res.output)
    assert [d["device_id"] for d in listed] == ids
    assert {"clock_mhz", "peak_fp32_gflops", "l2_kb", "bandwidth_gbps"} <= set(listed[0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def rpc_tracker():
    tport, sport = _free_port(), _free_port()
    env = dict(os.environ, TVM_NUM_THREADS="1")
    # own process groups: the tracker runs in a popen worker and the server forks a process per session
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
    procs = [subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
                               "--port", str(tport), "--port-end", str(tport + 1)], **quiet)]
    deadline = time.time() + 60
    while time.time() < deadline:  # the tracker imports TVM first: wait until it listens
        try:
            socket.create_connection(("127.0.0.1", tport), timeout=1).close()
            break
        except OSError:
            time.sleep(0.3)
    procs.append(subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                   "--port", str(sport), "--port-end", str(sport + 1),
                                   "--tracker", f"127.0.0.1:{tport}", "--key", "perfcast-test"], env=env, **quiet))
    yield tport
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


@pytest.mark.slow
def test_rpc_loopback_measures_like_local(rpc_tracker, matmul64):
    import tvm

    from perfcast.collect.measure import MeasureConfig
    from perfcast.collect.rpc import RPCRunner
    from perfcast.collect.worker import IsolatedRunner

    cfg = MeasureConfig(repeats=3, min_repeat_s=0.002)
    spec = get_device(f"rpc:key=perfcast-test,tracker=127.0.0.1:{rpc_tracker},threads=1")
    assert spec.rpc_key == "perfcast-test" and spec.threads == 1
    mod_json = tvm.ir.save_json(matmul64)
    with RPCRunner(spec, cfg) as r:
        remote = r.run(mod_json, spec.target_json)
    assert remote["status"] == "ok", remote
    assert 1e-7 < remote["latency_s"] < 1e-2
    assert remote["latency_s"] == statistics.median(remote["latencies_s"])
    with IsolatedRunner(1, cfg) as r:
        here = r.run(mod_json, spec.target_json)
    assert 0.2 < remote["latency_s"] / here["latency_s"] < 5


def test_unreachable_tracker_is_one_clear_error(matmul64):
    import tvm

    from perfcast.collect.rpc import RPCRunner

    spec = get_device(f"rpc:key=nobody,tracker=127.0.0.1:{_free_port()}")
    with pytest.raises(PerfcastError, match="tracker"):
        with RPCRunner(spec) as r:
            r.run(tvm.ir.save_json(matmul64), spec.target_json)
