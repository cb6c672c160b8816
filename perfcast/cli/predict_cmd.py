"""`perfcast predict`: a network's latency on a device, kernel by kernel (library: perfcast.e2e)."""

from __future__ import annotations

import json
from typing import Optional

import typer

HELP = ("Predict a network's latency on a device from the bundled (or given) model: every fused kernel TVM's default "
        "pipeline compiles is predicted once and counted by its calls. --measure also compiles and times the whole "
        "network here (TVM VM time evaluator, median of repeats) and shows the error.")
EXAMPLE = "Example: perfcast predict resnet18 --batch-size 1 --device local --measure"


def predict(
    network: str = typer.Argument(..., help="zoo name, FILE.onnx or file.py:factory"),
    batch_size: int = typer.Option(1, help="batch size"),
    device: str = typer.Option("local", help="device id (see `perfcast devices`)"),
    model: Optional[str] = typer.Option(None, help="model directory (default: the bundled model)"),
    measure: bool = typer.Option(False, "--measure", help="also compile and time the network on this machine"),
    input_shape: Optional[str] = typer.Option(None, help="shapes of dynamic ONNX inputs, NAME:1x3x224x224"),
    top: int = typer.Option(15, help="kernels to show in the table"),
    json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    from ..e2e import predict_network

    r = predict_network(network, batch_size, device, model, measure, input_shape)
    if json_out:
        print(json.dumps(r))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{r['network']} (batch {r['batch_size']}) on {r['device']}: {len(r['kernels'])} kernels")
    t.add_column("kernel")
    t.add_column("calls", justify="right")
    t.add_column("predicted / call", justify="right")
    t.add_column("share", justify="right")
    for k in r["kernels"][:top]:
        t.add_row(k["name"][:48], str(k["calls"]), f"{k['predicted_s'] * 1e3:.4g} ms", f"{k['share']:.1%}")
    c = Console()
    c.print(t)
    c.print(f"[bold]predicted {r['predicted_s'] * 1e3:.4g} ms[/]")
    if "measured_s" in r:
        c.print(f"[bold]measured  {r['measured_s'] * 1e3:.4g} ms[/] (CV {r['measured_cv']:.1%}); "
                f"error {r['error']:+.1%}")
