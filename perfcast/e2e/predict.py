"""Whole-network latency: predict every kernel a network compiles to, add them up, optionally measure the network.

The network is lowered as the data engine lowers it (`perfcast.collect.tasks`: legalize, fold constants, fuse), then
reshape kernels that only relabel their input become views as in `tvm.compile`'s pipeline (they run no kernel), and
each distinct fused kernel is predicted once with its TVM default-pipeline program (the unscheduled fused PrimFunc,
which is what `tvm.compile` runs on CPU; every collected task has this program among its records). The network's
prediction is the sum over kernels of calls x predicted time: CDMPP's replayer (Algorithm 2) with one execution
unit reduces to exactly this sum. The model predicts a kernel timed alone, as its records were; with the device's
in-network context fit (`perfcast.e2e.context`) each kernel's time becomes its time inside the network plus a
per-call gap, replayed the same way.

`measure=True` compiles the same fused module with `tvm.compile`, runs it in the Relax VM on random inputs and
times `main` with TVM's time evaluator (burn-in, repeats, median), the protocol of `perfcast.collect.measure`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..errors import PerfcastError


METHODS = ("kernel", "layerwise")


def predict_network(network: str, batch_size: int = 1, device: str = "local", model=None, measure: bool = False,
                    input_shape: str | None = None, repeats: int = 5, schedules: str = "default",
                    method: str = "kernel", layerwise_model=None, speed_ratio: float | None = None,
                    context: bool | str = True, selection_sigma: float | None = None,
                    allow_untuned: bool = False) -> dict:
    """{"network", "batch_size", "device", "predicted_s", "kernels": [...], "measured_s"?, ...} for `network`.

    `schedules`: "default", "tuned:DB_DIR" or "random:SEED" (see `perfcast.e2e.schedules`).
    `method`: "kernel" (every kernel by the cost model `model`) or "layerwise" (the layerwise paper: conv2d, dense
    and pooling kernels by the per-layer-type regressors of `layerwise_model`, default the bundled ones; every other
    kernel by `model`).
    `speed_ratio`: multiply every kernel's prediction by it (the host's speed today relative to its records, from
    `perfcast.collect.calibrate`); the uncalibrated total is kept as `uncalibrated_predicted_s`.
    `context`: True applies the device's in-network context fit from the bundled file when it has one
    (`perfcast.e2e.context`: kernels run slower inside a network than alone, as the model's records timed them),
    a path applies that context file's fit, False none. The sum of the isolated predictions is kept as
    `isolated_predicted_s`, and `context` says which fit was applied (None: none).
    `allow_untuned`: a tuned database with no record of any of the network's kernels predicts TVM's default kernels
    instead of failing (`perfcast sweep`; `scheduled_kernels` then says 0).
    `selection_sigma` (tuned:DB only; default the model's fitted one, `selection.model_sigma`; 0: off): each tuned
    kernel is predicted as the fastest of the candidates the search measured (`perfcast.e2e.selection`: the search
    kept the candidate that measured fastest, so the model's prediction of it alone is biased high); each such
    kernel keeps the prediction of the kept program alone (isolated, calibrated) as `kept_predicted_s` and its
    number of candidates as `candidates`; `selection` gives sigma, the kernels corrected and the network's
    prediction without the correction (`kept_predicted_s`).
    With a model that stores prediction intervals (`perfcast.eval.intervals`; method "kernel"), each kernel gets
    `predicted_low_s` / `predicted_high_s` and the network `interval` (level, low_s, high_s): the replay with every
    kernel at its lower bound, then at its upper one."""
    from ..devices import get_device
    from ..eval.intervals import interval_factors, model_intervals, program_regions
    from ..features.cache import features_of_programs
    from ..models import load_model
    from .replayer import Kernel, replay
    from .schedules import parse_schedules

    from .selection import check_sigma, model_sigma

    sched_kind, db_dir = parse_schedules(schedules)  # a bad value fails before any work
    if selection_sigma is not None:
        check_sigma(selection_sigma)
    if speed_ratio is not None:
        from ..collect.calibrate import check_ratio

        speed_ratio = check_ratio(speed_ratio)
    if method not in METHODS:
        raise PerfcastError(f"unknown method {method!r}; use --method kernel or --method layerwise")
    if method == "layerwise" and schedules != "default":
        raise PerfcastError(f"--method layerwise predicts TVM's default (untuned) kernels, as the layerwise paper "
                            f"profiles them; drop --schedules {schedules} or use --method kernel")
    spec = get_device(device)
    fit = _context_fit(spec, context)  # a bad context file fails before any work
    m = model if hasattr(model, "predict") else load_model(model)
    sigma = model_sigma(m) if selection_sigma is None else check_sigma(selection_sigma)
    t0 = time.time()
    low = lower_network(network, batch_size, spec, schedules, input_shape, allow_untuned)
    t_lower = time.time() - t0
    graph, keys, programs, names, order = low.graph, low.keys, low.programs, low.names, list(low.programs)
    Xp = features_of_programs([programs[k] for k in order], spec, asm=m.needs_asm)
    per_call = dict(zip(order, m.predict(Xp)))
    unseen = unseen_device_warning(m, spec, device)
    # the intervals are the model's errors on the devices it learned; on one it never measured they do not hold
    table = model_intervals(m) if method == "kernel" and not unseen else None
    band = dict(zip(order, zip(*interval_factors(table, program_regions(Xp))))) if table else {}
    kept = _select(per_call, db_dir, spec, m, sigma) if sched_kind == "tuned" and sigma > 0 else {}
    source = dict.fromkeys(order, "kernel")
    lw_info = _layerwise(per_call, source, programs, order, spec, layerwise_model) if method == "layerwise" else {}

    def replayed(times: dict):  # per-call isolated times -> the replayed network (in-network times with a fit)
        if fit is None:
            return replay([Kernel(name, float(times[k]), deps) for (name, _, deps), k in zip(graph, keys)])
        return replay([Kernel(name, float(fit.duration_s(times[k], low.io_bytes[k])), deps, gap_s=fit.overhead_s)
                       for (name, _, deps), k in zip(graph, keys)])

    if speed_ratio is not None:
        uncalibrated = replayed(per_call)
        per_call = {k: v * speed_ratio for k, v in per_call.items()}
    sim = replayed(per_call)
    alone = per_call
    if band:  # every kernel at its interval's lower bound, then at its upper one (errors fully correlated)
        bounds = [replayed({k: v * band[k][i] for k, v in alone.items()}).total_s for i in (0, 1)]
    if kept:  # the kept programs' own predictions, calibrated the same way: the network without the correction
        kept = {k: (v * (speed_ratio or 1.0), n) for k, (v, n) in kept.items()}
        unselected = replayed({k: kept[k][0] if k in kept else v for k, v in alone.items()})
    if fit is not None:  # each kernel's time inside the network (see perfcast.e2e.context)
        per_call = {k: float(fit.in_network_s(v, low.io_bytes[k])) for k, v in alone.items()}
    calls = low.calls
    kernels = [{"name": names[k], "workload_key": k, "calls": calls[k], "predicted_s": float(per_call[k]),
                "total_predicted_s": float(per_call[k]) * calls[k], "method": source[k]} for k in order]
    if fit is not None:
        for k in kernels:
            k["isolated_predicted_s"] = float(alone[k["workload_key"]])
    for k in kernels if band else ():
        key = k["workload_key"]
        lo_hi = [alone[key] * f for f in band[key]]
        if fit is not None:
            lo_hi = [fit.in_network_s(v, low.io_bytes[key]) for v in lo_hi]
        k["predicted_low_s"], k["predicted_high_s"] = map(float, lo_hi)
    for k in kernels:
        if k["workload_key"] in kept:
            k["kept_predicted_s"], k["candidates"] = kept[k["workload_key"]]
    total = float(sim.total_s)
    for k in kernels:
        k["share"] = k["total_predicted_s"] / total if total > 0 else 0.0
    kernels.sort(key=lambda k: -k["total_predicted_s"])
    from ..eval.coverage import RECOMPUTE_SHARE, dtype_warning, program_dtypes, recompute_warning, recomputed_share

    shares = {k: recomputed_share(programs[k]) for k in order}  # kernels the model cannot judge (coverage)
    for k in kernels:
        if shares[k["workload_key"]] >= RECOMPUTE_SHARE:
            k["recomputes"] = round(shares[k["workload_key"]], 4)
    warning = "; ".join(w for w in (unseen,
                                    dtype_warning(m, [program_dtypes(programs[k]) for k in order], "kernels"),
                                    recompute_warning(list(shares.values()), "kernels")) if w)
    out = {"network": low.label, "batch_size": batch_size, "device": spec.device_id, **low.sched_info,
           "model": getattr(m, "name", "?"), "method": method, "predicted_s": total, "kernels": kernels,
           "lower_seconds": t_lower, "predict_seconds": time.time() - t0 - t_lower}
    if band:
        out["interval"] = {"level": table["level"], "low_s": float(bounds[0]), "high_s": float(bounds[1]),
                           "fitted_on": table.get("fitted_on", "validation")}
    if speed_ratio is not None:
        out["speed_ratio"], out["uncalibrated_predicted_s"] = float(speed_ratio), float(uncalibrated.total_s)
    out["isolated_predicted_s"] = float(sum(alone[k] * calls[k] for k in order))
    out["context"] = None if fit is None else {**fit.to_json(), "formula": fit.describe()}
    if sched_kind == "tuned":
        out["selection"] = {"sigma": sigma, "kernels": len(kept),
                            "kept_predicted_s": float(unselected.total_s) if kept else total}
    out["memory"] = low.memory.to_dict()
    if lw_info:
        lw_s = sum(k["total_predicted_s"] for k in kernels if k["method"] == "layerwise")
        out["layerwise"] = {**lw_info, "layers_s": lw_s, "share": lw_s / total if total > 0 else 0.0,
                            "kernels": sum(k["method"] == "layerwise" for k in kernels)}
        power = out["layerwise"].pop("power_w", {})
        if power:  # E = sum over layers of T x P (the layerwise paper §6), for the layers with a power model
            out["layerwise"]["energy_j"] = sum(per_call[k] * p * calls[k] for k, p in power.items())
    if warning:
        out["warning"] = warning
    if measure:
        out.update(measure_network(network, batch_size, spec, input_shape, repeats, fused=low.applied))
        out["error"] = (total - out["measured_s"]) / out["measured_s"]
        attach_measured_kernels(out, low.names_of)
        # what the VM really allocated for one inference, plus the weights and inputs it was given
        out["memory"]["measured_bytes"] = (out.pop("measured_vm_storage_bytes") + low.memory.weights_bytes
                                           + low.memory.input_bytes)
    return out


def _select(per_call: dict, db_dir: str, spec, m, sigma: float) -> dict:
    """Replace each tuned kernel's prediction by the fastest of its search's candidates (`perfcast.e2e.selection`);
    returns {workload key: (the kept program's prediction, number of candidates)} of the kernels replaced."""
    from .selection import candidate_predictions, fastest_of

    kept = {}
    for k, p in candidate_predictions(per_call, db_dir, spec, m).items():
        kept[k] = (float(per_call[k]), len(p))
        per_call[k] = fastest_of(p, sigma)
    return kept


@dataclass
class LoweredNetwork:
    """A network lowered as TVM compiles it, with each distinct kernel's scheduled program."""

    label: str
    graph: list  # [(kernel name, PrimFunc, deps)] in call order (`replayer.kernel_graph`)
    keys: list  # the task (structural workload key) of each call in `graph`
    programs: dict  # workload key -> IRModule of the scheduled kernel that runs
    names: dict  # workload key -> the first kernel name with that key
    names_of: dict  # workload key -> every kernel name in the compiled module with that key
    calls: dict  # workload key -> calls per network run
    io_bytes: dict  # workload key -> bytes of the kernel's buffer arguments
    applied: object  # the fused module with the schedules substituted (what gets compiled)
    sched_info: dict
    memory: object  # memory.MemoryEstimate


def lower_network(network: str, batch_size: int, spec, schedules: str = "default",
                  input_shape: str | None = None, allow_untuned: bool = False) -> LoweredNetwork:
    """Lower `network` (zoo name, ONNX file or file.py:factory) for device `spec` and apply `schedules`
    (`allow_untuned`: see `schedules.apply_schedules`)."""
    import tvm
    from tvm import relax

    from .._tvm.util import load_x86_intrinsics, normalize_primfunc, structural_key
    from ..collect.tasks import fuse, to_relax
    from .context import io_bytes
    from .memory import network_memory
    from .replayer import kernel_graph
    from .schedules import apply_schedules

    load_x86_intrinsics()
    label, _, mod = to_relax(network, batch_size, input_shape)
    # as tvm.compile's pipeline does: a reshape kernel that only relabels its input becomes a view (R.reshape),
    # which runs no kernel and allocates nothing (bert_tiny: 10 of 54 calls)
    fused = relax.transform.RewriteDataflowReshape()(fuse(mod))
    graph = kernel_graph(fused)
    memory = network_memory(fused)
    applied, sched_info = apply_schedules(fused, spec.target(), schedules, allow_untuned)
    keys, programs, names, names_of = [], {}, {}, {}
    for name, func, _ in graph:
        k = structural_key(func)  # the task's key (of the unscheduled kernel), as in the dataset
        keys.append(k)
        names_of.setdefault(k, set()).add(name)
        if k not in programs:  # the program that runs: the scheduled kernel of that name
            programs[k], names[k] = tvm.IRModule({"main": normalize_primfunc(applied[name])}), name
    return LoweredNetwork(label, graph, keys, programs, names, names_of, {k: keys.count(k) for k in programs},
                          {k: io_bytes(p["main"]) for k, p in programs.items()}, applied, sched_info, memory)


def _context_fit(spec, context):
    """The in-network context fit to apply for `spec` (None: none; see `predict_network`)."""
    if context is False or context is None:
        return None
    from ..devices.base import device_key
    from .context import load_context

    fits = load_context(None if context is True else context)
    if context is not True and not fits:
        raise PerfcastError(f"context file {context!r} does not exist; write one with `perfcast context NETWORK ... "
                            "--out FILE`")
    return fits.get(device_key(spec))


def _layerwise(per_call: dict, source: dict, programs: dict, order: list, spec, path) -> dict:
    """Replace the cost model's prediction of every conv2d / dense / pooling kernel by the layerwise model's."""
    from .._tvm.util import main_func
    from ..devices.base import device_key
    from ..layerwise import LayerwiseModel, layer_of_tir
    from ..layerwise.model import network_energy_note
    from ..paths import bundled_layerwise_dir

    lw = LayerwiseModel.load(path or bundled_layerwise_dir())
    dkey = device_key(spec)
    lw.check_device(dkey)
    layers = {k: layer_of_tir(main_func(programs[k])) for k in order}
    keys = [k for k in order if layers[k] is not None and lw.covers(dkey, layers[k].layer_type)]
    for k, p in zip(keys, lw.predict(dkey, [layers[k] for k in keys])):
        per_call[k], source[k] = float(p), "layerwise"
    info = {"model": str(path or "bundled"), "device": dkey}
    note = network_energy_note(dkey, lw)
    if note:
        info["energy_note"] = note
    else:
        watts = lw.predict(dkey, [layers[k] for k in keys], "power_w")
        info["power_w"] = {k: float(w) for k, w in zip(keys, watts) if w == w}
    return info


# CPUs the bundled model never saw, measured (README, Cross-device: "A second CPU the bundled data does not have";
# znver5: "A CPU the bundled data does not have")
UNSEEN_CPU_FIGURE = ("on an AMD EPYC znver2 it never saw, 47 % of 281 held-out programs fell inside them, MAPE "
                     "30 %; adapted with 20 tasks, 21-23 % (on a znver5, the model of 2026-11-30: 26 %, 51 %, "
                     "three held-out networks off by 25-53 %; adapted, 20-23 % and 2-12 %)")


def unseen_device_warning(model, spec, device: str) -> str | None:
    """One line when the model never trained on this device (e.g. `local` on another CPU than the bundled data's):
    the prediction then rests on the device features alone (CDMPP §4.3) and is less accurate."""
    from ..devices.base import device_key
    from ..eval.workflow import trained_on

    key = device_key(spec)
    if trained_on(model, [key])[0]:
        return None
    seen = model.info_["train_devices"]
    return (f"the model has no measurements of {key!r} (it trained on {', '.join(sorted(seen))}): this prediction "
            f"comes from device features only, its error is likely well above the model's test error, and it has "
            f"no interval (the model's errors on those devices do not hold on another: {UNSEEN_CPU_FIGURE}). To "
            f"calibrate it, measure 20 tasks on it and adapt the model (3-6 min, under a minute of it measuring: "
            f"`perfcast adapt --device {device} --budget-tasks 20 --method proxy --param then=cmd --out mymodel`, "
            f"then `--model mymodel`)")


def measure_network(network: str, batch_size: int, spec, input_shape: str | None = None, repeats: int = 5,
                    kernels: bool = True, fused=None) -> dict:
    """Latency of the whole network compiled by TVM (same fused module as the tasks) on this machine, timed with
    the collector's `time_function` and rounds (measurement protocol 2): the launching thread off the core of TVM's
    pool thread, `MeasureConfig.rounds` rounds half a second apart, each timed again while the host gate finds the
    host slow (`measured_host_gate`), the lowest round median (`measured_rounds_s`: each round's median;
    `measured_repeats_s`: the best round's repeats).

    With `kernels`, the VM is then run `repeats` more times under an instrument that times every kernel call
    (`measured_kernels_s`: kernel name -> median seconds per call), the layerwise paper's per-layer profile.
    `fused`: the fused (and possibly scheduled, `perfcast.e2e.schedules`) module to compile instead of lowering
    `network` again.
    """
    import os

    import tvm
    from tvm import relax

    from ..collect.tasks import fuse, to_relax
    from ..devices import require_local

    require_local(spec, "--measure", "drop --measure or use --device local")
    os.environ["TVM_NUM_THREADS"] = str(spec.threads)
    _, _, mod = to_relax(network, batch_size, input_shape)
    fused = fuse(mod) if fused is None else fused
    ex = tvm.compile(fused, target=spec.target())
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
    from ..collect.affinity import LauncherPin
    from ..collect.measure import MeasureConfig
    from ..collect.sentinel import Sentinel, baseline_key, gate_for, gated_round
    from ..collect.worker import combine_rounds
    from ..data.schema import MEASURE_PROTOCOL

    def evaluate(number, repeat):
        return vm.time_evaluator("main", dev, number=number, repeat=repeat)(*args).results

    cfg, rounds = MeasureConfig(), []
    gate, key = gate_for(cfg), baseline_key(spec.target_json, spec.threads)
    sentinel = Sentinel(spec.target_json, spec.threads, dev) if cfg.host_gate is not None else None
    with LauncherPin() as pin:  # timed as the collector times kernels (protocol 2: collect/worker.py)
        for r in range(cfg.rounds):
            if r:
                time.sleep(cfg.round_gap_s)
            rounds.append(gate.run(lambda: gated_round(evaluate, lambda: vm["main"](*args), cfg, pin, sentinel,
                                                       plan=rounds[0]["plan"] if rounds else None),
                                   cfg.host_pause_s, cfg.host_wait_s, key=key))
        gate.save()
        best = combine_rounds(rounds, MEASURE_PROTOCOL)
        out = {"measured_s": float(best["latency_s"]), "measured_repeats_s": [float(x) for x in best["latencies_s"]],
               "measured_rounds_s": [float(x) for x in best["round_latencies_s"]],
               "measured_cv": float(best["latency_cv"]), "measured_host_gate": gate.stats()}
        if kernels:
            out["measured_kernels_s"], out["measured_vm_storage_bytes"] = _time_kernels(
                vm, args, {gv.name_hint for gv in fused.functions if isinstance(fused[gv], tvm.tirx.PrimFunc)},
                repeats)
    return out


def _time_kernels(vm, args, names: set, repeats: int) -> dict:
    """(kernel name -> median seconds per call over `repeats` instrumented runs of `main`, bytes the VM allocates
    for one run). Each call is timed from the VM's before-call to after-call hook: the kernel plus about a
    microsecond of hook overhead; the storage is the sum of the VM's `alloc_storage` calls (its memory plan)."""
    start: dict = {}
    runs: list[dict] = []
    storage: list[int] = []  # bytes of each alloc_storage call of the first run

    def instrument(func, symbol, before, ret, *a):
        now = time.perf_counter()
        if symbol == "vm.builtin.alloc_storage" and before and len(runs) == 1:
            storage.append(int(np.prod([int(x) for x in a[1]])))  # args: (vm, (nbytes,), device, dtype, scope)
        elif symbol in names:
            if before:
                start[symbol] = now
            else:
                runs[-1].setdefault(symbol, []).append(now - start[symbol])
        return 0  # VMInstrumentReturnKind.NO_OP

    vm.set_instrument(instrument)
    try:
        for _ in range(repeats):
            runs.append({})
            vm["main"](*args)
    finally:
        vm.set_instrument(None)
    # per kernel: the median over runs of its mean time per call in that run
    return {k: float(np.median([np.mean(r[k]) for r in runs if k in r])) for k in set().union(*runs)}, sum(storage)


OUTLIER_RATIO = 1.5  # measured / predicted at which a kernel counts as under-performing (worth tuning)


def attach_measured_kernels(out: dict, graph_names: dict) -> None:
    """Put measured per-call times on `out["kernels"]` and list the outliers (measured >> predicted), ranked by the
    time they lose per network run: the layerwise paper's "tuning potential" (§7.4).

    `graph_names`: workload key -> every kernel name in the compiled module that has that key.
    """
    meas = out.pop("measured_kernels_s", {})
    for k in out["kernels"]:
        got = [meas[n] for n in graph_names.get(k["workload_key"], ()) if n in meas]
        if got:
            k["measured_s"] = float(np.median(got))
            k["ratio"] = k["measured_s"] / k["predicted_s"] if k["predicted_s"] > 0 else float("inf")
    out["measured_kernels_sum_s"] = float(sum(k["measured_s"] * k["calls"] for k in out["kernels"]
                                              if "measured_s" in k))
    worse = [k for k in out["kernels"] if k.get("ratio", 0) >= OUTLIER_RATIO]
    for k in worse:
        k["excess_s"] = (k["measured_s"] - k["predicted_s"]) * k["calls"]
    out["outliers"] = [{"name": k["name"], "workload_key": k["workload_key"], "ratio": k["ratio"],
                        "excess_s": k["excess_s"]} for k in sorted(worse, key=lambda k: -k["excess_s"])]


def plot_kernels(r: dict, path) -> str:
    """Predicted vs measured time per kernel call (log-log, one point per distinct kernel, size ~ calls)."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [k for k in r["kernels"] if "measured_s" in k]
    if not ks:
        raise PerfcastError("no kernel was timed; run with --measure on this machine")
    p, m = np.array([k["predicted_s"] for k in ks]) * 1e3, np.array([k["measured_s"] for k in ks]) * 1e3
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.scatter(m, p, s=[12 + 8 * k["calls"] for k in ks], alpha=0.7)
    named = {o["name"] for o in r.get("outliers", [])[:5]} | {k["name"] for k in ks if k["share"] > 0.1}
    for k, x, y in zip(ks, m, p):
        if k["name"] in named:
            ax.annotate(k["name"][:24], (x, y), fontsize=7)
    lo, hi = min(p.min(), m.min()) / 1.5, max(p.max(), m.max()) * 1.5
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured ms / call",
           ylabel="predicted ms / call", title=f"{r['network']} (batch {r['batch_size']}): predicted "
           f"{r['predicted_s'] * 1e3:.4g} ms\nmeasured {r['measured_s'] * 1e3:.4g} ms")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)
