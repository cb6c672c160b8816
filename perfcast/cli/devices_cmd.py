from __future__ import annotations

import json

import typer

HELP = ("List the device registry: `local` (this machine, probed, with its code-generation variants "
        "local:mcpu=NAME,threads=N) and known remote devices with their specifications (CDMPP Table 2 fields).")
EXAMPLE = "Example: perfcast devices --json | perfcast devices --show local:mcpu=haswell,threads=1"


def devices(
    show: str = typer.Option(None, help="print the full specification of one device id"),
    json_out: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    from ..devices import list_device_specs, get_device

    specs = [get_device(show)] if show else list_device_specs()
    if json_out:
        print(json.dumps([json.loads(s.to_json()) for s in specs], indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title="perfcast devices")
    for col in ("id", "kind", "name", "threads", "clock MHz", "mem GB", "BW GB/s", "FP32 GFLOPS", "ISA / source"):
        t.add_column(col)

    def f(x, fmt="{:.0f}"):
        return "-" if x != x else fmt.format(x)

    for s in specs:
        t.add_row(s.device_id, s.kind, s.name, str(s.threads), f(s.clock_mhz), f(s.memory_gb, "{:.1f}"),
                  f(s.bandwidth_gbps), f(s.peak_fp32_gflops), " ".join(s.isa[-3:]) if s.isa else s.source[:30])
    Console().print(t)
