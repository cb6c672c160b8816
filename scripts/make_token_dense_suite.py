"""Write `perfcast/layerwise/suites/token_dense.json`: Transformer-style dense layers (a matmul over a token axis).

Why: TVM's default (untuned) kernel of a `[tokens, features] x [features, units]` matmul walks the weight's column
with a stride of one row, and its time per FLOP varies with the widths (cache sets, TLB, prefetch; 0.31–4.5
ns/FLOP over this suite on the AMD EPYC, measured in the ninth data round), which the
zoo shows only a few times (one FFN per Transformer). This suite gives the predictor and the layerwise models many
such kernels: token counts of common sequence / patch lengths, widths of common hidden sizes, in the relations a
Transformer uses (projection F->F, fused QKV F->3F, FFN F->4F and 4F->F) plus free pairs, half with a fused bias add.

Leakage: the `by_network` split holds out resnet50, mobilenet_v2 and bert_tiny; a suite layer equal to one of their
kernels would share its workload key (and would then count as a test task), so the held-out networks' dense shapes
are left out here, which keeps the test set exactly what it was.

    python scripts/make_token_dense_suite.py   # deterministic (seed 0); then collect it:
    perfcast collect -n layers:perfcast/layerwise/suites/token_dense.json --programs-per-task 1 \
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
        out[f"token_dense_{t}x{f}x{u}{'_bias' if bias else ''}"] = {
            "units": u, "input shape": [None, t, f], "output shape": [None, t, u], "use_bias": bias,
            "output dtype": "float32", "compute dtype": "float32", "workload": "dense"}
    return dict(sorted(out.items()))


def main() -> None:
    path = Path(__file__).resolve().parents[1] / "perfcast" / "layerwise" / "suites" / "token_dense.json"
    layers = configs()
    path.write_text(json.dumps(layers, indent=1) + "\n")
    print(f"wrote {len(layers)} layers to {path}")


if __name__ == "__main__":
    main()
