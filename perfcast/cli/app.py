"""The `perfcast` command: wiring only; every command parses its arguments and calls a library function."""

from __future__ import annotations

import typer

from ..errors import run_with_one_line_errors
from . import adapt_cmd, collect_cmd, context_cmd, data_cmd, devices_cmd, layerwise_cmd, model_cmd, predict_cmd

app = typer.Typer(
    name="perfcast",
    help="Learned performance models for tensor programs, layers and whole networks (TVM).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
data_app = typer.Typer(help="Inspect and import perfcast datasets.", no_args_is_help=True)

app.command("collect", help=collect_cmd.HELP, epilog=collect_cmd.EXAMPLE)(collect_cmd.collect)
app.command("calibrate", help=collect_cmd.CALIBRATE_HELP, epilog=collect_cmd.CALIBRATE_EXAMPLE)(collect_cmd.calibrate)
app.command("devices", help=devices_cmd.HELP, epilog=devices_cmd.EXAMPLE)(devices_cmd.devices)
data_app.command("summary", help=data_cmd.SUMMARY_HELP, epilog=data_cmd.SUMMARY_EXAMPLE)(data_cmd.summary)
data_app.command("import", help=data_cmd.IMPORT_HELP, epilog=data_cmd.IMPORT_EXAMPLE)(data_cmd.import_db)
data_app.command("merge", help=data_cmd.MERGE_HELP, epilog=data_cmd.MERGE_EXAMPLE)(data_cmd.merge)
data_app.command("compact", help=data_cmd.COMPACT_HELP, epilog=data_cmd.COMPACT_EXAMPLE)(data_cmd.compact)
data_app.command("features", help=data_cmd.FEATURES_HELP, epilog=data_cmd.FEATURES_EXAMPLE)(data_cmd.features)
app.add_typer(data_app, name="data")
app.command("predict", help=predict_cmd.HELP, epilog=predict_cmd.EXAMPLE)(predict_cmd.predict)
app.command("context", help=context_cmd.HELP, epilog=context_cmd.EXAMPLE)(context_cmd.context)
app.command("sweep", help=predict_cmd.SWEEP_HELP, epilog=predict_cmd.SWEEP_EXAMPLE)(predict_cmd.sweep)
app.command("tune", help=predict_cmd.TUNE_HELP, epilog=predict_cmd.TUNE_EXAMPLE)(predict_cmd.tune)
app.command("train", help=model_cmd.TRAIN_HELP, epilog=model_cmd.TRAIN_EXAMPLE)(model_cmd.train)
app.command("eval", help=model_cmd.EVAL_HELP, epilog=model_cmd.EVAL_EXAMPLE)(model_cmd.evaluate)
app.command("predict-records", help=model_cmd.PREDICT_HELP, epilog=model_cmd.PREDICT_EXAMPLE)(model_cmd.predict_records)
app.command("report", help=model_cmd.REPORT_HELP, epilog=model_cmd.REPORT_EXAMPLE)(model_cmd.report)
app.command("adapt", help=adapt_cmd.HELP, epilog=adapt_cmd.EXAMPLE)(adapt_cmd.adapt)
layerwise_app = typer.Typer(help="The layerwise paper's per (device, layer type, metric) models.", no_args_is_help=True)
layerwise_app.command("train", help=layerwise_cmd.TRAIN_HELP, epilog=layerwise_cmd.TRAIN_EXAMPLE)(layerwise_cmd.train)
layerwise_app.command("eval", help=layerwise_cmd.EVAL_HELP, epilog=layerwise_cmd.EVAL_EXAMPLE)(layerwise_cmd.evaluate)
app.add_typer(layerwise_app, name="layerwise")
app.command("hpo", help=model_cmd.HPO_HELP, epilog=model_cmd.HPO_EXAMPLE)(model_cmd.hpo)


def main() -> None:
    run_with_one_line_errors(app)


if __name__ == "__main__":
    main()
