"""Cross-model accuracy on the bundled dataset: `cdmpp` against the `xgb`, `lgbm` and `mlp` baselines, all trained
on the same training part of the same split in this process, scored on the same held-out programs.

    python bench/accuracy.py [--split by_network] [--seed 0] [--param KEY=VALUE ...] [--models LIST] [--json]

`--models` may include `cdmpp+cmd`: CDMPP's cross-model setting, in which the held-out networks' programs (not their
latencies) are known during training and the latents of training and held-out programs are aligned by CMD.

With `by_network` the test programs are those of resnet50, mobilenet_v2 and bert_tiny's tasks, none of which (nor
any task they share with other networks) reaches training. Prints a per-network MAPE table, the overall MAPE,
±10/20 % accuracy, Kendall τ and top-1/top-5 scores per model, and cdmpp's MAPE as a ratio of each baseline's.
"""

from __future__ import annotations

import argparse
import json
import time

BASELINES = ("xgb", "lgbm", "mlp")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="dataset directory (default: bundled)")
    ap.add_argument("--split", default="by_network")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--param", action="append", default=[], help="cdmpp parameter KEY=VALUE")
    ap.add_argument("--models", default="cdmpp," + ",".join(BASELINES))
    ap.add_argument("--cmd-alpha", type=float, default=0.1, help="CMD weight of the cdmpp+cmd variant")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.cli.model_cmd import _parse_params, _table_rows
    from perfcast.eval.workflow import load_data, train

    loaded = load_data(a.data, progress=not a.json)
    result, seconds = {}, {}
    for name in a.models.split(","):
        t = time.time()
        # "cdmpp+cmd": CDMPP's cross-model setting, the held-out programs' features (not latencies) known in
        # training and the latents aligned by CMD (alpha from --cmd-alpha)
        model = name.split("+")[0]
        params = _parse_params(a.param) if model == "cdmpp" else {}
        if name.endswith("+cmd"):
            params["cmd_alpha"] = a.cmd_alpha
        r = train(model=model, split=a.split, params=params, seed=a.seed, loaded=loaded,
                  transductive=name.endswith("+cmd"))
        result[name] = r["test"]
        seconds[name] = time.time() - t
        split, sizes = r["split"], r["sizes"]
    out = {"split": split, "sizes": sizes, **result, "train_seconds": seconds}
    if "cdmpp" in result:
        out["cdmpp_mape_over_baseline"] = {b: result["cdmpp"]["overall"]["mape"] / result[b]["overall"]["mape"]
                                           for b in result if b != "cdmpp"}
    if a.json:
        print(json.dumps(out, default=float))
        return
    _table_rows(out)
    for k, v in out.get("cdmpp_mape_over_baseline", {}).items():
        print(f"cdmpp MAPE / {k} MAPE = {v:.3f}")
    print("train seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))


if __name__ == "__main__":
    main()
