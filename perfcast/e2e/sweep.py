"""Which device, which batch size: one network predicted over several batch sizes and devices.

A deployment engineer's question is rarely one prediction: it is how latency and throughput move with the batch size,
and which of a few devices serves best. `sweep_network` runs `predict_network` for every (device, batch size) with
one loaded model, and returns one row per pair: latency, latency per sample, throughput (samples / s), the 80 %
interval where the model has one for that device, the peak memory, and (with `measure`) the measured latency.
Per device it names the batch size with the highest predicted throughput and the others within `TIE_SHARE` of it
(which the model cannot tell apart), and over all rows the fastest device at each batch size.
"""

from __future__ import annotations

from ..errors import PerfcastError

# Batch sizes whose predicted throughput is within this share of the best one's are reported as not told apart:
# across the batch sizes of one network the model's error moved by 8-13 points (README, Which batch size, which
# device: resnet18 +1.6 to -9.4 %, bert_tiny -5.6 to +7.3 %, mobilenet_v2 0.0 to -7.6 % at batch 1-8, measured on
# the znver5 host on 2026-12-05).
TIE_SHARE = 0.10


def parse_batch_sizes(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8] (sorted, distinct); anything else is a one-line error naming the value."""
    try:
        sizes = sorted({int(s) for s in str(text).split(",") if s.strip()})
    except ValueError:
        sizes = []
    if not sizes or sizes[0] < 1:
        raise PerfcastError(f"--batch-sizes {text!r} is not a list of positive integers; "
                            "use e.g. --batch-sizes 1,2,4,8")
    return sizes


def sweep_network(network: str, batch_sizes, devices, model=None, schedules: str = "default",
                  input_shape: str | None = None, context: bool | str = True, calibrate: bool = False,
                  measure: bool = False, progress: bool = True) -> dict:
    """{"network", "rows": [...], "best_batch": {device: ...}, "fastest": {batch size: device}, "warnings": {...}}.

    Each row: device, batch_size, predicted_s, predicted_per_sample_s, samples_per_s, peak_mem_bytes, device_seen
    (False: the model has no measurement of the device and predicts it from device features only); where the model
    has an interval for the device predicted_low_s / predicted_high_s; with `schedules` other than "default"
    scheduled_kernels / untuned_kernels (a database tuned at batch 1 has no schedule for batch 4's kernels, which
    keep TVM's defaults: such rows compare tuned with untuned code); with `calibrate` the device's speed ratio
    (`perfcast calibrate`, measured once per device); with `measure` measured_s, measured_samples_per_s and error.
    `batch_sizes`: a list of positive ints or a string '1,2,4'; `devices`: device ids (`perfcast devices`)."""
    from ..devices import get_device, require_local
    from ..devices.base import device_key
    from ..eval.workflow import trained_on
    from ..models import load_model
    from .predict import predict_network

    sizes = parse_batch_sizes(",".join(map(str, batch_sizes)) if not isinstance(batch_sizes, str) else batch_sizes)
    devices = list(dict.fromkeys(devices or ["local"]))
    specs = {d: get_device(d) for d in devices}  # a bad id fails here, before any work
    if measure:  # a remote device fails before the local ones are measured, not after
        for spec in specs.values():
            require_local(spec, "--measure", "drop --measure or use --device local")
    m = model if hasattr(model, "predict") else load_model(model)
    seen = dict(zip(devices, trained_on(m, [device_key(specs[d]) for d in devices])))
    ratios, warnings = {}, {d: [] for d in devices}  # device -> distinct warning lines
    if calibrate:
        from ..collect.calibrate import schedule_reference_kinds, speed_ratio_or_note

        for d in devices:
            ratios[d], note = speed_ratio_or_note(d, model, schedule_reference_kinds(schedules))
            warnings[d] += [note] if note else []
    from rich.console import Console
    from rich.progress import track

    rows = []
    steps = [(d, b) for d in devices for b in sizes]
    for d, b in track(steps, description=f"predicting {len(steps)} (device, batch size) pairs", transient=True,
                      console=Console(stderr=True), disable=not progress):
        # a database tuned at other batch sizes has none of this pair's kernels: they keep TVM's defaults
        r = predict_network(network, b, d, m, measure, input_shape, schedules=schedules, speed_ratio=ratios.get(d),
                            context=context, allow_untuned=True)
        row = {"device": d, "batch_size": b, "predicted_s": r["predicted_s"],
               "predicted_per_sample_s": r["predicted_s"] / b, "samples_per_s": b / r["predicted_s"],
               "peak_mem_bytes": r["memory"]["peak_bytes"], "device_seen": bool(seen[d])}
        if r.get("interval"):
            row["predicted_low_s"], row["predicted_high_s"] = r["interval"]["low_s"], r["interval"]["high_s"]
        if "speed_ratio" in r:
            row["speed_ratio"] = r["speed_ratio"]
        if schedules != "default":  # a database tuned at one batch size has no schedule for another's kernels
            row.update(scheduled_kernels=r["scheduled_kernels"], untuned_kernels=r["untuned_kernels"])
        if measure:
            row.update(measured_s=r["measured_s"], measured_samples_per_s=b / r["measured_s"], error=r["error"])
        if r.get("warning") and r["warning"] not in warnings[d]:
            warnings[d].append(r["warning"])
        rows.append(row)
        label = r["network"]
    best = {}
    for d in devices:
        mine = [r for r in rows if r["device"] == d]
        top = max(mine, key=lambda r: r["samples_per_s"])
        best[d] = {"batch_size": top["batch_size"], "samples_per_s": top["samples_per_s"],
                   "within_tie_share": [r["batch_size"] for r in mine
                                        if r["samples_per_s"] >= (1 - TIE_SHARE) * top["samples_per_s"]]}
        if measure:
            real = max(mine, key=lambda r: r["measured_samples_per_s"])
            best[d].update(measured_batch_size=real["batch_size"],
                           measured_samples_per_s=real["measured_samples_per_s"])
    fastest = {b: min((r for r in rows if r["batch_size"] == b), key=lambda r: r["predicted_s"])["device"]
               for b in sizes}
    return {"network": label, "schedules": schedules, "batch_sizes": sizes, "devices": devices, "rows": rows,
            "best_batch": best, "fastest": fastest,
            "warnings": {d: "; ".join(w) for d, w in warnings.items() if w}}


def plot_sweep(result: dict, path) -> str:
    """Two panels against the batch size, one line per device: latency per sample and throughput (predicted: solid
    with the interval shaded where there is one, dashed for a device the model has no data of; measured: crosses)."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_l, ax_t) = plt.subplots(1, 2, figsize=(10, 4))
    for i, d in enumerate(result["devices"]):
        rows = [r for r in result["rows"] if r["device"] == d]
        b = [r["batch_size"] for r in rows]
        c, style = f"C{i}", "-o" if rows[0]["device_seen"] else "--o"
        name = f"{d} predicted" + ("" if rows[0]["device_seen"] else " (no data of it)")
        ax_l.plot(b, [1e3 * r["predicted_per_sample_s"] for r in rows], style, color=c, label=name)
        ax_t.plot(b, [r["samples_per_s"] for r in rows], style, color=c, label=name)
        if all("predicted_low_s" in r for r in rows):
            ax_l.fill_between(b, [1e3 * r["predicted_low_s"] / r["batch_size"] for r in rows],
                              [1e3 * r["predicted_high_s"] / r["batch_size"] for r in rows], color=c, alpha=0.15)
        if all("measured_s" in r for r in rows):
            ax_l.plot(b, [1e3 * r["measured_s"] / r["batch_size"] for r in rows], "x", color=c, ms=9,
                      label=f"{d} measured")
            ax_t.plot(b, [r["measured_samples_per_s"] for r in rows], "x", color=c, ms=9, label=f"{d} measured")
    for ax, what in ((ax_l, "ms per sample"), (ax_t, "samples / s")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(result["batch_sizes"], [str(b) for b in result["batch_sizes"]])
        ax.minorticks_off()
        ax.set(xlabel="batch size", ylabel=what)
        ax.set_ylim(bottom=0)  # from zero: a 5 % step should look like one
    ax_l.set_title(f"{result['network']}: latency per sample")
    ax_t.set_title("throughput")
    ax_t.legend(fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)
