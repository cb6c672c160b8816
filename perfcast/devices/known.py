"""Known remote devices (specifications from public tables) and the generic `rpc` device.

`known_devices.csv` holds one row per device: the DeviceSpec numbers, transcribed from the files named in its
`source` column (CDMPP's `utils/device_info.csv` first, Habitat / DeepView.Predict's `devices.yml` + `devices.csv`
where CDMPP has no figure); NaN where no source gives one. Caveats of the sources, kept as they are:
`clock_mhz` is the boost clock in CDMPP's rows but the base clock in Habitat's; CDMPP's CPU rows list `cores` as
the cloud instance's vCPUs and some cache sizes as whole-chip totals; `bandwidth_gbps` is GB/s; for GPUs `l1_kb`
is per SM, `l2_kb` the whole chip and `l3_kb` the shared memory per SM.

Each device registers as its lower-case name (`t4`, `v100`, `a100`, `xeon_e5_2680`, ...) and is measured through a
TVM RPC tracker: `rpc_key` defaults to the name; `t4:key=KEY,tracker=HOST:PORT` overrides both.

`rpc:key=KEY,tracker=HOST:PORT[,like=DEVICE]` is any device behind a tracker whose specification and TVM target
are those of `like` (default `local`); further options go to `like` (`rpc:key=k,tracker=h:9190,threads=1`).
"""

from __future__ import annotations

import csv
import dataclasses
import json
from functools import lru_cache
from pathlib import Path

from ..errors import PerfcastError
from .base import DeviceSpec, get_device, register

CSV_PATH = Path(__file__).with_name("known_devices.csv")
DEFAULT_TRACKER = "127.0.0.1:9190"

# What TVM generates code for on each device (recorded only; nothing here builds for CUDA) and the ISA extensions
# that code may use. NVIDIA arch = compute capability (CDMPP's `capability`, Habitat's compute_major/minor).
_X86_AVX2 = ("sse2", "sse4.2", "avx", "avx2", "fma")
_TVM: dict[str, tuple[dict, tuple[str, ...]]] = {
    "t4": ({"kind": "cuda", "arch": "sm_75"}, ()),
    "p4": ({"kind": "cuda", "arch": "sm_61"}, ()),
    "v100": ({"kind": "cuda", "arch": "sm_70"}, ()),
    "a10": ({"kind": "cuda", "arch": "sm_86"}, ()),
    "a100": ({"kind": "cuda", "arch": "sm_80"}, ()),
    "a30": ({"kind": "cuda", "arch": "sm_80"}, ()),
    "k80": ({"kind": "cuda", "arch": "sm_37"}, ()),
    "p100": ({"kind": "cuda", "arch": "sm_60"}, ()),
    "hl_100": ({"kind": "ext_dev"}, ()),
    "xeon_e5_2673": ({"kind": "llvm", "mcpu": "broadwell"}, _X86_AVX2),
    "epyc_7452": ({"kind": "llvm", "mcpu": "znver2"}, _X86_AVX2),
    "graviton2": ({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-n1"}, ("neon", "dotprod")),
    "xeon_platinum_8272": ({"kind": "llvm", "mcpu": "cascadelake"},
                           _X86_AVX2 + ("avx512f", "avx512bw", "avx512vnni")),
    "xeon_e5_2680": ({"kind": "llvm", "mcpu": "haswell"}, _X86_AVX2),
    "p4000": ({"kind": "cuda", "arch": "sm_61"}, ()),
    "gtx1080ti": ({"kind": "cuda", "arch": "sm_61"}, ()),
    "rtx2070": ({"kind": "cuda", "arch": "sm_75"}, ()),
    "rtx2080ti": ({"kind": "cuda", "arch": "sm_75"}, ()),
    "rtx3090": ({"kind": "cuda", "arch": "sm_86"}, ()),
    "a40": ({"kind": "cuda", "arch": "sm_86"}, ()),
    "a4000": ({"kind": "cuda", "arch": "sm_86"}, ()),
    "rtx4000": ({"kind": "cuda", "arch": "sm_75"}, ()),
    "l4": ({"kind": "cuda", "arch": "sm_89"}, ()),
    "h100": ({"kind": "cuda", "arch": "sm_90"}, ()),
}
_FLOATS = ("clock_mhz", "memory_gb", "bandwidth_gbps", "peak_fp32_gflops", "peak_fp16_gflops", "l1_kb", "l2_kb",
           "l3_kb")


def check_tracker(value: str, device_id: str) -> str:
    """Validate HOST:PORT; returns it normalised."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise PerfcastError(f"tracker={value!r} in {device_id!r} is not HOST:PORT; write e.g. "
                            f"tracker={DEFAULT_TRACKER}")
    return f"{host}:{int(port)}"


def _check_key(value: str, device_id: str) -> str:
    if any(c in value for c in " :,="):
        raise PerfcastError(f"key={value!r} in {device_id!r} may not contain spaces, ':', ',' or '='; "
                            "use the key the RPC server registered with (--key)")
    return value


@lru_cache(maxsize=1)
def known_specs() -> dict[str, DeviceSpec]:
    """The base specification of every device in known_devices.csv, by name (file order)."""
    out: dict[str, DeviceSpec] = {}
    with CSV_PATH.open(newline="") as fh:
        for row in csv.DictReader(fh):
            name = row["name"]
            target, isa = _TVM[name]
            cores = int(row["cores"])
            if target["kind"] == "llvm":
                target = {**target, "num-cores": cores}
            out[name] = DeviceSpec(
                device_id=name,
                kind=row["kind"],
                name=row["model"],
                target_json=json.dumps(target, sort_keys=True),
                mcpu=target.get("mcpu", ""),
                cores=cores,
                threads=cores,
                vector_bits=int(row["vector_bits"]),
                isa=isa,
                rpc_key=name,
                source=row["source"],
                **{k: float(row[k]) for k in _FLOATS},
            )
    return out


def list_known() -> list[DeviceSpec]:
    return list(known_specs().values())


def _known_provider(name: str):
    def provider(opts: dict[str, str]) -> DeviceSpec:
        device_id = f"{name}:" + ",".join(f"{k}={v}" for k, v in opts.items())
        for key in opts:
            if key not in ("key", "tracker"):
                raise PerfcastError(f"unknown option {key!r} for device {name}; its options are key and tracker: "
                                    f"{name}:key=KEY,tracker=HOST:PORT")
        spec = known_specs()[name]
        if not opts:
            return spec
        key = _check_key(opts.get("key", spec.rpc_key), device_id)
        tracker = check_tracker(opts["tracker"], device_id) if "tracker" in opts else ""
        canonical = f"{name}:" + ",".join(f"{k}={v}" for k, v in (("key", opts.get("key")), ("tracker", tracker))
                                          if v)
        return dataclasses.replace(spec, device_id=canonical, rpc_key=key, rpc_tracker=tracker)

    return provider


def rpc_device(opts: dict[str, str]) -> DeviceSpec:
    device_id = "rpc:" + ",".join(f"{k}={v}" for k, v in opts.items())
    missing = [k for k in ("key", "tracker") if k not in opts]
    if missing:
        raise PerfcastError(f"device rpc needs {' and '.join(missing)}; write rpc:key=KEY,tracker=HOST:PORT"
                            "[,like=DEVICE] (e.g. rpc:key=local,tracker=127.0.0.1:9190)")
    key = _check_key(opts["key"], device_id)
    tracker = check_tracker(opts["tracker"], device_id)
    like = opts.get("like", "local")
    if like == "rpc" or like.startswith("rpc:"):
        raise PerfcastError(f"like={like!r} in {device_id!r}: like names the device behind the tracker, e.g. "
                            "like=local or like=t4")
    extra = {k: v for k, v in opts.items() if k not in ("key", "tracker", "like")}
    like_id = like + (":" + ",".join(f"{k}={v}" for k, v in extra.items()) if extra else "")
    base = get_device(like_id)  # UnknownNameError / the like device's own option errors
    canonical = f"rpc:key={key},tracker={tracker}" + ("" if like_id == "local" else f",like={like}") + \
        "".join(f",{k}={v}" for k, v in extra.items())
    src = f"specification of {base.device_id} ({base.source})" if base.source else f"specification of {like_id}"
    return dataclasses.replace(base, device_id=canonical, rpc_key=key, rpc_tracker=tracker, source=src)


for _name in known_specs():
    register(_name, _known_provider(_name), f"{known_specs()[_name].name} (known specification; measured through "
                                            f"an RPC tracker: {_name}:key=KEY,tracker=HOST:PORT)")
register("rpc", rpc_device, "a device behind a TVM RPC tracker: rpc:key=KEY,tracker=HOST:PORT[,like=DEVICE] "
                            "(specification and target of DEVICE, default local)")
