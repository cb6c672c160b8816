"""TVM 0.27 glue used across perfcast: intrinsics, hashing, JSON of traces, argument shapes."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import types


def load_x86_intrinsics() -> None:
    """Register only the x86 tensor intrinsics meta-schedule needs on CPU.

    `import tvm.s_tir.tensor_intrin` registers every backend's intrinsics and takes 40 s here (CUDA's alone ~30 s);
    loading `x86.py` under a bare package object takes well under a second.
    """
    name = "tvm.s_tir.tensor_intrin"
    if name + ".x86" in sys.modules:
        return
    if name not in sys.modules:
        spec = importlib.util.find_spec(name)
        pkg = types.ModuleType(name)
        pkg.__path__ = list(spec.submodule_search_locations)
        pkg.__spec__ = spec
        sys.modules[name] = pkg
    importlib.import_module(name + ".x86")


def normalize_primfunc(func):
    """The PrimFunc with attributes that do not change the computation normalised (for structural keys)."""
    if "op_pattern" in (func.attrs or {}):
        func = func.without_attr("op_pattern")
    return func.with_attr("global_symbol", "main")


def structural_key(func) -> str:
    """Hex structural hash of a PrimFunc, insensitive to its symbol name and fusion-pattern attribute."""
    import tvm_ffi

    return f"{tvm_ffi.structural_hash(normalize_primfunc(func)) & 0xFFFFFFFFFFFFFFFF:016x}"


def main_func(mod):
    """The single PrimFunc of a task module."""
    funcs = [f for _, f in mod.functions_items()]
    if len(funcs) != 1:
        raise ValueError(f"expected one PrimFunc in the task module, got {len(funcs)}")
    return funcs[0]


def plain(obj):
    """TVM FFI containers and scalars (a trace's JSON form) -> plain Python for json.dumps."""
    import tvm

    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, tvm.tirx.IntImm):
        return int(obj.value)
    if isinstance(obj, tvm.tirx.FloatImm):
        return float(obj.value)
    if hasattr(obj, "items"):
        return {str(k): plain(v) for k, v in obj.items()}
    try:
        return [plain(x) for x in obj]
    except TypeError:
        return str(obj)


def trace_to_json(trace) -> str:
    return json.dumps(plain(trace.as_json()), separators=(",", ":"))


def apply_trace(task_mod, trace_json: str):
    """Rebuild a scheduled program from its task and the trace JSON; returns the scheduled IRModule."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    load_x86_intrinsics()
    sch = Schedule(task_mod)
    Trace.apply_json_to_schedule(json.loads(trace_json), sch)
    return sch.mod


def arg_shapes(func) -> list[tuple[list[int], str]]:
    """[(shape, dtype)] of a PrimFunc's buffer arguments."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    out = []
    for info in ArgInfo.from_prim_func(func):
        d = info.as_json()  # ["TENSOR", dtype, shape]
        out.append(([int(x) for x in d[2]], str(d[1])))
    return out


def estimate_flops(mod) -> float:
    try:
        from tvm.s_tir.analysis import estimate_tir_flops
    except ImportError:  # moved between releases
        from tvm.tirx.analysis import estimate_tir_flops  # type: ignore
    try:
        return float(estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001 - TVM raises TVMError/InternalError for unsupported statements
        return float("nan")
