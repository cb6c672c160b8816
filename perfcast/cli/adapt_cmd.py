from __future__ import annotations

import json
from typing import List, Optional

import typer

HELP = ("Calibrate a trained cost model to a device with a few measured tasks: pick K tasks (kmeans: CDMPP "
        "Algorithm 1, or random), measure their programs on the device with the collector (records the dataset "
        "already holds are reused), adapt the model (cmd: CDMPP, finetune, mtl: Pruner's momentum transfer, "
        "lottery: Moses, proxy: the source device the target behaves most like, times a factor, then optionally "
        "one of the others with --param then=cmd), save it, and report the error on the device's other records "
        "before and after.")
EXAMPLE = ("Example: perfcast adapt --device local:mcpu=haswell,threads=1 --budget-tasks 20 --sampler kmeans "
           "--method cmd --out runs/haswell1")


def adapt(
    device: str = typer.Option(..., help="target device id, e.g. local:mcpu=x86-64,threads=1 (see `perfcast devices`)"),
    model: Optional[str] = typer.Option(None, help="base model directory (default: the bundled model)"),
    data: Optional[str] = typer.Option(None, help="dataset of tasks and source records (default: the bundled one)"),
    budget_tasks: int = typer.Option(20, help="tasks to measure on the target (K; CDMPP saturates near 50)"),
    sampler: str = typer.Option("kmeans", help="kmeans | random"),
    method: str = typer.Option("cmd", help="cmd | finetune | mtl | lottery | proxy (with --param then=METHOD)"),
    programs_per_task: int = typer.Option(8, help="programs measured per chosen task"),
    until_certain: bool = typer.Option(False, "--until-certain",
                                       help="Moses' adaptive controller: measure in rounds, stop once the error is stable"),
    round_tasks: int = typer.Option(5, help="tasks per round with --until-certain"),
    out: Optional[str] = typer.Option(None, help="directory for the adapted model (its measurements go to OUT/measurements)"),
    measure_out: Optional[str] = typer.Option(None, help="dataset directory for the new measurements"),
    seed: int = typer.Option(0, help="seed of the sampler and the adaptation"),
    param: Optional[List[str]] = typer.Option(None, help="method parameter KEY=VALUE, e.g. epochs=60 (repeatable)"),
    json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    from ..adapt.workflow import AdaptConfig, run
    from .model_cmd import _parse_params

    cfg = AdaptConfig(device=device, model=model, data=data, budget_tasks=budget_tasks, sampler=sampler,
                      method=method, programs_per_task=programs_per_task, seed=seed, until_certain=until_certain,
                      round_tasks=round_tasks, out=out, measure_out=measure_out, params=_parse_params(param))
    r = run(cfg, log=(lambda m: None) if json_out else print, progress=not json_out)
    if json_out:
        print(json.dumps(r))
        return

    def pct(x):
        return "n/a (the dataset has no other records of this device)" if x is None else f"{x:.1%}"

    print(f"{r['method']} on {r['n_tasks']} tasks ({r['sampler']}), {r['programs']} programs of {r['device']} "
          f"({r['reused_records']} reused from the dataset"
          + (f", {r['resumed_records']} measured by an earlier run into the same directory" if r["resumed_records"]
             else "") + f"), measuring time {r['measure_seconds']:.0f} s")
    if r["proxy"]:
        p = r["proxy"]
        then = f", then {p['then']}" if p["then"] != "none" else ""
        print(f"predicted as {p['device_key']} x {p['scale']:.3f}{then}")
    print(f"MAPE on {r['held_out_records']} other records of the device: before {pct(r['mape_before'])}, "
          f"after {pct(r['mape_after'])}")
    iv = r.get("interval")
    if iv:
        print(f"{iv['level']:.0%} prediction interval x{iv['all'][0]:.2f} - x{iv['all'][1]:.2f} ({iv['fitted_on']})")
    if r["path"]:
        print(f"adapted model: {r['path']} (use it with --model {r['path']})")
