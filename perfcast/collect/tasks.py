"""Networks -> tasks: the fused TIR PrimFuncs TVM compiles for a network, with their weights.

A network is a zoo name, an ONNX file, `file.py:factory` (a function `factory(batch_size)` returning a
`torch.nn.Module` and a tuple of example inputs), or a layer suite `layers:CONFIGS.json[@N]`
(`perfcast.layerwise.suite`). Tasks are keyed by a structural hash of the PrimFunc
(`workload_key`) so the same kernel in two networks is one task.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..data.schema import NetworkTaskRecord, TaskRecord
from ..errors import PerfcastError


@dataclass(frozen=True)
class Task:
    workload_key: str
    task_name: str
    mod: object  # tvm.IRModule with one PrimFunc named "main"
    weight: int


@dataclass(frozen=True)
class NetworkTasks:
    network: str
    batch_size: int
    source: str
    tasks: tuple[Task, ...]


def _check_batch(batch_size: int) -> None:
    if not isinstance(batch_size, int) or batch_size < 1:
        raise PerfcastError(f"batch size {batch_size!r} makes no sense; use an integer >= 1 (e.g. --batch-size 1)")


def parse_input_shape(text: str | None) -> dict[str, list[int]] | None:
    """`name:1x3x224x224;other:1x128` -> {"name": [1,3,224,224], ...}."""
    if not text:
        return None
    out = {}
    for item in filter(None, text.split(";")):
        name, _, dims = item.rpartition(":")
        try:
            out[name] = [int(d) for d in dims.lower().split("x")]
        except ValueError:
            raise PerfcastError(f"bad --input-shape {text!r}; write NAME:1x3x224x224 (several separated by ';')") \
                from None
    return out


def _onnx_to_relax(path: Path, batch_size: int, input_shape: dict | None):
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001 - onnx raises many types for a bad file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PerfcastError(f"cannot read ONNX file {str(path)!r} ({first[:200]}); export it again with "
                            "torch.onnx.export or check the path") from None
    init_names = {i.name for i in model.graph.initializer}
    shapes: dict[str, list[int]] = {}
    dtypes: dict[str, str] = {}
    for inp in model.graph.input:
        if inp.name in init_names:
            continue
        tt = inp.type.tensor_type
        dtypes[inp.name] = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name
        if input_shape and inp.name in input_shape:
            shapes[inp.name] = input_shape[inp.name]
            continue
        dims = []
        for i, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(d.dim_value)
            elif i == 0:
                dims.append(batch_size)  # a symbolic leading dimension is the batch
            else:
                raise PerfcastError(f"ONNX input {inp.name!r} of {path.name} has a dynamic dimension {i} "
                                    f"({d.dim_param or '?'}); give it with --input-shape "
                                    f"'{inp.name}:{'x'.join(['N'] * len(tt.shape.dim))}'")
        shapes[inp.name] = dims
    return from_onnx(model, shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=False)


def _python_factory_to_relax(spec: str, batch_size: int):
    file, _, fn = spec.rpartition(":")
    p = Path(file)
    if not p.exists():
        raise PerfcastError(f"network file {file!r} not found; write PATH/TO/file.py:factory")
    mspec = importlib.util.spec_from_file_location(f"perfcast_user_{p.stem}", p)
    mod = importlib.util.module_from_spec(mspec)
    try:
        mspec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001
        raise PerfcastError(f"importing {file!r} failed: {type(e).__name__}: {e}") from None
    factory = getattr(mod, fn, None)
    if factory is None:
        raise PerfcastError(f"{file!r} has no function {fn!r}; write file.py:factory where "
                            "factory(batch_size) returns (torch.nn.Module, example_inputs)")
    out = factory(batch_size)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise PerfcastError(f"{spec} must return (module, example_inputs), got {type(out).__name__}")
    module, inputs = out
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    from ..networks.to_relax import torch_to_relax

    return torch_to_relax(module, inputs)


def network_label(network: str) -> str:
    if network.startswith("layers:"):  # a layer suite (perfcast.layerwise.suite): label by file stem and size
        return "layers:" + Path(network[len("layers:"):]).name.replace(".json", "")
    if network.endswith(".onnx"):
        return Path(network).stem
    if re.search(r"\.py:\w+$", network):
        return Path(network.rpartition(":")[0]).stem + ":" + network.rpartition(":")[2]
    return network


def to_relax(network: str, batch_size: int = 1, input_shape: str | None = None):
    """(label, source, relax IRModule) for a zoo name, an ONNX file or file.py:factory."""
    _check_batch(batch_size)
    if network.startswith("layers:"):
        from ..layerwise.suite import load_suite, suite_to_relax

        return network_label(network), network, suite_to_relax(load_suite(network), batch_size)
    if network.endswith(".onnx"):
        p = Path(network)
        if not p.exists():
            raise PerfcastError(f"ONNX file {network!r} not found; check the path")
        return network_label(network), str(p), _onnx_to_relax(p, batch_size, parse_input_shape(input_shape))
    if re.search(r"\.py:\w+$", network):
        return network_label(network), network, _python_factory_to_relax(network, batch_size)
    from ..networks import get_network
    from ..networks.to_relax import torch_to_relax

    spec = get_network(network)  # raises UnknownNameError listing the zoo
    module, inputs = spec.factory(batch_size)
    return network, "zoo", torch_to_relax(module, inputs)


def fuse(mod):
    """Legalize + fuse as meta-schedule task extraction needs (see notes: raw modules give no tasks)."""
    import tvm
    from tvm import relax

    seq = tvm.transform.Sequential([
        relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
        relax.transform.FuseOps(), relax.transform.FuseTIR(),
    ])
    return seq(mod)


def extract(network: str, target, batch_size: int = 1, input_shape: str | None = None) -> NetworkTasks:
    """The network's tasks for a target, deduplicated by workload key (weights summed)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from .._tvm.util import load_x86_intrinsics, main_func, normalize_primfunc, structural_key

    load_x86_intrinsics()
    label, source, mod = to_relax(network, batch_size, input_shape)
    extracted = ms.relax_integration.extract_tasks(fuse(mod), target)
    by_key: dict[str, Task] = {}
    for t in extracted:
        func = normalize_primfunc(main_func(t.dispatched[0] if t.dispatched else t.mod))
        key = structural_key(func)
        if key in by_key:
            old = by_key[key]
            by_key[key] = Task(key, old.task_name, old.mod, old.weight + int(t.weight))
        else:
            by_key[key] = Task(key, t.task_name, tvm.IRModule({"main": func}), int(t.weight))
    if not by_key:
        raise PerfcastError(f"network {label!r} produced no TVM tasks; is it empty?")
    return NetworkTasks(label, batch_size, source, tuple(by_key.values()))


def task_record(task: Task) -> TaskRecord:
    from .._tvm.util import arg_shapes, estimate_flops, main_func

    return TaskRecord(
        workload_key=task.workload_key,
        task_name=task.task_name,
        tir_script=task.mod.script(),
        arg_shapes_json=json.dumps(arg_shapes(main_func(task.mod))),
        flops=estimate_flops(task.mod),
    )


def network_rows(nt: NetworkTasks) -> list[NetworkTaskRecord]:
    return [NetworkTaskRecord(nt.network, nt.batch_size, nt.source, t.workload_key, t.task_name, t.weight)
            for t in nt.tasks]


def task_from_record(rec: dict, weight: int = 1) -> Task:
    """Rebuild a Task from a stored TaskRecord row (TIR script round-trip)."""
    import tvm

    mod = tvm.script.from_source(rec["tir_script"])
    return Task(rec["workload_key"], rec["task_name"], mod, weight)
