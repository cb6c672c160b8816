"""`perfcast train / eval / predict-records / report / hpo`: argument parsing; the work is in perfcast.eval."""

from __future__ import annotations

import json
from typing import List, Optional

import typer

from ..errors import PerfcastError

TRAIN_HELP = ("Train a cost model on a perfcast dataset (default: the bundled one) with a named split; scores it on "
              "the split's test part and saves it to --out. Models: cdmpp (default), xgb, lgbm, mlp.")
TRAIN_EXAMPLE = ("Example: perfcast train --model cdmpp --split by_network --out runs/cdmpp "
                 "--param epochs=100 --param use_analytic=true; on the records a model had: perfcast train ... "
                 "--measured-before 2026-12-03T08:00")
EVAL_HELP = ("Evaluate a trained model (default: the bundled one) on the test part of a split of a dataset (default: "
             "the bundled one, with the split the model was trained with); --baseline trains that model on the same "
             "training part in the same run and reports it beside.")
EVAL_EXAMPLE = ("Example: perfcast eval --baseline xgb --baseline lgbm --json; only records timed under protocol 2: "
                "perfcast eval --eval-min-protocol 2")
PREDICT_HELP = ("Predict the latency of every program of a perfcast dataset or of a TVM meta-schedule JSON database "
                "(in get_all_tuning_records() order), with the measured latency where known.")
PREDICT_EXAMPLE = ("Example: perfcast predict-records work_dir/ --device local --json; scaled to this machine today: "
                   "perfcast predict-records work_dir/ --device local --calibrate")
REPORT_HELP = ("Write plots of a model's test predictions: predicted vs measured (log-log), error CDF, per-network "
               "MAPE (with --baseline models beside).")
REPORT_EXAMPLE = ("Example: perfcast report --baseline xgb --out runs/report; after `perfcast adapt --out runs/h1`: "
                  "perfcast report --adapted runs/h1 --out runs/h1")
HPO_HELP = ("Search the cdmpp architecture and hyper-parameters with Optuna on the split's validation part (never "
            "its test part); prints the best parameters to pass to `perfcast train --param`.")
HPO_EXAMPLE = "Example: perfcast hpo --trials 30 --epochs 40 --json"


def _parse_params(items: list[str] | None) -> dict:
    out = {}
    for it in items or []:
        if "=" not in it:
            raise PerfcastError(f"--param {it!r} is not KEY=VALUE; e.g. --param epochs=100")
        k, v = it.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def _table_rows(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    models = [k for k in result if isinstance(result[k], dict) and "overall" in result[k]]
    t = Table(title=f"test split {result['split']['name']} ({result['sizes']['test']} programs)")
    t.add_column("network")
    for m in models:
        t.add_column(f"{m} MAPE", justify="right")
    t.add_column("programs", justify="right")
    first = result[models[0]]
    for net in sorted(first["per_network"]):
        t.add_row(net, *[f"{result[m]['per_network'][net]['mape']:.1%}" for m in models],
                  str(first["per_network"][net]["n"]))
    for dev in sorted(first.get("per_device", {})) if len(first.get("per_device", {})) > 1 else []:
        t.add_row(f"[dim]device {dev}", *[f"{result[m]['per_device'][dev]['mape']:.1%}" for m in models],
                  str(first["per_device"][dev]["n"]))
    t.add_row("[bold]overall", *[f"[bold]{result[m]['overall']['mape']:.1%}" for m in models],
              str(first["overall"]["n"]))
    for key, label in (("acc_10", "±10 %"), ("acc_20", "±20 %"), ("kendall_tau", "Kendall τ"), ("top1", "top-1"),
                       ("top5", "top-5")):
        t.add_row(label, *[f"{result[m]['overall'].get(key, float('nan')):.3f}" for m in models], "")
    iv = {m: result[m]["interval"] for m in models if "interval" in result[m]}
    if iv:  # the model's prediction intervals (perfcast.eval.intervals) and how many test programs they held
        level = next(iter(iv.values()))["level"]
        t.add_row(f"{level:.0%} interval held", *[f"{iv[m]['coverage']:.3f}" if m in iv else "-" for m in models], "")
    Console().print(t)


def _public(result: dict) -> dict:
    return {k: v for k, v in result.items() if not k.startswith("_") and k != "estimator"}


def train(
    data: Optional[str] = typer.Option(None, help="dataset directory (default: the bundled dataset)"),
    model: str = typer.Option("cdmpp", help="cdmpp | xgb | lgbm | mlp | ensemble"),
    split: str = typer.Option("by_network", help="random | by_network | by_task | by_device"),
    test_networks: Optional[str] = typer.Option(None, help="by_network: comma-separated held-out networks"),
    test_device: Optional[str] = typer.Option(None, help="by_device: the held-out device"),
    out: str = typer.Option(..., help="directory to save the trained model to"),
    param: Optional[List[str]] = typer.Option(None, help="model parameter KEY=VALUE (repeatable)"),
    seed: int = typer.Option(0, help="seeds the split and the model"),
    default_weight: Optional[float] = typer.Option(None, help="loss weight of a TVM default kernel relative to a "
                                                              "random schedule (default 10; 1: all alike; more "
                                                              "favours whole networks compiled without tuning)"),
    searched_weight: Optional[float] = typer.Option(None, help="loss weight of a program a meta-schedule search "
                                                               "found (records imported from tuning databases) "
                                                               "relative to a random schedule (default 1; 5 put "
                                                               "held-out searches' programs further off: README)"),
    min_protocol: int = typer.Option(0, help="use only records timed under this measurement protocol or newer "
                                             "(2: launcher pinned, best of 3 rounds; see `perfcast data summary`)"),
    eval_min_protocol: int = typer.Option(0, help="by_network: train on every record but validate and test on "
                                                  "records of this protocol or newer only"),
    measured_before: Optional[str] = typer.Option(None, help="use only records measured before this UTC time "
                                                            "(ISO 8601, e.g. 2026-12-03T08:00): retrains on a "
                                                            "model's data, whose latest time its model.json keeps "
                                                            "as info.measured_through"),
    json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    from ..eval.workflow import train as run

    sp = {k: v for k, v in (("test_networks", test_networks), ("test_device", test_device),
                            ("eval_min_protocol", eval_min_protocol)) if v}
    r = run(data, model, split, out, _parse_params(param), sp, seed, progress=not json_out,
            default_weight=default_weight, min_protocol=min_protocol, searched_weight=searched_weight,
            measured_before=measured_before)
    res = {**_public(r), model: r["test"]}
    res.pop("test")
    if json_out:
        print(json.dumps(res, default=float))
        return
    _table_rows({**res, "split": r["split"], "sizes": r["sizes"]})
    print(f"saved to {r['path']}")


def evaluate(
    model: Optional[str] = typer.Option(None, help="model directory (default: the bundled model)"),
    data: Optional[str] = typer.Option(None, help="dataset directory (default: the bundled dataset)"),
    split: Optional[str] = typer.Option(None, help="split (default: the one the model was trained with)"),
    test_networks: Optional[str] = typer.Option(None, help="by_network: comma-separated held-out networks"),
    baseline: Optional[List[str]] = typer.Option(None, help="also train this model on the same split (repeatable)"),
    seed: Optional[int] = typer.Option(None, help="split seed (default: the model's)"),
    eval_min_protocol: Optional[int] = typer.Option(None, help="by_network: score only test records of this "
                                                               "measurement protocol or newer (0: all; default: "
                                                               "the model's)"),
    measured_before: Optional[str] = typer.Option(None, help="use only records measured before this UTC time "
                                                            "(ISO 8601), or 'all' (default: the model's own "
                                                            "--measured-before, else all)"),
    json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    from ..eval.workflow import evaluate as run

    sp = {"test_networks": test_networks} if test_networks else None
    r = run(model, data, split, sp, tuple(baseline or ()), seed, progress=not json_out,
            eval_min_protocol=eval_min_protocol, measured_before=measured_before)
    if json_out:
        print(json.dumps(_public(r), default=float))
    else:
        _table_rows(r)


def predict_records(
    path: str = typer.Argument(..., help="a perfcast dataset or a TVM meta-schedule JSON database directory"),
    model: Optional[str] = typer.Option(None, help="model directory (default: the bundled model)"),
    device: str = typer.Option("local", help="device a database's programs run on (a dataset's records are "
                               "predicted on the device each was measured on)"),
    limit: int = typer.Option(40, help="table rows to show (the summary line covers all)"),
    calibrate: bool = typer.Option(False, "--calibrate", help="first time 40 stored programs of the device now "
                                   "(`perfcast calibrate`, ~30 s) and scale the device's predictions by how much "
                                   "slower or faster the machine is today than when its records were measured (in "
                                   "a dataset: only the records of --device)"),
    json_out: bool = typer.Option(False, "--json", help="print a JSON list"),
) -> None:
    from rich.console import Console

    from ..eval.workflow import predict_records as run

    ratio, note = None, None
    if calibrate:
        from ..collect.calibrate import speed_ratio_or_note
        from ..eval.workflow import check_calibratable

        check_calibratable(path, device)  # a dataset without the device's records: say so before measuring
        ratio, note = speed_ratio_or_note(device, model)
    from ..eval.coverage import recompute_warning, unseen_warning

    rows = run(path, model, device, speed_ratio=ratio)
    said = [f"speed ratio {ratio:.3f} applied (this machine today / its records)." if ratio is not None else "",
            note or ""]
    if any(said):  # on stderr, as written (no rich markup): stdout stays the JSON list
        Console(stderr=True).print(" ".join(x for x in said if x), markup=False)
    for warning in (unseen_warning([r.get("unseen_dtypes", []) for r in rows]),
                    recompute_warning([r.get("recomputes", 0.0) for r in rows])):
        if warning:
            Console(stderr=True).print(f"warning: {warning}", markup=False, soft_wrap=True)
    if json_out:
        print(json.dumps(rows))
        return
    from rich.table import Table

    t = Table(title=f"{len(rows)} programs")
    t.add_column("#", justify="right")
    t.add_column("task")
    t.add_column("predicted", justify="right")
    has_interval = any("predicted_low_s" in r for r in rows)
    if has_interval:
        t.add_column("interval", justify="right")
    t.add_column("measured", justify="right")
    t.add_column("error", justify="right")
    for i, r in enumerate(rows[:limit]):
        m = r.get("measured_s")
        iv = ([f"{r['predicted_low_s'] * 1e3:.3g}–{r['predicted_high_s'] * 1e3:.3g} ms" if "predicted_low_s" in r
               else "recomputes" if "recomputes" in r else "-"] if has_interval else [])
        t.add_row(str(i), r.get("task_name", ""), f"{r['predicted_s'] * 1e3:.4g} ms", *iv,
                  f"{m * 1e3:.4g} ms" if m else "-", f"{(r['predicted_s'] - m) / m:+.1%}" if m else "-")
    console = Console()
    console.print(t)
    known = [r for r in rows if r.get("measured_s")]
    if known:
        import numpy as np
        from scipy.stats import kendalltau

        p, m = np.array([(r["predicted_s"], r["measured_s"]) for r in known]).T
        err = np.abs(p - m) / m
        tau = kendalltau(p, m).statistic if len(known) > 1 else float("nan")
        held = [r["predicted_low_s"] <= r["measured_s"] <= r["predicted_high_s"] for r in known
                if "predicted_low_s" in r]
        inside = f", inside the model's interval {np.mean(held):.0%}" if held else ""
        console.print(f"{len(known)} measured programs: MAPE {err.mean():.1%}, median error {np.median(err):.1%}, "
                      f"within ±20 % {np.mean(err <= 0.2):.0%}, Kendall τ {tau:.2f}{inside}")


def report(
    model: Optional[str] = typer.Option(None, help="model directory (default: the bundled model)"),
    data: Optional[str] = typer.Option(None, help="dataset directory (default: the bundled dataset)"),
    split: Optional[str] = typer.Option(None, help="split (default: the one the model was trained with)"),
    baseline: Optional[List[str]] = typer.Option(None, help="also plot this baseline (repeatable)"),
    out: str = typer.Option("perfcast-report", help="directory for the PNG files"),
    adapted: Optional[str] = typer.Option(None, help="an adapted model (perfcast adapt --out DIR): plot the latents "
                                          "of source and target programs before and after adaptation (PCA)"),
) -> None:
    from ..eval.report import write_report
    from ..eval.workflow import evaluate as run

    if adapted is not None:
        from ..adapt.workflow import latent_report

        path, dist = latent_report(adapted, data, out)
        print(f"{path} (CMD between source and target latents: " +
              ", ".join(f"{k} {v:.3f}" for k, v in dist.items()) + ")")
        return

    r = run(model, data, split, None, tuple(baseline or ()), None)
    for f in write_report(r, out):
        print(f)


def hpo(
    data: Optional[str] = typer.Option(None, help="dataset directory (default: the bundled dataset)"),
    trials: int = typer.Option(20, help="Optuna trials"),
    epochs: int = typer.Option(60, help="training epochs per trial (early stopping applies)"),
    split: str = typer.Option("by_network", help="split whose validation part scores the trials"),
    timeout: Optional[float] = typer.Option(None, help="stop after this many seconds"),
    seed: int = typer.Option(0, help="seeds the split, the sampler and the models"),
    json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    from ..eval.hpo import search

    r = search(data, trials, split, seed, epochs, timeout, progress=not json_out)
    if json_out:
        print(json.dumps(r))
        return
    print(f"best validation MAPE {r['best_val_mape']:.1%} with")
    print(" ".join(f"--param {k}={json.dumps(v)}" for k, v in r["best_params"].items()))
