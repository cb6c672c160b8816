"""The CLI: help texts with examples, one-line errors, the collect command end to end on a user network."""

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from perfcast.cli.app import app

runner = CliRunner()


def _cli(*args, env=None):
    """Run the real console entry point (the top-level error handler included)."""
    return subprocess.run([sys.executable, "-m", "perfcast.cli.app", *args], capture_output=True, text=True,
                          timeout=600, env=env)


def _commands():
    """Every command of the app, sub-commands of groups (data, layerwise) included."""
    out = [[c.name] for c in app.registered_commands]
    for g in app.registered_groups:
        out += [[g.name, c.name] for c in g.typer_instance.registered_commands]
    return out


def test_the_command_list_is_complete():
    names = {" ".join(c) for c in _commands()}
    assert {"collect", "predict", "adapt", "data merge", "layerwise train", "layerwise eval"} <= names
    assert len(names) >= 15


@pytest.mark.parametrize("cmd", _commands(), ids=" ".join)
def test_every_command_has_help_with_an_example(cmd):
    res = runner.invoke(app, [*cmd, "--help"])
    assert res.exit_code == 0
    assert "Example: perfcast " + " ".join(cmd) in " ".join(res.output.split())


def test_unknown_network_is_one_line(tmp_path):
    res = _cli("collect", "--network", "resnet9000", "--out", str(tmp_path / "d"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: unknown network 'resnet9000'") and "resnet50" in lines[0]


def test_unknown_device_is_one_line(tmp_path):
    res = _cli("collect", "--network", "mlp", "--device", "tpu9", "--out", str(tmp_path / "d"))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert "unknown device 'tpu9'" in res.stderr and "local" in res.stderr


def test_calibrate_without_references_is_one_line(tmp_path):
    """A dataset with no record of this machine: the error names the dataset and the command that measures some."""
    from perfcast.data.store import Dataset

    Dataset(tmp_path / "empty", create=True)
    res = _cli("calibrate", "--data", str(tmp_path / "empty"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "to calibrate against; measure some first: perfcast collect mlp" in res.stderr


def test_predict_calibrate_on_a_device_without_records_warns_and_predicts():
    """No record of this code-generation target on this CPU: nothing to calibrate against, so the prediction is the
    uncalibrated one and the JSON says why."""
    res = _cli("predict", "mlp", "--device", "local:mcpu=sandybridge,threads=1", "--calibrate", "--json")
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout)
    assert "speed_ratio" not in r and r["predicted_s"] > 0
    assert "not calibrated: no record of 'local:mcpu=sandybridge,threads=1@" in r["warning"]
    assert ("adapt the model to it, which measures it (`perfcast adapt --device local:mcpu=sandybridge,threads=1 "
            "--out DIR`), and predict with --model DIR --calibrate") in r["warning"]


def test_unreadable_onnx_is_one_line(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_text("not an onnx model")
    res = _cli("collect", "--network", str(bad), "--out", str(tmp_path / "d"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "cannot read ONNX file" in res.stderr and "broken.onnx" in res.stderr


def test_debug_env_shows_traceback(tmp_path):
    import os

    res = _cli("collect", "--network", "resnet9000", "--out", str(tmp_path / "d"),
               env={**os.environ, "PERFCAST_DEBUG": "1"})
    assert res.returncode != 0 and "Traceback" in res.stderr


def test_collect_a_python_factory_network(tmp_path):
    f = tmp_path / "mynet.py"
    f.write_text(
        "import torch\n"
        "def build(batch_size):\n"
        "    torch.manual_seed(0)\n"
        "    m = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).eval()\n"
        "    return m, (torch.randn(batch_size, 32),)\n"
    )
    out = tmp_path / "d"
    res = _cli("collect", "--network", f"{f}:build", "--device", "local:threads=1", "--programs-per-task", "2",
               "--out", str(out), "--batch-size", "2", "--no-load-check", "--json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["tasks"] >= 2
    assert summary["measured"] == 2 * summary["tasks"]  # the default kernel + one random program each
    g = summary["host_gate"]  # every program's three rounds passed the host gate, some perhaps after re-timing
    assert g["gate"] == 1.5 and g["rounds"] - g["retimed"] == 3 * summary["measured"]
    assert g["sentinel_baseline_us"]["cpu"] > 0 and g["sentinel_baseline_us"]["cache"] > 0
    assert [json.loads(p.read_text())["host_gate"] for p in (out / "collection").glob("*.json")] == [g]
    from perfcast.data.store import Dataset

    recs = Dataset(out).read("records", ["round_latencies_s", "round_sentinel_cpu_s", "round_sentinel_cache_s"])
    for r in recs.to_pylist():  # each kept round's sentinel readings: the CPU part ~80 us, the cache part ~2 us
        assert len(r["round_sentinel_cpu_s"]) == len(r["round_sentinel_cache_s"]) == len(r["round_latencies_s"]) == 3
        assert all(1e-5 < x < 1e-2 for x in r["round_sentinel_cpu_s"])
        assert all(1e-7 < x < 1e-3 for x in r["round_sentinel_cache_s"])
    nets = Dataset(out).read("networks").to_pylist()
    assert {r["network"] for r in nets} == {"mynet:build"} and {r["batch_size"] for r in nets} == {2}
    assert all(r["source"].endswith("mynet.py:build") for r in nets)


def test_bad_factory_spec(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("x = 1\n")
    res = _cli("collect", "--network", f"{f}:nothere", "--out", str(tmp_path / "d"))
    assert res.returncode == 2 and "has no function 'nothere'" in res.stderr


def test_run_with_one_line_errors(capsys, monkeypatch):
    """The handler the CLI and the bench scripts share: the value passes through; a PerfcastError becomes one
    stderr line and exit status 2, or its traceback with PERFCAST_DEBUG=1; other errors are not swallowed."""
    import pytest

    from perfcast.errors import PerfcastError, run_with_one_line_errors

    def fail(msg):
        raise PerfcastError(msg)

    monkeypatch.delenv("PERFCAST_DEBUG", raising=False)
    assert run_with_one_line_errors(lambda a, b=0: a + b, 2, b=3) == 5
    with pytest.raises(SystemExit) as e:
        run_with_one_line_errors(fail, "device 'x' has no records; pick one of a, b")
    assert e.value.code == 2
    assert capsys.readouterr().err == "error: device 'x' has no records; pick one of a, b\n"
    monkeypatch.setenv("PERFCAST_DEBUG", "1")
    with pytest.raises(PerfcastError, match="^boom$"):
        run_with_one_line_errors(fail, "boom")
    with pytest.raises(KeyError):
        run_with_one_line_errors(lambda: {}["k"])


def test_a_user_warning_is_one_line_too(tmp_path):
    """Under the same handler a UserWarning prints as `warning: ...` alone (not the library's file, line and source
    line), other categories as Python prints them, and everything as Python does with PERFCAST_DEBUG=1."""
    script = tmp_path / "w.py"
    script.write_text("import warnings\n"
                      "from perfcast.errors import run_with_one_line_errors\n"
                      "def go():\n"
                      "    warnings.warn('asm features: building a program exceeded 60 s')\n"
                      "    warnings.warn('old spelling', FutureWarning)\n"
                      "run_with_one_line_errors(go)\n"
                      "warnings.warn('after the handler')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PERFCAST_DEBUG", "PYTHONWARNINGS")}
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    lines = res.stderr.splitlines()
    assert res.returncode == 0 and lines[0] == "warning: asm features: building a program exceeded 60 s"
    assert "FutureWarning: old spelling" in lines[1] and "w.py:5" in lines[1]  # Python's format, its source below
    assert "UserWarning: after the handler" in lines[-2]  # the handler gave Python's format back
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env={**env, "PERFCAST_DEBUG": "1"})
    assert "w.py:4: UserWarning: asm features: building a program exceeded 60 s" in res.stderr
    assert "warning: " not in res.stderr
