"""Device registry: `local` (this machine and its code-generation variants), known remote devices and `rpc`."""

from . import known, local  # noqa: F401  (register "local", the known devices and "rpc")
from .base import DeviceSpec, device_help, get_device, list_devices, parse_device_id, register, require_local

# code-generation variants of `local` worth listing (those this CPU can run) besides its own LLVM CPU name
VARIANT_MCPUS = ("x86-64", "haswell", "skylake-avx512")
_CHECKED = ("sse4.2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512vnni",
            "avx512bf16", "avx512fp16", "amx-tile")


def runnable_mcpu(mcpu: str) -> bool:
    """True if LLVM knows `mcpu` for this machine's triple and this CPU has every ISA extension it enables."""
    import tvm

    cg = tvm.target.codegen
    if not cg.llvm_is_valid_cpu(mcpu, cg.llvm_get_system_triple()):
        return False
    feats = set(cg.llvm_get_cpu_features(tvm.target.Target({"kind": "llvm", "mcpu": mcpu})))
    host = {f.replace("_", "") for f in local.probe()["flags"]}
    return all(f.replace("-", "").replace(".", "") in host for f in _CHECKED if f in feats)


def list_device_specs() -> list[DeviceSpec]:
    """`local`, its variants local:mcpu=M,threads=T this machine can run, then every known remote device."""
    import os

    system = local.probe()["system_mcpu"]
    mcpus = [m for m in VARIANT_MCPUS if m != system and runnable_mcpu(m)] + [system]
    threads = [t for t in (1, 2) if t <= (os.cpu_count() or 1)]
    specs = [get_device("local")]
    specs += [get_device(f"local:mcpu={m},threads={t}") for m in mcpus for t in threads]
    specs += known.list_known()
    return specs


__all__ = ["DeviceSpec", "get_device", "list_devices", "list_device_specs", "device_help", "parse_device_id",
           "register", "require_local"]
