"""Devices: a specification record (CDMPP Table 2 fields) and a registry of device providers.

A device id is `NAME` or `NAME:key=value,...` (e.g. `local:mcpu=haswell,threads=1`). Each registered provider
turns its options into a `DeviceSpec`; an unknown name raises a ValueError listing the known ones.
"""

from __future__ import annotations

import dataclasses
import json
import re
import math
from dataclasses import dataclass
from typing import Callable

from ..errors import PerfcastError, UnknownNameError


@dataclass(frozen=True)
class DeviceSpec:
    """What perfcast knows about a device. NaN marks a figure that is not known."""

    device_id: str
    kind: str  # "cpu" | "gpu" | "accelerator"
    name: str  # marketing / model name
    target_json: str  # TVM target in dict form, as JSON (what code is generated for)
    mcpu: str  # LLVM CPU name for CPU targets, "" otherwise
    cores: int  # physical cores (CPU) or SMs / compute units
    threads: int  # worker threads the runtime uses (TVM_NUM_THREADS)
    clock_mhz: float
    memory_gb: float
    bandwidth_gbps: float  # memory bandwidth, GB/s
    peak_fp32_gflops: float
    peak_fp16_gflops: float
    l1_kb: float  # per core
    l2_kb: float  # per core (CPU) / whole chip (GPU)
    l3_kb: float  # shared last-level cache (CPU) / shared memory per SM (GPU)
    vector_bits: int  # widest SIMD register the target generates code for (0 = n/a)
    isa: tuple[str, ...]  # ISA extensions the generated code may use
    rpc_key: str = ""  # set for devices reached through a TVM RPC tracker
    source: str = ""  # where the figures come from
    rpc_tracker: str = ""  # HOST:PORT of the RPC tracker ("": $TVM_TRACKER_HOST:$TVM_TRACKER_PORT or 127.0.0.1:9190)

    def target(self):
        import tvm

        return tvm.target.Target(json.loads(self.target_json))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, allow_nan=True)

    @staticmethod
    def from_json(text: str) -> "DeviceSpec":
        d = json.loads(text)
        d["isa"] = tuple(d.get("isa", ()))
        return DeviceSpec(**d)

    def feature_vector(self) -> list[float]:
        """Numeric device features (CDMPP §4.3), log-scaled where the range spans decades; the clock and the peaks
        derived from it rounded (`canonical_vector`)."""
        def lg(x: float) -> float:
            return math.log2(x) if x and x > 0 and not math.isnan(x) else 0.0

        return canonical_vector([lg(self.clock_mhz), lg(self.memory_gb), lg(self.bandwidth_gbps), float(self.cores),
                                 float(self.threads), lg(self.peak_fp32_gflops), lg(self.peak_fp16_gflops),
                                 lg(self.l1_kb), lg(self.l2_kb), lg(self.l3_kb), float(self.vector_bits)])


# /proc/cpuinfo's clock of one CPU drifts by hundredths of a MHz from day to day (2,445.404 and 2,445.424 MHz), and a
# tree model would split between two such readings: device features round it to this step
CLOCK_STEP_MHZ = 10.0
_CLOCK, _PEAKS = 0, (5, 6)  # positions in `DeviceSpec.feature_vector()` of log2 clock and log2 peak fp32 / fp16


def canonical_vector(vector):
    """A device feature vector (log2 entries as `DeviceSpec.feature_vector()` makes them) with its clock rounded to
    `CLOCK_STEP_MHZ` and its peak FLOPS to 3 significant figures, so that one device read on two days (or a vector
    saved before the rounding) gives one vector. A list gives a list, an array (one vector or rows of them) an
    array of the same dtype."""
    import numpy as np

    v = np.array(vector, dtype=np.float64)
    rows = v.reshape(-1, v.shape[-1])
    for col in (_CLOCK, *_PEAKS):
        known = rows[:, col] != 0  # 0: the figure is not known
        x = np.exp2(rows[known, col])
        if col == _CLOCK:
            x = np.round(x / CLOCK_STEP_MHZ) * CLOCK_STEP_MHZ
        else:  # 3 significant figures: dividing by a power of ten gives the double nearest e.g. 39.1
            d = 2 - np.floor(np.log10(x))
            p = 10.0 ** np.abs(d)
            x = np.where(d >= 0, np.round(x * p) / p, np.round(x / p) * p)
        rows[known, col] = np.log2(x)
    if isinstance(vector, list):
        return rows.reshape(-1).tolist()
    return rows.reshape(v.shape).astype(np.asarray(vector).dtype)


Provider = Callable[[dict[str, str]], DeviceSpec]
_PROVIDERS: dict[str, tuple[Provider, str]] = {}


def register(name: str, provider: Provider, help: str) -> None:
    _PROVIDERS[name] = (provider, help)


def list_devices() -> list[str]:
    return sorted(_PROVIDERS)


def device_help(name: str) -> str:
    return _PROVIDERS[name][1]


def parse_device_id(device_id: str) -> tuple[str, dict[str, str]]:
    name, _, rest = device_id.strip().partition(":")
    opts: dict[str, str] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise PerfcastError(f"bad device option {item!r} in {device_id!r}; write NAME:key=value,key=value "
                                "(e.g. local:mcpu=haswell,threads=1)")
        opts[key.strip()] = value.strip()
    return name, opts


def device_key(spec: DeviceSpec) -> str:
    """The measured device: its id, plus the CPU when the device is this machine (`local...`).

    `local` is a different CPU on every machine that runs perfcast, so records of `local` from two machines are two
    devices: e.g. "local@AMD EPYC/znver3" and "local@Intel(R) Xeon(R) Processor/emeraldrapids". Remote and known
    devices keep their id.
    """
    if not spec.source.startswith("probed"):
        return spec.device_id
    m = re.search(r"detects (\S+)", spec.source)
    return f"{spec.device_id}@{spec.name}/{m.group(1) if m else spec.mcpu}"


def device_key_of_json(spec_json: str) -> str:
    return device_key(DeviceSpec.from_json(spec_json))


def get_device(device_id: str) -> DeviceSpec:
    """Resolve a device id to its specification."""
    name, opts = parse_device_id(device_id)
    if name not in _PROVIDERS:
        raise UnknownNameError("device", name, list_devices(), hint="see `perfcast devices`")
    return _PROVIDERS[name][0](opts)


def require_local(spec: DeviceSpec, what: str, fix: str = "use --device local") -> None:
    """`what` measures or tunes on this machine: a remote device (one reached through TVM RPC) is a one-line error
    naming `fix`, raised before any work."""
    if spec.rpc_key:
        raise PerfcastError(f"{what} runs on this machine; {spec.device_id!r} is remote. {fix[:1].upper()}{fix[1:]}")
