"""`perfcast predict`: a network's latency on a device, kernel by kernel (library: perfcast.e2e)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from ..e2e.selection import SELECTION_SIGMA  # numpy only: cheap at CLI start

HELP = ("Predict a network's latency on a device from the bundled (or given) model: every fused kernel TVM's default "
        "pipeline compiles is predicted once and counted by its calls. --measure also compiles and times the whole "
        "network here (TVM VM time evaluator, median of repeats) and shows the error.")
EXAMPLE = ("Example: perfcast predict resnet18 --batch-size 1 --device local --calibrate --measure --plot r18.png; "
           "perfcast predict resnet50 --method layerwise --measure; "
           "perfcast predict resnet50 --schedules tuned:my-db --measure")


def _context_option(context: str):
    """--context auto | none | FILE -> predict_network's `context` (True, False or the file)."""
    return {"auto": True, "none": False}.get(context, context)


def predict(
    network: str = typer.Argument(..., help="zoo name, FILE.onnx or file.py:factory"),
    batch_size: int = typer.Option(1, help="batch size"),
    device: str = typer.Option("local", help="device id (see `perfcast devices`)"),
    model: Optional[str] = typer.Option(None, help="model directory (default: the bundled model)"),
    schedules: str = typer.Option("default", help="default (TVM's default kernels), tuned:DB_DIR (a meta-schedule "
                                  "JSON database) or random:SEED (one random schedule per task)"),
    method: str = typer.Option("kernel", help="kernel (every kernel by the cost model) or layerwise (conv2d, dense "
                               "and pooling kernels by the layerwise paper's per-layer-type regressors, the rest by "
                               "the cost model; default schedules only)"),
    layerwise_model: Optional[str] = typer.Option(None, help="with --method layerwise: a model from `perfcast "
                                                  "layerwise train` (default: the bundled one)"),
    measure: bool = typer.Option(False, "--measure", help="also compile and time the network on this machine"),
    calibrate: bool = typer.Option(False, "--calibrate", help="first time 40 stored programs of the device now "
                                   "(`perfcast calibrate`, ~20 s) and scale the predictions by how much slower or "
                                   "faster the machine is today than when they were measured (a CPU without records: "
                                   "predicted uncalibrated, with a warning)"),
    context: str = typer.Option("auto", help="auto: apply this device's in-network context fit from the bundled "
                                "file when it has one (kernels run slower inside a network than alone; see `perfcast "
                                "context`); none: sum the kernels' times alone; or a context file"),
    selection_sigma: Optional[float] = typer.Option(None, help="tuned:DB only: predict each tuned kernel as the "
                                                    "fastest of the candidates the search measured, with this "
                                                    "log-normal model error (default: the model's fitted sigma, "
                                                    f"else {SELECTION_SIGMA}; 0: the kept "
                                                    "program alone, which the search's choice biases high)"),
    input_shape: Optional[str] = typer.Option(None, help="shapes of dynamic ONNX inputs, NAME:1x3x224x224"),
    top: int = typer.Option(15, help="kernels to show in the table"),
    plot: Optional[str] = typer.Option(None, help="with --measure: write predicted vs measured per kernel to this PNG"),
    json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    from ..e2e import predict_network

    from ..errors import PerfcastError

    if plot and not measure:
        raise PerfcastError(f"--plot {plot} draws predicted vs measured kernels; add --measure")
    ratio, calibration_note = None, None
    if calibrate:
        from ..collect.calibrate import schedule_reference_kinds, speed_ratio_or_note

        ratio, calibration_note = speed_ratio_or_note(device, model, schedule_reference_kinds(schedules))
    r = predict_network(network, batch_size, device, model, measure, input_shape, schedules=schedules,
                        method=method, layerwise_model=layerwise_model, speed_ratio=ratio,
                        context=_context_option(context),
                        selection_sigma=selection_sigma)
    if calibration_note:
        r["warning"] = f"{r['warning']}; {calibration_note}" if r.get("warning") else calibration_note
    if plot:
        from ..e2e.predict import plot_kernels

        r["plot"] = plot_kernels(r, plot)
    if json_out:
        print(json.dumps(r))
        return
    from rich.console import Console
    from rich.table import Table

    sched = r["schedules"] if r["schedules"] == "default" else (
        f"{r['schedules']}: {r['scheduled_kernels']} kernels scheduled, {r['untuned_kernels']} default")
    t = Table(title=f"{r['network']} (batch {r['batch_size']}) on {r['device']}: {len(r['kernels'])} kernels; "
                    f"schedules {sched}")
    t.add_column("kernel")
    t.add_column("calls", justify="right")
    t.add_column("predicted / call", justify="right")
    t.add_column("share", justify="right")
    lw = r.get("layerwise")
    if lw:
        t.add_column("by")
    measured = "measured_s" in r
    if measured:
        t.add_column("measured / call", justify="right")
        t.add_column("measured / predicted", justify="right")
    for k in r["kernels"][:top]:
        row = [k["name"][:48], str(k["calls"]), f"{k['predicted_s'] * 1e3:.4g} ms", f"{k['share']:.1%}"]
        if lw:
            row.append(k["method"])
        if measured:
            row += [f"{k['measured_s'] * 1e3:.4g} ms", f"{k['ratio']:.2f}"] if "measured_s" in k else ["-", "-"]
        t.add_row(*row)
    c = Console()
    c.print(t)
    if r.get("warning"):
        Console(stderr=True).print(f"[yellow]warning:[/] {r['warning']}", soft_wrap=True)
    c.print(f"[bold]predicted {r['predicted_s'] * 1e3:.4g} ms[/]" + (
        f" (x{r['speed_ratio']:.3f}: this machine today vs its records; uncalibrated "
        f"{r['uncalibrated_predicted_s'] * 1e3:.4g} ms)" if "speed_ratio" in r else ""))
    if r.get("interval"):
        iv = r["interval"]
        on = {"validation": "its validation programs"}.get(iv.get("fitted_on", "validation"), iv.get("fitted_on"))
        c.print(f"{iv['level']:.0%} interval {iv['low_s'] * 1e3:.4g} – {iv['high_s'] * 1e3:.4g} ms (every kernel at "
                f"the bounds of the model's errors on {on})")
    if r["context"]:
        c.print(f"in-network context of {r['context']['device_key']}: {r['context']['formula']} (the kernels' "
                f"predictions alone: {r['isolated_predicted_s'] * 1e3:.4g} ms; --context none)")
    sel = r.get("selection")
    if sel and sel["kernels"]:
        c.print(f"selection: {sel['kernels']} tuned kernels predicted as the fastest of their search's candidates "
                f"(sigma {sel['sigma']:g}); from the kept programs' own predictions: "
                f"{sel['kept_predicted_s'] * 1e3:.4g} ms (--selection-sigma 0)")
    if lw:
        c.print(f"layerwise: {lw['kernels']} conv2d/dense/pooling kernels, {lw['share']:.1%} of the predicted time "
                f"({lw['layers_s'] * 1e3:.4g} ms, the paper's sum of layers); the rest from the {r['model']} model")
        if "energy_j" in lw:
            c.print(f"energy of the layers: {lw['energy_j'] * 1e3:.4g} mJ (E = sum T x P)")
        elif lw.get("energy_note"):
            c.print(lw["energy_note"])
    mem = r["memory"]
    mib = 2 ** 20
    line = (f"memory: peak {mem['peak_bytes'] / mib:.1f} MiB (weights {mem['weights_bytes'] / mib:.1f}, inputs "
            f"{mem['input_bytes'] / mib:.2f}, live intermediates at most {mem['peak_intermediate_bytes'] / mib:.1f} "
            f"during {mem['peak_kernel']})")
    if "measured_bytes" in mem:
        line += f"; the VM allocated {mem['measured_bytes'] / mib:.1f} MiB"
    c.print(line + f"; layerwise-paper estimators: two largest layers {mem['two_largest_bytes'] / mib:.1f} MiB, "
            f"2x mean layer {mem['twice_mean_bytes'] / mib:.1f} MiB")
    if measured:
        c.print(f"[bold]measured  {r['measured_s'] * 1e3:.4g} ms[/] (CV {r['measured_cv']:.1%}); "
                f"error {r['error']:+.1%}; kernels timed one by one sum to {r['measured_kernels_sum_s'] * 1e3:.4g} ms")
        if (r.get("measured_host_gate") or {}).get("retimed"):
            from ..collect.sentinel import summary

            c.print(f"[yellow]the host ran slow[/] (other tenants of its cores): {summary(r['measured_host_gate'])}")
        if r["outliers"]:
            c.print(f"kernels slower than predicted (measured >= 1.5x; tune these first, by time lost per run):")
            for o in r["outliers"][:5]:
                c.print(f"  {o['name']}: {o['ratio']:.1f}x, {o['excess_s'] * 1e3:.3g} ms lost")
        else:
            c.print("no kernel is much slower than predicted (measured < 1.5x the prediction)")
    if plot:
        c.print(f"plot: {r['plot']}")


TUNE_HELP = ("Tune every task of a network with TVM meta-schedule on this machine (evolutionary search, real "
             "measurements) into a JSON database, for `perfcast predict --schedules tuned:DB_DIR`. Candidates are "
             "built in a child process with a 60 s timeout (a hanging build fails that candidate only). The database "
             "gets its records as the search joins each task's measurements: a tuner stopped early may leave few. "
             "--cost-model perfcast steers the search with a pre-trained perfcast model instead of TVM's XGBoost; "
             "perfcast-online also corrects it per task from the search's measurements (`bench/search.py` compares "
             "them).")
TUNE_EXAMPLE = ("Example: perfcast tune mlp --trials 48 --out runs/mlp-db; perfcast tune resnet18 --trials 432 "
                "--cost-model perfcast --out runs/r18-db")


def tune(
    network: str = typer.Argument(..., help="zoo name, FILE.onnx or file.py:factory"),
    out: str = typer.Option(..., help="database directory (created)"),
    trials: int = typer.Option(64, help="measurement trials over all tasks (16 per task and round)"),
    batch_size: int = typer.Option(1, help="batch size"),
    device: str = typer.Option("local", help="local or a local:mcpu=...,threads=N variant"),
    input_shape: Optional[str] = typer.Option(None, help="shapes of dynamic ONNX inputs, NAME:1x3x224x224"),
    cost_model: str = typer.Option("xgb", help="what steers the search: xgb (TVM's XGBoost, learns from the "
                                   "search's measurements), perfcast (a pre-trained perfcast model, --model), "
                                   "perfcast-online (the same, corrected per task from the measurements) or random"),
    model: Optional[str] = typer.Option(None, help="with --cost-model perfcast[-online]: a model directory (default: "
                                        "the bundled search model, no assembly features, ~70 candidates per second; "
                                        "a model that reads assembly needs ~0.7 s per candidate)"),
    json_out: bool = typer.Option(False, "--json", help="print the database and the cost model's figures as JSON"),
) -> None:
    from ..e2e.schedules import tune_network
    from ..search import search_cost_model

    cm = search_cost_model(cost_model, model, device)
    if getattr(getattr(cm, "model", None), "needs_asm", False):
        from rich.console import Console

        Console(stderr=True).print(f"[yellow]warning:[/] model {model!r} reads assembly features: every candidate "
                                   "is built with LLVM first, ~0.7 s each (~30 min per round of ~2,500); the bundled "
                                   "search model (leave out --model) scores one in ~15 ms", soft_wrap=True)
    db = tune_network(network, out, trials, device, batch_size, input_shape, cost_model=cm)
    stats = getattr(cm, "stats", None)
    if json_out:
        print(json.dumps({"database": db, "cost_model": cost_model,
                          "cost_model_stats": stats.summary() if stats else None}))
        return
    print(f"database: {db}")
    if stats:
        print(stats.describe())


SWEEP_HELP = ("Which batch size, which device: predict a network at several batch sizes on one or more devices (one "
              "model, loaded once) and print latency, latency per sample, throughput and peak memory per pair, the "
              "batch size with the highest predicted throughput per device and the fastest device per batch size. "
              "--measure also compiles and times every pair on this machine; --plot draws latency per sample and "
              "throughput against the batch size.")
SWEEP_EXAMPLE = ("Example: perfcast sweep resnet18 --batch-sizes 1,2,4,8 --device local --measure "
                 "--plot r18-sweep.png; perfcast sweep bert_tiny --batch-sizes 1,4,16 --device local "
                 "--device 'local:mcpu=haswell,threads=1'")


def sweep(
    network: str = typer.Argument(..., help="zoo name, FILE.onnx or file.py:factory"),
    batch_sizes: str = typer.Option("1,2,4,8", help="comma-separated batch sizes"),
    device: list[str] = typer.Option(["local"], help="device id (see `perfcast devices`); repeat the option to "
                                     "compare devices"),
    model: Optional[str] = typer.Option(None, help="model directory (default: the bundled model)"),
    schedules: str = typer.Option("default", help="default, tuned:DB_DIR or random:SEED (as `perfcast predict`)"),
    calibrate: bool = typer.Option(False, "--calibrate", help="scale each device's predictions by how fast it runs "
                                   "today (`perfcast calibrate`, ~20 s per device)"),
    context: str = typer.Option("auto", help="auto, none or a context file (as `perfcast predict`)"),
    measure: bool = typer.Option(False, "--measure", help="also compile and time every (device, batch size) here"),
    input_shape: Optional[str] = typer.Option(None, help="shapes of dynamic ONNX inputs, NAME:1x3x224x224"),
    plot: Optional[str] = typer.Option(None, help="write latency per sample and throughput vs batch size to this PNG"),
    json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    from ..e2e.sweep import TIE_SHARE, plot_sweep, sweep_network

    r = sweep_network(network, batch_sizes, device, model, schedules, input_shape,
                      context=_context_option(context), calibrate=calibrate,
                      measure=measure, progress=not json_out)
    if plot:
        r["plot"] = plot_sweep(r, plot)
    if json_out:
        print(json.dumps(r))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{r['network']}: schedules {r['schedules']}")
    for col in ("device", "batch", "latency", "per sample", "samples / s", "80 % interval", "peak memory"):
        t.add_column(col, justify="left" if col == "device" else "right")
    if measure:
        for col in ("measured", "measured samples / s", "error"):
            t.add_column(col, justify="right")
    for row in r["rows"]:
        iv = (f"{row['predicted_low_s'] * 1e3:.4g} – {row['predicted_high_s'] * 1e3:.4g} ms"
              if "predicted_low_s" in row else "-")
        cells = [row["device"], str(row["batch_size"]), f"{row['predicted_s'] * 1e3:.4g} ms",
                 f"{row['predicted_per_sample_s'] * 1e3:.4g} ms", f"{row['samples_per_s']:.4g}", iv,
                 f"{row['peak_mem_bytes'] / 2 ** 20:.1f} MiB"]
        if measure:
            cells += [f"{row['measured_s'] * 1e3:.4g} ms", f"{row['measured_samples_per_s']:.4g}",
                      f"{row['error']:+.1%}"]
        t.add_row(*cells)
    c = Console()
    c.print(t)
    for d, b in r["best_batch"].items():
        line = f"{d}: highest predicted throughput at batch {b['batch_size']} ({b['samples_per_s']:.4g} samples/s)"
        tied = [x for x in b["within_tie_share"] if x != b["batch_size"]]
        if tied:
            line += (f"; batch {', '.join(map(str, tied))} within {TIE_SHARE:.0%} of it, which the model does not "
                     "tell apart")
        if measure:
            line += (f"; measured: batch {b['measured_batch_size']} ({b['measured_samples_per_s']:.4g} samples/s)")
        c.print(line)
    if len(r["devices"]) > 1:
        c.print("fastest device per batch size: " + ", ".join(f"{b}: {d}" for b, d in r["fastest"].items()))
    for d, w in r["warnings"].items():
        Console(stderr=True).print(f"[yellow]warning ({d}):[/] {w}", soft_wrap=True)
    mixed = [f"{x['device']} batch {x['batch_size']}: {x['untuned_kernels']} of "
             f"{x['scheduled_kernels'] + x['untuned_kernels']}" for x in r["rows"] if x.get("untuned_kernels")]
    if mixed:
        Console(stderr=True).print(f"[yellow]warning:[/] {r['schedules']} has no schedule for some kernels, which "
                                   f"keep TVM's default code ({'; '.join(mixed)}): those rows compare tuned with "
                                   "untuned kernels; tune at that batch size (`perfcast tune --batch-size N`)",
                                   soft_wrap=True)
    if plot:
        c.print(f"plot: {r['plot']}")
