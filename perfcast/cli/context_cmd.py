"""`perfcast context`: fit how much slower kernels run inside a network than alone (library: perfcast.e2e.context)."""

from __future__ import annotations

import json
from typing import List, Optional

import typer

HELP = ("Time every kernel of the given networks alone (as the collector times programs) and inside the compiled "
        "network, at the same sitting, and fit this device's in-network context: in-network time = scale x alone + "
        "bytes / bandwidth, plus a dispatch gap per call. `perfcast predict` applies the fit (--context). Measures: "
        "keep the machine quiet; about a minute per network.")
EXAMPLE = ("Example: perfcast context resnet18 mlp resnet18@tuned:runs/r18-db --out my-context.json; "
           "perfcast predict resnet50 --context my-context.json --measure")


def context(
    networks: List[str] = typer.Argument(..., help="NETWORK or NETWORK@SCHEDULES (default, tuned:DB_DIR, "
                                          "random:SEED); a zoo name, FILE.onnx or file.py:factory"),
    out: str = typer.Option(..., help="context file to write (the fit is added under this device's key)"),
    device: str = typer.Option("local", help="device (this machine or a local:mcpu=...,threads=N variant)"),
    batch_size: int = typer.Option(1, help="batch size"),
    samples_out: Optional[str] = typer.Option(None, help="also write the measured kernels to this JSON file"),
    samples: Optional[str] = typer.Option(None, help="fit on kernels measured before (a --samples-out file) "
                                          "instead of measuring; NETWORKS select which of them (NETWORK: all its "
                                          "schedules)"),
    json_out: bool = typer.Option(False, "--json", help="print the fit as JSON"),
) -> None:
    from pathlib import Path

    from ..devices import get_device
    from ..devices.base import device_key
    from ..e2e.context import fit_context, measure_context, samples_from_json, samples_to_json, save_context

    spec = get_device(device)
    wanted = [n.partition("@")[::2] for n in networks]  # [(network, schedules or "")]
    if samples:
        from ..errors import PerfcastError

        try:
            got = samples_from_json(json.loads(Path(samples).read_text()))
        except (OSError, ValueError, TypeError) as e:
            raise PerfcastError(f"--samples {samples!r} is not a `perfcast context --samples-out` file ({e})") from None
        got = [s for s in got if any(s.network == n and sch in ("", s.schedules) for n, sch in wanted)]
    else:
        got = [s for n, sch in wanted for s in measure_context(n, sch or "default", device, batch_size)]
    if samples_out:
        Path(samples_out).write_text(json.dumps(samples_to_json(got), indent=1))
    fit = fit_context(got, device_key(spec))
    path = save_context(fit, out)
    if json_out:
        print(json.dumps({**fit.to_json(), "file": str(path)}))
        return
    print(f"{fit.device_key}: in-network = {fit.describe()}; fitted on {fit.kernels} kernels of "
          f"{', '.join(fit.networks)} (networks' totals within {fit.fit_error:.1%} on average); written to {path}")
