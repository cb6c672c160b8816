"""How much does a model gain from having seen other programs of the same task? One model recipe trained and
scored under several named splits of the same data, in one process (one data load):

- `random`: records shuffled 8:1:1, so almost every test program's task has other programs in training;
- `by_task`: whole tasks held out (10 % test, 10 % val), as random programs of unseen operators;
- `by_network`: the held-out networks' tasks (resnet50, mobilenet_v2, bert_tiny), the bundled model's split.

If `random` is far below `by_task`, the error on unseen networks is about tasks the model has not seen, and more
distinct tasks (shapes, operators) would help more than more programs of the tasks already collected; if they are
close, the program representation itself is the limit. Test MAPE, Kendall tau and top-1 per split; no measuring.

    python bench/splits.py [--model lgbm] [--param features=program --param target_scale=work]
                           [--splits random,by_task,by_network] [--data DIR] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="lgbm", help="model recipe (a registry name; default lgbm)")
    ap.add_argument("--param", action="append", default=None,
                    help="KEY=VALUE model parameter (default: features=program, target_scale=work)")
    ap.add_argument("--splits", default="random,by_task,by_network")
    ap.add_argument("--data", default=None, help="dataset directory (default: the bundled dataset)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from perfcast.cli.model_cmd import _parse_params
    from perfcast.eval.workflow import load_data, train

    params = _parse_params(a.param or ["features=program", "target_scale=work"])
    loaded = load_data(a.data, progress=False)
    out = {"model": a.model, "params": params, "seed": a.seed, "splits": {}}
    for split in [s.strip() for s in a.splits.split(",") if s.strip()]:
        t0 = time.perf_counter()
        r = train(model=a.model, split=split, params=params, seed=a.seed, progress=False, loaded=loaded)
        o = r["test"]["overall"]
        out["splits"][split] = {"sizes": r["sizes"], "mape": o["mape"], "kendall_tau": o["kendall_tau"],
                                "top1": o["top1"], "seconds": time.perf_counter() - t0}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{a.model} {params}, seed {a.seed}")
    for split, o in out["splits"].items():
        print(f"{split:>11}: test MAPE {100 * o['mape']:.1f} %, Kendall tau {o['kendall_tau']:.3f}, top-1 "
              f"{o['top1']:.3f} ({o['sizes']['train']:,} train / {o['sizes']['test']:,} test programs, "
              f"{o['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
