"""CDMPP's ablations on our data (EuroSys'24 §7.5): positional encoding on/off (Fig. 14a), loss functions
(Table 4: MSE, MAPE, MSPE, MSE+MAPE; plus log-MSE) and target transforms (Table 3: Box-Cox, Yeo-Johnson,
quantile, log, none), and a perfcast addition: the trained weights (the paper's loop) against their moving
average (`weight_average=ema`, README Models). Every variant is the `cdmpp` model with one setting changed, trained
on the same training part of the same split in this process and scored (MAPE, RMSE) on the same test programs.

    python bench/ablation.py [--split by_network] [--epochs 80] [--param KEY=VALUE ...] [--only GROUPS]
                             [--default-weight W] [--json]

The bundled model's cdmpp member: `--epochs 150 --param use_analytic=true --param use_asm=true --default-weight 30`
(the assembly features are loaded when the parameters ask for them).
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None)
    ap.add_argument("--split", default="by_network")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=80)
    ap.add_argument("--param", action="append", default=[], help="base cdmpp parameter KEY=VALUE")
    ap.add_argument("--only", default="pe,loss,target,average", help="which ablation groups to run")
    ap.add_argument("--default-weight", type=float, default=None,
                    help="loss weight of a TVM default kernel (perfcast train --default-weight; default 10)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.cli.model_cmd import _parse_params
    from perfcast.errors import PerfcastError
    from perfcast.eval.workflow import load_data, train
    from perfcast.models import LOSSES, TRANSFORMS, WEIGHT_AVERAGES, get_model

    base = {"epochs": a.epochs, **_parse_params(a.param)}
    groups = {
        "pe": [("with PE", {"use_pe": True}), ("without PE", {"use_pe": False})],
        "loss": [(f"loss {x}", {"loss": x}) for x in LOSSES],
        "target": [(f"target {x}", {"target": x}) for x in TRANSFORMS],
        "average": [(f"weights {x}", {"weight_average": x}) for x in WEIGHT_AVERAGES],
    }
    unknown = [g for g in a.only.split(",") if g not in groups]
    if unknown:
        raise PerfcastError(f"--only {','.join(unknown)}: no such ablation group; known: {','.join(groups)}")
    loaded = load_data(a.data, progress=not a.json, asm=get_model("cdmpp", **base).needs_asm)
    rows = []
    for g in a.only.split(","):
        for label, change in groups[g]:
            t = time.time()
            r = train(model="cdmpp", split=a.split, params={**base, **change}, seed=a.seed, loaded=loaded,
                      default_weight=a.default_weight)
            o = r["test"]["overall"]
            rows.append({"group": g, "variant": label, "params": change, "mape": o["mape"], "rmse": o["rmse"],
                         "acc_20": o["acc_20"], "seconds": time.time() - t})
            if not a.json:
                print(f"{g:7s} {label:22s} MAPE {o['mape']:.3f}  RMSE {o['rmse'] * 1e3:.3f} ms  "
                      f"±20% {o['acc_20']:.3f}  ({time.time() - t:.0f} s)", flush=True)
    if a.json:
        print(json.dumps({"split": a.split, "base": base, "rows": rows}))


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
