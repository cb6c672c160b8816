"""Write `perfcast/layerwise/suites/token_dense.json` and `aliased_dense.json`: Transformer-style dense layers (a
matmul over a token axis).

Why: TVM's default (untuned) kernel of a `[tokens, features] x [features, units]` matmul walks the weight's column
with a stride of one row, and its time per FLOP varies with the widths (cache sets, TLB, prefetch; 0.31–4.5
ns/FLOP over this suite on the AMD EPYC, measured in the ninth data round), which the
zoo shows only a few times (one FFN per Transformer). This suite gives the predictor and the layerwise models many
such kernels: token counts of common sequence / patch lengths, widths of common hidden sizes, in the relations a
Transformer uses (projection F->F, fused QKV F->3F, FFN F->4F and 4F->F) plus free pairs, half with a fused bias add.

Leakage: the `by_network` split holds out resnet50, mobilenet_v2 and bert_tiny; a suite layer equal to one of their
kernels would share its workload key (and would then count as a test task), so the held-out networks' dense shapes
are left out here, which keeps the test set exactly what it was.

`aliased_dense.json` (2026-11-28) is the same kind of layer where TVM's untuned kernel is slowest and hardest to
predict: widths whose weight row (4 x units bytes) is a multiple of 1, 2 or 4 KiB, so the column walk falls into 4,
2 or 1 of L1's 64 sets, over short to medium reductions (16-512 features). On Zen 4 such a kernel costs 2.3-7 ns per
multiply-add against about 1 elsewhere, and the models trained before it under-predicted the two-set ones by 1.15x
(median) even in training, most at short reductions (one training kernel of 128 features at 1.42x), with few of
them measured on this CPU (`bench/aliasing.py`). Same leakage rule: the held-out networks' shapes are left out, and
so are the layers `token_dense.json` already has.

    python scripts/make_token_dense_suite.py   # deterministic (seed 0); then collect them:
    perfcast collect -n layers:perfcast/layerwise/suites/token_dense.json --programs-per-task 1 \
        --out perfcast/data/bundled
    perfcast collect -n layers:perfcast/layerwise/suites/aliased_dense.json --programs-per-task 1 \
        --out perfcast/data/bundled
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TOKENS = (16, 32, 49, 50, 64, 77, 96, 128, 196, 197, 256)
WIDTHS = (64, 96, 128, 192, 256, 320, 384, 512, 640, 768, 1024, 1280, 1536, 2048, 3072, 4096)
MAX_FLOPS = 6.5e8  # about BERT-base's FFN at 128 tokens: an untuned kernel of it runs ~1.3 s here
N_LAYERS = 240
# (tokens, features, units) of the held-out networks' dense kernels (bert_tiny: hidden 128, FFN 512, seq 128)
HELD_OUT = {(128, 128, 128), (128, 128, 512), (128, 512, 128)}  # resnet50 / mobilenet_v2: 1 token, not in TOKENS


def configs(seed: int = 0) -> dict[str, dict]:
    rng = random.Random(seed)
    out: dict[str, dict] = {}
    seen = set()
    while len(out) < N_LAYERS:
        t, f = rng.choice(TOKENS), rng.choice(WIDTHS)
        rel = rng.choice(("proj", "qkv", "ffn_up", "ffn_down", "free"))
        u = {"proj": f, "qkv": 3 * f, "ffn_up": 4 * f, "ffn_down": f // 4, "free": rng.choice(WIDTHS)}[rel]
        bias = rng.random() < 0.5
        if u < 16 or 2 * t * f * u > MAX_FLOPS or (t, f, u) in HELD_OUT or (t, f, u, bias) in seen:
            continue
        seen.add((t, f, u, bias))
        out[f"token_dense_{t}x{f}x{u}{'_bias' if bias else ''}"] = _layer(t, f, u, bias)
    return dict(sorted(out.items()))


def _layer(t: int, f: int, u: int, bias: bool) -> dict:
    return {"units": u, "input shape": [None, t, f], "output shape": [None, t, u], "use_bias": bias,
            "output dtype": "float32", "compute dtype": "float32", "workload": "dense"}


ALIASED_TOKENS = (16, 32, 49, 64, 96, 128, 196, 256)
ALIASED_FEATURES = (16, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512)
ALIASED_UNITS = (256, 768, 1280,  # rows of 1 KiB x odd: 4 L1 sets
                 512, 1536, 2560, 3584,  # 2 KiB x odd: 2 sets
                 1024, 2048, 3072, 4096)  # 4 KiB multiples: 1 set
ALIASED_MAX_MACS = 5e7  # at 7 ns per multiply-add (the slowest seen) 0.35 s a call
N_ALIASED = 200


def aliased_configs(seed: int = 0) -> dict[str, dict]:
    rng = random.Random(seed)
    taken = {(c["input shape"][1], c["input shape"][2], c["units"], c["use_bias"]) for c in configs().values()}
    out: dict[str, dict] = {}
    while len(out) < N_ALIASED:
        t, f, u = rng.choice(ALIASED_TOKENS), rng.choice(ALIASED_FEATURES), rng.choice(ALIASED_UNITS)
        bias = rng.random() < 0.5
        if t * f * u > ALIASED_MAX_MACS or (t, f, u) in HELD_OUT or (t, f, u, bias) in taken:
            continue
        taken.add((t, f, u, bias))
        out[f"aliased_dense_{t}x{f}x{u}{'_bias' if bias else ''}"] = _layer(t, f, u, bias)
    return dict(sorted(out.items()))


def main() -> None:
    suites = Path(__file__).resolve().parents[1] / "perfcast" / "layerwise" / "suites"
    for name, layers in (("token_dense", configs()), ("aliased_dense", aliased_configs())):
        path = suites / f"{name}.json"
        path.write_text(json.dumps(layers, indent=1) + "\n")
        print(f"wrote {len(layers)} layers to {path}")


if __name__ == "__main__":
    main()
