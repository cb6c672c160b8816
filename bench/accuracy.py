"""Cross-model accuracy on the bundled dataset: the predictor (`ensemble`, the bundled model's kind, and `cdmpp`
alone) against the `xgb`, `lgbm` and `mlp` baselines, all trained on the same training part of the same split in
this process, scored on the same held-out programs.

    python bench/accuracy.py [--data DIR] [--split by_network] [--seed 0] [--param KEY=VALUE ...] [--models LIST]
                             [--min-protocol P] [--eval-min-protocol P] [--device D] [--measured-before TIME]
                             [--cmd-alpha A] [--json]

`--models` is a comma-separated list of columns, each a model name with optional parameters
(`xgb:target_scale=work`); `--param` sets parameters of the `cdmpp` column. `default_weight=W` in a column spec
is not a model parameter but the training option of `perfcast train --default-weight` (TVM default kernels weigh W
times a random schedule in the loss; default 10, as for the bundled model): `ensemble:default_weight=1`. A column
`cdmpp+cmd` is CDMPP's cross-model setting, in which the held-out networks' programs (not their latencies) are known
during training and the latents of training and held-out programs are aligned by CMD (`--cmd-alpha`); any neural
column takes the suffix (`mlp+cmd:use_asm=true`). `--measured-before TIME` trains and scores on the records
measured before it only, as `perfcast train --measured-before` (the bundled model's data: 2026-12-03T08:00).

With `by_network` the test programs are those of resnet50, mobilenet_v2 and bert_tiny's tasks, none of which (nor
any task they share with other networks) reaches training. Prints a per-network MAPE table, the overall MAPE,
±10/20 % accuracy, Kendall τ and top-1/top-5 scores per column, and the first column's MAPE as a ratio of each
other column's.
"""

from __future__ import annotations

import argparse
import json
import time

MODELS = "ensemble,cdmpp,mlp,xgb,lgbm"


def column(spec: str, cdmpp_params: dict) -> tuple[str, dict, bool, float | None]:
    """(model, parameters, transductive, default weight or None) of a column spec `NAME[:KEY=VALUE...]` or
    `cdmpp+cmd`."""
    from perfcast.cli.model_cmd import _parse_params

    name, *kvs = spec.split(":")
    model = name.split("+")[0]
    params = dict(cdmpp_params) if model == "cdmpp" else {}
    params.update(_parse_params(kvs))
    weight = params.pop("default_weight", None)
    return model, params, name.endswith("+cmd"), None if weight is None else float(weight)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="dataset directory (default: bundled)")
    ap.add_argument("--split", default="by_network")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--param", action="append", default=[], help="cdmpp parameter KEY=VALUE")
    ap.add_argument("--models", default=MODELS, help=f"columns (default {MODELS})")
    ap.add_argument("--cmd-alpha", type=float, default=0.1, help="CMD weight of the cdmpp+cmd variant")
    ap.add_argument("--min-protocol", type=int, default=0,
                    help="only records timed under this measurement protocol or newer (2: see the README)")
    ap.add_argument("--device", default=None, help="only this device's records (id or device key)")
    ap.add_argument("--eval-min-protocol", type=int, default=0,
                    help="by_network: train on every record, validate and test on this protocol or newer only")
    ap.add_argument("--measured-before", default=None,
                    help="only the records measured before this ISO 8601 UTC time (the bundled model's: "
                         "2026-12-03T08:00)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.cli.model_cmd import _parse_params, _table_rows
    from perfcast.eval.workflow import load_data, train
    from perfcast.models import get_model

    columns = {spec: column(spec, _parse_params(a.param)) for spec in a.models.split(",")}
    asm = any(get_model(model, **params).needs_asm for model, params, _, _ in columns.values())
    loaded = load_data(a.data, device=a.device, progress=not a.json, min_protocol=a.min_protocol, asm=asm,
                       measured_before=a.measured_before)
    result, seconds = {}, {}
    for spec, (model, params, transductive, default_weight) in columns.items():
        t = time.time()
        if transductive:
            params["cmd_alpha"] = a.cmd_alpha
        r = train(model=model, split=a.split, params=params, seed=a.seed, loaded=loaded, transductive=transductive,
                  default_weight=default_weight, min_protocol=a.min_protocol,
                  split_params={"eval_min_protocol": a.eval_min_protocol} if a.eval_min_protocol else None)
        result[spec] = r["test"]
        seconds[spec] = time.time() - t
        split, sizes = r["split"], r["sizes"]
    first = next(iter(result))
    out = {"split": split, "sizes": sizes, **result, "train_seconds": seconds,
           "mape_ratio": {f"{first} / {b}": result[first]["overall"]["mape"] / result[b]["overall"]["mape"]
                          for b in result if b != first}}
    if a.json:
        print(json.dumps(out, default=float))
        return
    _table_rows(out)
    for k, v in out["mape_ratio"].items():
        print(f"MAPE {k} = {v:.3f}")
    print("train seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
