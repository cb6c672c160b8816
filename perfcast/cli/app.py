"""The `perfcast` command: wiring only; every command parses its arguments and calls a library function."""

from __future__ import annotations

import os
import sys

import typer

from ..errors import PerfcastError
from . import collect_cmd, data_cmd, devices_cmd

app = typer.Typer(
    name="perfcast",
    help="Learned performance models for tensor programs, layers and whole networks (TVM).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
data_app = typer.Typer(help="Inspect and import perfcast datasets.", no_args_is_help=True)

app.command("collect", help=collect_cmd.HELP, epilog=collect_cmd.EXAMPLE)(collect_cmd.collect)
app.command("devices", help=devices_cmd.HELP, epilog=devices_cmd.EXAMPLE)(devices_cmd.devices)
data_app.command("summary", help=data_cmd.SUMMARY_HELP, epilog=data_cmd.SUMMARY_EXAMPLE)(data_cmd.summary)
data_app.command("import", help=data_cmd.IMPORT_HELP, epilog=data_cmd.IMPORT_EXAMPLE)(data_cmd.import_db)
app.add_typer(data_app, name="data")


def main() -> None:
    try:
        app()
    except PerfcastError as e:
        if os.environ.get("PERFCAST_DEBUG") == "1":
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
