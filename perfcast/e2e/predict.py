"""Whole-network latency: predict every kernel a network compiles to, add them up, optionally measure the network.

The network is lowered as the data engine lowers it (`perfcast.collect.tasks`: legalize, fold constants, fuse) and
each distinct fused kernel is predicted once with its TVM default-pipeline program (the unscheduled fused PrimFunc,
which is what `tvm.compile` runs on CPU; every collected task has this program among its records). The network's
prediction is the sum over kernels of calls x predicted time: CDMPP's replayer (Algorithm 2) with one execution
unit reduces to exactly this sum.

`measure=True` compiles the same fused module with `tvm.compile`, runs it in the Relax VM on random inputs and
times `main` with TVM's time evaluator (burn-in, repeats, median), the protocol of `perfcast.collect.measure`.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import PerfcastError


def predict_network(network: str, batch_size: int = 1, device: str = "local", model=None, measure: bool = False,
                    input_shape: str | None = None, repeats: int = 5) -> dict:
    """{"network", "batch_size", "device", "predicted_s", "kernels": [...], "measured_s"?, ...} for `network`."""
    import tvm

    from .._tvm.util import load_x86_intrinsics, normalize_primfunc, structural_key
    from ..collect.tasks import fuse, to_relax
    from ..devices import get_device
    from ..features.cache import features_of_programs
    from ..models import load_model
    from .replayer import Kernel, kernel_graph, replay

    spec = get_device(device)
    m = model if hasattr(model, "predict") else load_model(model)
    load_x86_intrinsics()
    t0 = time.time()
    label, _, mod = to_relax(network, batch_size, input_shape)
    graph = kernel_graph(fuse(mod))
    t_lower = time.time() - t0
    # each distinct kernel (structural workload key, as the data engine keys tasks) is predicted once
    keys, programs, names = [], {}, {}
    for name, func, _ in graph:
        f = normalize_primfunc(func)
        k = structural_key(f)
        keys.append(k)
        if k not in programs:
            programs[k], names[k] = tvm.IRModule({"main": f}), name
    order = list(programs)
    per_call = dict(zip(order, m.predict(features_of_programs([programs[k] for k in order], spec))))
    sim = replay([Kernel(name, float(per_call[k]), deps) for (name, _, deps), k in zip(graph, keys)])
    calls = {k: keys.count(k) for k in order}
    kernels = [{"name": names[k], "workload_key": k, "calls": calls[k], "predicted_s": float(per_call[k]),
                "total_predicted_s": float(per_call[k]) * calls[k]} for k in order]
    total = float(sim.total_s)
    for k in kernels:
        k["share"] = k["total_predicted_s"] / total if total > 0 else 0.0
    kernels.sort(key=lambda k: -k["total_predicted_s"])
    out = {"network": label, "batch_size": batch_size, "device": spec.device_id, "schedules": "default",
           "model": getattr(m, "name", "?"), "predicted_s": total, "kernels": kernels,
           "lower_seconds": t_lower, "predict_seconds": time.time() - t0 - t_lower}
    if measure:
        out.update(measure_network(network, batch_size, spec, input_shape, repeats))
        out["error"] = (total - out["measured_s"]) / out["measured_s"]
    return out


def measure_network(network: str, batch_size: int, spec, input_shape: str | None = None, repeats: int = 5) -> dict:
    """Median latency of the whole network compiled by TVM (same fused module as the tasks) on this machine."""
    import os
    import statistics

    import tvm
    from tvm import relax

    from ..collect.tasks import fuse, to_relax

    if spec.rpc_key:
        raise PerfcastError(f"--measure runs on this machine; {spec.device_id!r} is remote. Drop --measure or "
                            "use --device local")
    os.environ["TVM_NUM_THREADS"] = str(spec.threads)
    _, _, mod = to_relax(network, batch_size, input_shape)
    ex = tvm.compile(fuse(mod), target=spec.target())
    dev = tvm.cpu(0)
    vm = relax.VirtualMachine(ex, dev)
    rng = np.random.default_rng(0)
    args = []
    for p in mod["main"].params:
        sinfo = p.ty  # TVM 0.27: relax Var.ty is the TensorType (struct_info is gone)
        shape = [int(x) for x in sinfo.shape]
        dtype = str(sinfo.dtype)
        a = rng.uniform(-1, 1, size=shape).astype(dtype) if dtype.startswith("float") else np.zeros(shape, dtype)
        args.append(tvm.runtime.tensor(a, dev))
    t = time.perf_counter()
    vm["main"](*args)  # burn-in
    first = time.perf_counter() - t
    number = max(1, int(np.ceil(0.05 / max(first, 1e-6))))
    f = vm.time_evaluator("main", dev, number=number, repeat=repeats)
    lat = list(f(*args).results)
    return {"measured_s": float(statistics.median(lat)), "measured_repeats_s": [float(x) for x in lat],
            "measured_cv": float(np.std(lat) / np.mean(lat)) if len(lat) > 1 else 0.0}
