"""Whole networks the project never saw, as ONNX files: predicted vs measured latency on this machine (batch 1,
TVM default kernels), the check of issue 4's "within 20 %" bar for `perfcast predict X.onnx --device local --measure`.

Four networks defined here, in no zoo and not in the training data: a ResNeXt-style CNN (grouped conv, residual,
average pooling), a 3-layer transformer encoder (192 wide, 6 heads), a 1-D conv net (a layer type the training
data has only since the zoo's M5 audio net joined it, with other shapes) and a wide 224x224 conv stack. Each is
exported with `torch.onnx.export`, then predicted and measured
through `perfcast.e2e.predict_network` exactly as the CLI does.

    python bench/unseen_onnx.py [--model DIR] [--compare DIR] [--method kernel|layerwise] [--json]

Prints one line per network (predicted, measured, error) and the mean |error|; `--compare DIR` (repeatable) scores
another model against the same measurements (the host's speed drifts between runs). Keep the machine quiet: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile


def _networks():
    import torch
    from torch import nn

    class ResNeXtish(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 48, 5, stride=2, padding=2), nn.BatchNorm2d(48), nn.ReLU())
            self.block = nn.Sequential(nn.Conv2d(48, 96, 1), nn.ReLU(), nn.Conv2d(96, 96, 3, padding=1, groups=8),
                                       nn.ReLU(), nn.Conv2d(96, 48, 1))
            self.down = nn.Sequential(nn.Conv2d(48, 128, 3, stride=2, padding=1), nn.ReLU(), nn.AvgPool2d(2))
            self.fc = nn.Linear(128 * 14 * 14, 100)

        def forward(self, x):
            x = self.stem(x)
            x = self.down(torch.relu(x + self.block(x)))
            return self.fc(x.flatten(1))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Linear(96, 192)
            layer = nn.TransformerEncoderLayer(192, 6, 384, batch_first=True, dropout=0.0)
            self.enc = nn.TransformerEncoder(layer, 3)
            self.head = nn.Linear(192, 10)

        def forward(self, x):
            return self.head(self.enc(self.emb(x)).mean(1))

    class Conv1dNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.f = nn.Sequential(nn.Conv1d(16, 64, 7, padding=3), nn.ReLU(), nn.MaxPool1d(2),
                                   nn.Conv1d(64, 128, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
                                   nn.Conv1d(128, 128, 3, padding=1), nn.ReLU())
            self.fc = nn.Linear(128, 20)

        def forward(self, x):
            return self.fc(self.f(x).mean(-1))

    class WideConv(nn.Module):
        def __init__(self):
            super().__init__()
            self.f = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 1, 1), nn.ReLU(),
                                   nn.MaxPool2d(2), nn.Conv2d(64, 128, 3, 1, 1), nn.ReLU(), nn.Conv2d(128, 128, 1),
                                   nn.ReLU(), nn.AdaptiveAvgPool2d(1))
            self.fc = nn.Linear(128, 1000)

        def forward(self, x):
            return self.fc(self.f(x).flatten(1))

    return {"resnextish": (ResNeXtish, (1, 3, 112, 112)), "encoder": (Encoder, (1, 64, 96)),
            "conv1d": (Conv1dNet, (1, 16, 4000)), "wide_conv": (WideConv, (1, 3, 224, 224))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="cost model directory (default: bundled)")
    ap.add_argument("--compare", action="append", default=[],
                    help="another cost model directory, scored on the same measurements (repeatable)")
    ap.add_argument("--method", default="kernel", choices=["kernel", "layerwise"])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import torch

    from perfcast.e2e import predict_network

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (cls, shape) in _networks().items():
            torch.manual_seed(0)
            path = os.path.join(tmp, f"{name}.onnx")
            torch.onnx.export(cls().eval(), (torch.randn(*shape),), path, input_names=["x"], dynamo=False)
            r = predict_network(path, 1, "local", a.model, measure=True, method=a.method)
            rows.append({"network": name, "predicted_s": r["predicted_s"], "measured_s": r["measured_s"],
                         "error": r["predicted_s"] / r["measured_s"] - 1, "kernels": len(r["kernels"])})
            rows[-1]["compare"] = {}
            for cm in a.compare:
                c = predict_network(path, 1, "local", cm, method=a.method)["predicted_s"]
                rows[-1]["compare"][cm] = {"predicted_s": c, "error": c / r["measured_s"] - 1}
            if not a.json:
                x = rows[-1]
                cmp = "".join(f"  ({cm}: {100 * c['error']:+6.1f}%)" for cm, c in x["compare"].items())
                print(f"{name:11s} {x['kernels']:3d} kernels  predicted {1e3 * x['predicted_s']:9.2f} ms  measured "
                      f"{1e3 * x['measured_s']:9.2f} ms  error {100 * x['error']:+6.1f}%{cmp}")
    mean = sum(abs(x["error"]) for x in rows) / len(rows)
    within = sum(abs(x["error"]) <= 0.2 for x in rows)
    res = {"networks": rows, "mean_abs_error": mean, "within_20pct": within}
    res["compare"] = {cm: {"mean_abs_error": sum(abs(x["compare"][cm]["error"]) for x in rows) / len(rows),
                           "within_20pct": sum(abs(x["compare"][cm]["error"]) <= 0.2 for x in rows)}
                      for cm in a.compare}
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"mean |error| {100 * mean:.1f}% ; {within}/{len(rows)} networks within 20 % (method {a.method})")
        for cm, c in res["compare"].items():
            print(f"--compare {cm}: mean |error| {100 * c['mean_abs_error']:.1f}% ; {c['within_20pct']}/{len(rows)} "
                  "within 20 %")


if __name__ == "__main__":
    from perfcast.errors import run_with_one_line_errors

    run_with_one_line_errors(main)  # a PerfcastError (bad argument, missing file): one line, as the CLI says it
