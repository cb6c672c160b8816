"""`local`: this machine, probed; `local:mcpu=NAME,threads=N` are other real code-generation targets on it."""

from __future__ import annotations

import json
import math
import os
import re
from functools import lru_cache
from pathlib import Path

from ..errors import PerfcastError
from .base import DeviceSpec, register

_OPTIONS = ("mcpu", "threads")


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _size_kb(text: str) -> float:
    m = re.match(r"\s*(\d+)\s*([KMG]?)", text)
    if not m:
        return math.nan
    return float(m.group(1)) * {"": 1 / 1024, "K": 1, "M": 1024, "G": 1024 * 1024}[m.group(2)]


def _cpuinfo_field(cpuinfo: str, name: str) -> str:
    m = re.search(rf"^{name}\s*:\s*(.*)$", cpuinfo, re.M)
    return m.group(1).strip() if m else ""


@lru_cache(maxsize=1)
def cpu_model_name() -> str:
    """This CPU's model name from /proc/cpuinfo ('' where there is none); no TVM import."""
    return _cpuinfo_field(_read("/proc/cpuinfo"), "model name")


@lru_cache(maxsize=1)
def probe() -> dict:
    """Facts about this machine's CPU from /proc and /sys, plus the CPU LLVM (and so TVM) detects."""
    import tvm

    cpuinfo = _read("/proc/cpuinfo")

    def field(name: str) -> str:
        return _cpuinfo_field(cpuinfo, name)

    logical = os.cpu_count() or 1
    pairs = set(re.findall(r"physical id\s*:\s*(\d+).*?core id\s*:\s*(\d+)", cpuinfo, re.S))
    cores = len(pairs) or logical
    caches = {}
    for idx in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level, ctype = _read(idx / "level").strip(), _read(idx / "type").strip()
        if ctype != "Instruction":
            caches[f"l{level}_kb"] = _size_kb(_read(idx / "size"))
    mem_kb = re.search(r"MemTotal:\s*(\d+)", _read("/proc/meminfo"))
    mhz = field("cpu MHz")
    return {
        "name": cpu_model_name() or "unknown CPU",
        "vendor": field("vendor_id"),
        "family_model": f"{field('cpu family')}/{field('model')}/{field('stepping')}",
        "logical_cpus": logical,
        "cores": cores,
        "clock_mhz": float(mhz) if mhz else math.nan,
        "flags": sorted(field("flags").split()),
        "memory_gb": round(int(mem_kb.group(1)) / 1024**2, 2) if mem_kb else math.nan,
        "system_mcpu": tvm.target.codegen.llvm_get_system_cpu(),
        "llvm_version": int(tvm.target.codegen.llvm_version_major()),
        **caches,
    }


def _isa_of(target) -> tuple[str, ...]:
    import tvm

    feats = set(tvm.target.codegen.llvm_get_cpu_features(target))
    host = {f.replace("_", "").replace("sse4.2", "sse42") for f in probe()["flags"]}
    feats = {f for f in feats if f.replace("-", "").replace(".", "") in host or f == "sse4.2" and "sse42" in host}
    keep = ("sse2", "sse4.2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vnni", "avx512bf16",
            "avx512fp16", "amx-tile")
    return tuple(f for f in keep if f in feats)


def local_device(opts: dict[str, str]) -> DeviceSpec:
    import tvm

    for key in opts:
        if key not in _OPTIONS:
            raise PerfcastError(f"unknown option {key!r} for device local; use local:mcpu=NAME,threads=N")
    info = probe()
    mcpu = opts.get("mcpu", info["system_mcpu"])
    if not tvm.target.codegen.llvm_is_valid_cpu(mcpu, tvm.target.codegen.llvm_get_system_triple()):
        raise PerfcastError(f"LLVM does not know mcpu {mcpu!r}; pick one of e.g. x86-64, haswell, skylake-avx512, "
                            f"{info['system_mcpu']} (this CPU)")
    try:
        threads = int(opts.get("threads", info["logical_cpus"]))
    except ValueError:
        raise PerfcastError(f"threads={opts['threads']!r} is not a number; use local:threads=N with "
                            f"1 <= N <= {info['logical_cpus']}") from None
    if not 1 <= threads <= info["logical_cpus"]:
        raise PerfcastError(f"threads={threads} is out of range; this machine has {info['logical_cpus']} CPUs "
                            f"(use 1..{info['logical_cpus']})")
    target = {"kind": "llvm", "mcpu": mcpu, "num-cores": threads}
    isa = _isa_of(tvm.target.Target(target))
    vector_bits = 512 if "avx512f" in isa else 256 if "avx" in isa else 128
    # single-precision FLOP/cycle/core: two FMA pipes x lanes x 2 (SSE without FMA: add + mul pipes)
    flops_per_cycle = 2 * (vector_bits // 32) * (2 if "fma" in isa else 1)
    peak = threads * info["clock_mhz"] * flops_per_cycle / 1000.0
    fp16 = 2 * peak if "avx512fp16" in isa else peak
    canonical = "local" if not opts else "local:" + ",".join(f"{k}={opts[k]}" for k in _OPTIONS if k in opts)
    return DeviceSpec(
        device_id=canonical,
        kind="cpu",
        name=info["name"],
        target_json=json.dumps(target, sort_keys=True),
        mcpu=mcpu,
        cores=info["cores"],
        threads=threads,
        clock_mhz=info["clock_mhz"],
        memory_gb=info["memory_gb"],
        bandwidth_gbps=math.nan,
        peak_fp32_gflops=peak,
        peak_fp16_gflops=fp16,
        l1_kb=info.get("l1_kb", math.nan),
        l2_kb=info.get("l2_kb", math.nan),
        l3_kb=info.get("l3_kb", math.nan),
        vector_bits=vector_bits,
        isa=isa,
        source=f"probed /proc/cpuinfo and /sys; LLVM {info['llvm_version']} detects {info['system_mcpu']}",
    )


register("local", local_device, "this machine (probed); variants local:mcpu=NAME,threads=N")
