"""`perfcast layerwise train|eval`: the layerwise paper's per (device, layer type, metric) models
(library: perfcast.layerwise)."""

from __future__ import annotations

import json
from typing import List, Optional

import typer

TRAIN_HELP = ("Train layerwise models: per (device, layer type, metric) the regressor family (xgb, ert, knn, mlp, "
              "linear, svr) with the lowest K-fold cross-validated MAPE, on layers measured by `perfcast collect "
              "--network layers:CONFIGS.json` or a TVM_Profiling_Dataset-style CSV (latency, power, memory). "
              "Use the result with `perfcast predict --method layerwise --layerwise-model OUT`.")
TRAIN_EXAMPLE = ("Example: perfcast layerwise train --data runs/layers --data sample_measurements.csv "
                 "--out runs/layerwise")
EVAL_HELP = ("Held-out accuracy of layerwise models: per (device, layer type) 20 % of the layers are held out, "
             "families are selected and fitted on the rest, and MAPE is reported per metric, with energy as "
             "predicted latency x predicted power against the measured product.")
EVAL_EXAMPLE = "Example: perfcast layerwise eval --data ../shared/data/TVM_Profiling_Dataset/sample_measurements.csv"


def _table(data: list[str], keep_test_networks: bool = False):
    import pandas as pd

    from ..errors import PerfcastError
    from ..layerwise import load_table

    if not data:
        raise PerfcastError("no --data given; pass a dataset directory of measured layers or a layer CSV")
    return pd.concat([load_table(d, () if keep_test_networks else None) for d in data], ignore_index=True)


KEEP = typer.Option(False, "--keep-test-networks", help="also train on the layers of resnet50, mobilenet_v2 and "
                    "bert_tiny (left out by default so that they stay unseen, as for the cost model)")


def _families(text: Optional[str]):
    return tuple(f.strip() for f in text.split(",") if f.strip()) if text else None


def train(
    data: List[str] = typer.Option(..., help="dataset directory or layer CSV (repeatable)"),
    out: str = typer.Option(..., help="model directory (created)"),
    families: Optional[str] = typer.Option(None, help="candidate families, comma-separated (default: all six)"),
    folds: int = typer.Option(5, help="K of the K-fold model selection"),
    min_rows: int = typer.Option(100, help="smallest (device, layer type, metric) group that gets a model (smaller "
                                 "groups are left to the cost model)"),
    max_cv_mape: float = typer.Option(0.6, help="a group whose best CV MAPE is above this gets no model"),
    seed: int = typer.Option(0, help="seed of the folds and the random families"),
    keep_test_networks: bool = KEEP,
    json_out: bool = typer.Option(False, "--json", help="print the selection as JSON"),
) -> None:
    from ..layerwise import LayerwiseModel

    m = LayerwiseModel(_families(families), folds, min_rows, max_cv_mape, seed).fit(_table(data, keep_test_networks))
    path = m.save(out)
    rows = m.summary()
    if json_out:
        print(json.dumps({"path": str(path), "selection": rows}))
        return
    fams = list(rows[0]["cv_mape"])
    print(f"{folds}-fold CV MAPE of each family per (device, layer type, metric); * = chosen, - = best above "
          f"{max_cv_mape:.0%}: left to the cost model")
    print(f"{'device':40s} {'layer type':17s} {'metric':13s} {'rows':>5s} " + " ".join(f"{f:>8s}" for f in fams))
    for r in rows:
        mark = "*" if r["used"] else "-"
        cells = " ".join(f"{r['cv_mape'][f]:7.1%}" + (mark if f == r["family"] else " ") for f in fams)
        print(f"{r['device'][:40]:40s} {r['layer_type']:17s} {r['metric']:13s} {r['rows']:5d} {cells}")
    print(f"model: {path} (use it with perfcast predict --method layerwise --layerwise-model {path})")


def evaluate(
    data: List[str] = typer.Option(..., help="dataset directory or layer CSV (repeatable)"),
    families: Optional[str] = typer.Option(None, help="candidate families, comma-separated (default: all six)"),
    test_frac: float = typer.Option(0.2, help="share of each (device, layer type) held out"),
    min_rows: int = typer.Option(100, help="smallest group that gets a model"),
    seed: int = typer.Option(0, help="seed of the hold-out split and the families"),
    keep_test_networks: bool = KEEP,
    json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    from ..errors import PerfcastError
    from ..layerwise import holdout_eval

    if not 0 < test_frac < 1:
        raise PerfcastError(f"--test-frac {test_frac} must be between 0 and 1, e.g. 0.2")
    rows = holdout_eval(_table(data, keep_test_networks), {"families": _families(families), "min_rows": min_rows}, test_frac, seed)
    if json_out:
        print(json.dumps(rows))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"layerwise models on held-out layers ({test_frac:.0%} of each device and layer type)")
    for col in ("device", "layer type", "metric", "family", "train", "test", "MAPE", "median APE"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["device"][:40], r["layer_type"], r["metric"], r["family"], str(r["train_rows"]),
                  str(r["test_rows"]), f"{r['mape']:.1%}", f"{r['median_ape']:.1%}")
    Console().print(t)
