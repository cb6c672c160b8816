"""In-network context: a kernel inside a network runs slower than the same kernel timed alone.

The collector (and every cost model trained on its records) times a program alone: repeat after repeat, its
weights and inputs stay warm in the caches and TVM's thread pool stays awake. Inside a network, the kernels before
it have evicted its weights and part of its inputs, and each call pays the VM's dispatch. Measured on the
rocketlake host (2026-11-27, `bench/context.py`): the kernels of meta-schedule-tuned resnet50, mobilenet_v2 and
bert_tiny run 1.19x, 1.37x and 1.26x slower in the network than alone (time-weighted), TVM's default kernels only
a few per cent, and a 1-2 us kernel takes 4-9 us. A whole-network prediction from isolated kernel predictions is
short by that much, most of all for tuned (fast, memory-bound) networks.

`ContextFit` is the correction per device: a kernel whose isolated time is t and whose arguments (inputs, weights,
outputs) take B bytes runs `scale * t + s_per_byte * min(B, cap_bytes)` inside the network, followed by
`overhead_s` of dispatch (the replayer's per-op gap, CDMPP Algorithm 2): the bytes a kernel found in the caches
when timed alone have to come from memory again, up to about a cache's worth (beyond it, the kernel streamed them
from memory alone too). `fit_context` fits the three non-negative coefficients with `scipy.optimize.nnls` to
kernels measured both ways (`measure_context`), minimising the relative error of each kernel weighted by its share
of its network's time (so every network counts the same and big kernels count most), and picks `cap_bytes` from
`CAPS_BYTES` by leave-one-network-out error over the networks it is given.
Fits live in one JSON file keyed by device key (`perfcast.paths.bundled_context_file()` ships this machine's);
`perfcast predict` applies the device's fit when there is one.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ..errors import PerfcastError

CONTEXT_VERSION = 1
CAPS_BYTES = (256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, math.inf)


@dataclass(frozen=True)
class ContextSample:
    """One distinct kernel of one network, timed alone and inside the network at the same sitting."""

    network: str
    schedules: str
    kernel: str
    workload_key: str
    calls: int
    isolated_s: float  # the collector's timer (protocol 2), the program alone
    in_network_s: float  # per call inside the network (see `measure_context`)
    io_bytes: int  # bytes of the kernel's buffer arguments


@dataclass(frozen=True)
class ContextFit:
    """in-network time of a kernel = scale * isolated_s + s_per_byte * min(io_bytes, cap_bytes), then overhead_s of
    dispatch."""

    device_key: str
    scale: float
    s_per_byte: float
    cap_bytes: float  # math.inf: no cap
    overhead_s: float
    kernels: int  # samples it was fitted on
    networks: tuple  # `run_name` of the samples: "network/schedule kind"
    fit_error: float  # mean |relative error| of the fitted networks' totals under this fit
    fitted_at: str

    def to_json(self) -> dict:
        """A JSON-safe dict (JSON has no infinity: no cap is null)."""
        return {**asdict(self), "networks": list(self.networks),
                "cap_bytes": None if math.isinf(self.cap_bytes) else self.cap_bytes}

    @classmethod
    def from_json(cls, d: dict) -> "ContextFit":
        return cls(**{**d, "networks": tuple(d["networks"]),
                      "cap_bytes": math.inf if d["cap_bytes"] is None else d["cap_bytes"]})

    def describe(self) -> str:
        """The fitted formula in one line."""
        cap = "" if math.isinf(self.cap_bytes) else f" up to {self.cap_bytes / 2**20:.3g} MiB"
        return (f"{self.scale:.3f} x alone + {self.s_per_byte * 1e12:.3g} ps per argument byte{cap} + "
                f"{self.overhead_s * 1e6:.2f} us per call")

    def duration_s(self, isolated_s, io_bytes):
        """The kernel's time inside a network, before the dispatch gap (arrays or floats)."""
        return (self.scale * np.asarray(isolated_s, float)
                + self.s_per_byte * np.minimum(np.asarray(io_bytes, float), self.cap_bytes))

    def in_network_s(self, isolated_s, io_bytes):
        return self.duration_s(isolated_s, io_bytes) + self.overhead_s


def io_bytes(func) -> int:
    """Bytes of a PrimFunc's buffer arguments (what a call reads and writes at least once)."""
    from .._tvm.util import arg_shapes
    from .memory import dtype_bytes

    return sum(int(np.prod(shape, dtype=np.int64)) * dtype_bytes(dtype) for shape, dtype in arg_shapes(func))


def run_name(s: ContextSample) -> str:
    """"network/schedule kind" of a sample, e.g. "resnet18/tuned"."""
    return f"{s.network}/{s.schedules.partition(':')[0]}"


def _weights(samples: list[ContextSample]) -> np.ndarray:
    """Each kernel's share of its network's in-network time (calls included): every network sums to 1."""
    share = np.array([s.calls * s.in_network_s for s in samples], float)
    nets = [run_name(s) for s in samples]
    total: dict = {}
    for n, v in zip(nets, share):
        total[n] = total.get(n, 0.0) + v
    return np.array([v / total[n] for n, v in zip(nets, share)])


def _nnls(samples: list[ContextSample], cap: float) -> tuple[float, float, float]:
    """(scale, s_per_byte, overhead_s) minimising the share-weighted squared relative error, all >= 0."""
    from scipy.optimize import nnls

    y = np.array([s.in_network_s for s in samples], float)
    t = np.array([s.isolated_s for s in samples], float)
    b = np.minimum(np.array([s.io_bytes for s in samples], float), cap)
    sw = np.sqrt(_weights(samples))
    units = np.array([1.0, 1e-9, 1e-6])  # coefficients in s/s, s per GB and us: comparable magnitudes for nnls
    a = np.c_[t, b * units[1], np.full_like(t, units[2])] / y[:, None] * sw[:, None]
    coef, _ = nnls(a, sw)
    return tuple(float(x) for x in coef * units)


def network_errors(fit: "ContextFit", samples: list[ContextSample]) -> dict:
    """run name -> relative error of the fit on that network's total in-network time."""
    out: dict = {}
    for s in samples:
        p, m = out.get(run_name(s), (0.0, 0.0))
        out[run_name(s)] = (p + s.calls * float(fit.in_network_s(s.isolated_s, s.io_bytes)),
                            m + s.calls * s.in_network_s)
    return {k: p / m - 1 for k, (p, m) in out.items()}


def fit_context(samples: list[ContextSample], device_key: str, caps=CAPS_BYTES) -> ContextFit:
    """Non-negative least squares on relative errors, `cap_bytes` by leave-one-network-out (see the module
    docstring); `fit_error` is the mean |error| of the networks' totals under the final fit."""
    if len(samples) < 3:
        raise PerfcastError(f"{len(samples)} kernel samples cannot fit the 3 context coefficients; measure more "
                            "networks (`perfcast context NETWORK ... --out FILE`)")
    y = np.array([s.in_network_s for s in samples], float)
    if not (np.isfinite(y).all() and (y > 0).all()):
        raise PerfcastError("a kernel sample has no positive in-network time; measure it again")
    runs = sorted({run_name(s) for s in samples})

    def make(cap, part):
        scale, s_per_byte, overhead = _nnls(part, cap)
        return ContextFit(device_key, scale, s_per_byte, float(cap), overhead, len(part),
                          tuple(sorted({run_name(s) for s in part})), 0.0,
                          time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def cv_error(cap):  # mean |total error| of each network under a fit of the others
        errs = []
        for r in runs:
            rest = [s for s in samples if run_name(s) != r]
            if len(rest) < 3:
                return math.inf
            errs.append(abs(network_errors(make(cap, rest), [s for s in samples if run_name(s) == r])[r]))
        return float(np.mean(errs))

    cap = math.inf if len(runs) < 2 else min(caps, key=lambda c: (cv_error(c), -c))
    fit = make(cap, samples)
    return replace(fit, fit_error=float(np.mean([abs(e) for e in network_errors(fit, samples).values()])))


def measure_context(network: str, schedules: str = "default", device: str = "local", batch_size: int = 1,
                    input_shape: str | None = None, repeats: int = 5) -> list[ContextSample]:
    """Time every distinct kernel of `network` alone (the collector's isolated runner) and inside the compiled
    network (`measure_network`'s per-kernel profile), at the same sitting. Measures: keep the machine quiet.

    The per-kernel profile times each call between the VM's instrument hooks, about a microsecond more than the call
    (4-8 % of a 1 ms network of 70 calls); the in-network times are therefore scaled so that the network's kernels
    add up to the network's own measured time (the time evaluator's, without hooks; `measure_network`)."""
    import tvm

    from ..collect.calibrate import time_modules
    from ..collect.collector import build_workers
    from ..collect.load import own_cpus
    from ..collect.measure import MeasureConfig
    from ..collect.worker import IsolatedRunner
    from ..devices import get_device, require_local
    from .predict import lower_network, measure_network

    spec = get_device(device)
    require_local(spec, "measuring the in-network context")
    low = lower_network(network, batch_size, spec, schedules, input_shape)
    order = list(low.programs)
    with IsolatedRunner(spec.threads, MeasureConfig(), workers=build_workers(own_cpus())) as run:
        iso = time_modules(run, [tvm.ir.save_json(low.programs[k]) for k in order], spec.target_json)
    net = measure_network(network, batch_size, spec, input_shape, repeats, fused=low.applied)
    per_name = net["measured_kernels_s"]
    inside = {}
    for k in order:
        got = [per_name[n] for n in low.names_of[k] if n in per_name]
        if got:  # else not run by the VM (folded away)
            inside[k] = float(np.median(got))
    hooked = sum(low.calls[k] * t for k, t in inside.items())
    if not hooked:
        raise PerfcastError(f"no kernel of {network!r} was timed inside the network")
    norm = net["measured_s"] / hooked
    out = [ContextSample(low.label, schedules, low.names[k], k, low.calls[k], float(iso[j]), inside[k] * norm,
                         io_bytes(low.programs[k]["main"]))
           for j, k in enumerate(order) if k in inside and np.isfinite(iso[j])]  # (nan: failed alone)
    if not out:
        raise PerfcastError(f"no kernel of {network!r} was timed both alone and in the network")
    return out


def load_context(path: str | Path | None = None) -> dict[str, ContextFit]:
    """Device key -> fit, from `path` (default: the bundled file); {} when the file does not exist."""
    from .. import paths

    p = Path(path) if path is not None else paths.bundled_context_file()
    if not p.exists():
        return {}
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise PerfcastError(f"{str(p)!r} is not a context file ({e}); write one with `perfcast context NETWORK ... "
                            "--out FILE`") from None
    version = d.get("version") if isinstance(d, dict) else None
    if version != CONTEXT_VERSION:
        raise PerfcastError(f"{str(p)!r} has context version {version!r}, this perfcast reads "
                            f"{CONTEXT_VERSION}; fit it again with `perfcast context NETWORK ... --out FILE`")
    try:
        return {k: ContextFit.from_json(v) for k, v in d["fits"].items()}
    except (KeyError, TypeError, AttributeError) as e:
        raise PerfcastError(f"{str(p)!r} is not a context file (bad fit: {e!r}); fit it again with `perfcast "
                            "context NETWORK ... --out FILE`") from None


def save_context(fit: ContextFit, path: str | Path) -> Path:
    """Add (or replace) `fit` under its device key in the file at `path`, keeping the other devices' fits."""
    p = Path(path)
    fits = load_context(p) if p.exists() else {}
    fits[fit.device_key] = fit
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps({"version": CONTEXT_VERSION,
                               "fits": {k: v.to_json() for k, v in sorted(fits.items())}}, indent=1))
    tmp.replace(p)
    return p


def samples_to_json(samples: list[ContextSample]) -> list[dict]:
    return [asdict(s) for s in samples]


def samples_from_json(rows: list[dict]) -> list[ContextSample]:
    return [ContextSample(**r) for r in rows]
