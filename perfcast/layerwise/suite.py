"""Layer suites: the layerwise paper's layer configurations as one Relax module the data engine can collect.

The layerwise paper (`ai-driven-performance-modeling-inference.txt` §4) profiles single layers taken from the Keras
model zoo: convolutions (plain, depthwise, dilated), dense layers and pooling layers, each with its hyper-parameters
and input/output shapes (`TVM_Profiler/configs/*.json`, entries like
`{"filters": 32, "kernel": [3, 3], "strides": [2, 2], "padding": "valid", "dilation": [1, 1], "groups": 1,
"input shape": [None, 299, 299, 3], ...}`). A suite turns a sample of such a file into a Relax function whose every
layer is an independent call on its own input (NCHW, float32, the layout the zoo's torch networks lower to), so
`perfcast collect --network layers:FILE.json@N` measures each layer's TVM default kernel like any network task.

A dense layer whose Keras input shape has a token axis (`"input shape": [None, 128, 512]`, how a Transformer's
projections and FFN apply `Dense` to a sequence) is a matmul of `tokens x features` by `features x units`, plus a
bias add when the config says `"use_bias": true` (the `fused_matmul_add` kernels of BERT / GPT-2 / ViT).
`perfcast/layerwise/suites/token_dense.json` is such a suite (written by `scripts/make_token_dense_suite.py`).

Network string: `layers:PATH.json[@N]` — N layers sampled (seeded, without replacement) from the file; layers whose
output would be empty, whose FLOPs exceed `MAX_FLOPS` or whose tensors exceed `MAX_BYTES` are skipped (an untuned
default kernel of a VGG-sized layer runs for seconds and would dominate a collection).
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import PerfcastError

MAX_FLOPS = 2.5e9  # per layer at batch 1 (multiply-add = 2 FLOPs)
MAX_BYTES = 128 * 2**20  # input + weights + output at batch 1 (some random dense layers hold 10^8 weights)
PREFIX = "layers:"
_SPEC = re.compile(r"^layers:(?P<path>.+?\.json)(?:@(?P<n>\d+))?$")


@dataclass(frozen=True)
class LayerConfig:
    """One layer, NCHW at batch `batch`. `kind`: conv2d | dense | max_pool2d | avg_pool2d."""

    name: str
    kind: str
    in_shape: tuple[int, ...]  # (C, H, W) for conv/pool, (features,) or (tokens, features) for dense
    out_channels: int = 0  # conv filters or dense units
    kernel: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    padding: str = "valid"  # Keras: "valid" or "same"
    bias: bool = False  # dense only: a bias add fused after the matmul

    @property
    def rows(self) -> int:
        """Dense: matmul rows per batch element (the token count; 1 without a token axis)."""
        return math.prod(self.in_shape[:-1])

    def pads(self) -> tuple[int, int, int, int]:
        """(top, left, bottom, right): TensorFlow's "same" padding (the extra row/column goes bottom/right)."""
        if self.padding != "same":
            return (0, 0, 0, 0)
        out = []
        for size, k, s, d in zip(self.in_shape[1:], self.kernel, self.strides, self.dilation):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            out.append((total // 2, total - total // 2))
        return (out[0][0], out[1][0], out[0][1], out[1][1])

    def out_hw(self) -> tuple[int, int]:
        t, left, b, r = self.pads()
        (_, h, w) = self.in_shape
        return tuple((size + p0 + p1 - (k - 1) * d - 1) // s + 1 for size, p0, p1, k, s, d in
                     ((h, t, b, self.kernel[0], self.strides[0], self.dilation[0]),
                      (w, left, r, self.kernel[1], self.strides[1], self.dilation[1])))

    def flops(self, batch: int = 1) -> float:
        if self.kind == "dense":
            return 2.0 * batch * self.rows * self.in_shape[-1] * self.out_channels
        oh, ow = self.out_hw()
        if self.kind == "conv2d":
            cin = self.in_shape[0] // self.groups
            return 2.0 * batch * self.out_channels * oh * ow * cin * self.kernel[0] * self.kernel[1]
        return 1.0 * batch * self.in_shape[0] * oh * ow * self.kernel[0] * self.kernel[1]

    def nbytes(self, batch: int = 1) -> int:
        """float32 bytes of input, weights and output."""
        if self.kind == "dense":
            m, f, u = batch * self.rows, self.in_shape[-1], self.out_channels
            return 4 * (m * f + f * u + m * u + (u if self.bias else 0))
        c, h, w = self.in_shape
        oh, ow = self.out_hw()
        if self.kind == "conv2d":
            weights = self.out_channels * (c // self.groups) * self.kernel[0] * self.kernel[1]
            return 4 * (batch * c * h * w + weights + batch * self.out_channels * oh * ow)
        return 4 * batch * c * (h * w + oh * ow)

    def valid(self) -> bool:
        if self.kind == "dense":
            return min(self.in_shape) > 0 and self.out_channels > 0
        return min(self.out_hw()) >= 1 and self.in_shape[0] % self.groups == 0


    def layer(self, batch: int = 1):
        """The `perfcast.layerwise.layer.Layer` that `layer_of_tir` reads from this layer's TVM kernel (the input
        size is the padded one; a pooling layer without padding reads its input directly)."""
        from .layer import Layer, conv_type

        if self.kind == "dense":
            return Layer("dense", batch * self.rows, self.in_shape[-1], out_c=self.out_channels,
                         epilogue_ops=int(self.bias))
        c, h, w = self.in_shape
        t, left, b, r = self.pads()
        oh, ow = self.out_hw()
        if self.kind == "conv2d":
            return Layer(conv_type(self.groups, c, self.dilation), batch, c, h + t + b, w + left + r,
                         self.out_channels, oh, ow, *self.kernel, *self.strides, *self.dilation, self.groups)
        return Layer(self.kind, batch, c, h + t + b, w + left + r, c, oh, ow, *self.kernel, *self.strides)


# zoo network -> the Keras model its layers come from in the TVM_Profiler configs (default: the same name)
KERAS_NAMES = {"mobilenet_v2": "mobilenetv2_1.00_224", "mobilenet": "mobilenet_1.00_224"}


def keras_model_of(layer_name: str) -> str:
    """"resnet50:conv2_block1_2_conv" -> "resnet50"; suites of random layers have no model ("")."""
    return layer_name.split(":", 1)[0] if ":" in layer_name else ""


def parse_config(name: str, cfg: dict) -> LayerConfig:
    """A TVM_Profiler config entry -> LayerConfig (Keras NHWC shapes -> our NCHW)."""
    work = str(cfg.get("workload", ""))
    shape = [int(x) for x in cfg["input shape"][1:]]
    if work == "dense" or "units" in cfg:
        if len(shape) > 2:
            raise PerfcastError(f"layer {name!r}: dense input shape {cfg['input shape']} has more than one axis "
                                "before the features; use [None, features] or [None, tokens, features]")
        return LayerConfig(name, "dense", tuple(shape), out_channels=int(cfg["units"]),
                           bias=bool(cfg.get("use_bias", False)))
    h, w, c = shape
    if "pool_size" in cfg:
        # rand_pool.json names its layers random_avg_pool_* / random_max_pool_* with the workloads swapped
        # (random_avg_pool_500 says "max_pool2d"): the name decides, the workload only when the name is silent
        kind = "avg_pool2d" if "avg" in name else "max_pool2d" if "max" in name else \
            "avg_pool2d" if work == "avg_pool2d" else "max_pool2d"
        strides = cfg.get("strides", cfg.get("stride"))
        return LayerConfig(name, kind, (c, h, w), kernel=tuple(cfg["pool_size"]), strides=tuple(strides),
                           padding=cfg.get("padding", "valid"))
    if work != "conv2d":
        raise PerfcastError(f"layer {name!r}: workload {work!r} is not supported; use conv2d, dense or pooling "
                            "configs")
    return LayerConfig(name, "conv2d", (c, h, w), out_channels=int(cfg["filters"]), kernel=tuple(cfg["kernel"]),
                       strides=tuple(cfg["strides"]), dilation=tuple(cfg.get("dilation", (1, 1))),
                       groups=int(cfg.get("groups", 1)), padding=cfg.get("padding", "valid"))


def parse_spec(network: str) -> tuple[Path, int | None]:
    m = _SPEC.match(network)
    if not m:
        raise PerfcastError(f"bad layer suite {network!r}; write layers:PATH/TO/configs.json or "
                            "layers:PATH/TO/configs.json@200 (200 layers sampled)")
    path = Path(m["path"])
    if not path.exists():
        raise PerfcastError(f"layer config file {str(path)!r} not found; point at a TVM_Profiler configs/*.json file")
    return path, (int(m["n"]) if m["n"] else None)


def load_suite(network: str, seed: int = 0) -> list[LayerConfig]:
    """The layers of `layers:PATH[@N]`: valid, within MAX_FLOPS, distinct, sampled with `seed`."""
    path, n = parse_spec(network)
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PerfcastError(f"cannot read layer configs {str(path)!r}: {e}") from None
    if not isinstance(raw, dict) or not raw:
        raise PerfcastError(f"{str(path)!r} holds no layer configs (expected a JSON object name -> config)")
    layers, seen = [], set()
    for name, cfg in raw.items():
        try:
            lc = parse_config(name, cfg)
        except (KeyError, TypeError, ValueError) as e:
            raise PerfcastError(f"layer {name!r} in {path.name} is malformed ({type(e).__name__}: {e})") from None
        sig = (lc.kind, lc.in_shape, lc.out_channels, lc.kernel, lc.strides, lc.dilation, lc.groups, lc.pads(),
               lc.bias)
        if sig in seen or not lc.valid() or lc.flops() > MAX_FLOPS or lc.nbytes() > MAX_BYTES:
            continue
        seen.add(sig)
        layers.append(lc)
    if not layers:
        raise PerfcastError(f"{str(path)!r}: no valid layer within {MAX_FLOPS:.1e} FLOPs and {MAX_BYTES} bytes")
    if n is not None and n < len(layers):
        layers = sorted(random.Random(seed).sample(layers, n), key=lambda lc: lc.name)
    return layers


def suite_to_relax(layers: list[LayerConfig], batch_size: int = 1):
    """One Relax `main(x_0, w_0, x_1, ...)` returning a tuple of every layer's output."""
    import tvm  # noqa: F401 - registers relax
    from tvm import relax

    bb = relax.BlockBuilder()
    params, calls = [], []
    for i, lc in enumerate(layers):
        if lc.kind == "dense":
            x = relax.Var(f"x{i}", relax.TensorType((batch_size * lc.rows, lc.in_shape[-1]), "float32"))
            w = relax.Var(f"w{i}", relax.TensorType((lc.in_shape[-1], lc.out_channels), "float32"))
            params += [x, w]
            if lc.bias:
                b = relax.Var(f"b{i}", relax.TensorType((lc.out_channels,), "float32"))
                params.append(b)
                calls.append(lambda x=x, w=w, b=b: relax.op.add(bb.emit(relax.op.matmul(x, w)), b))
            else:
                calls.append(lambda x=x, w=w: relax.op.matmul(x, w))
            continue
        x = relax.Var(f"x{i}", relax.TensorType((batch_size, *lc.in_shape), "float32"))
        params.append(x)
        if lc.kind == "conv2d":
            w = relax.Var(f"w{i}", relax.TensorType(
                (lc.out_channels, lc.in_shape[0] // lc.groups, *lc.kernel), "float32"))
            params.append(w)
            calls.append(lambda x=x, w=w, lc=lc: relax.op.nn.conv2d(
                x, w, strides=lc.strides, padding=lc.pads(), dilation=lc.dilation, groups=lc.groups))
        else:
            pool = relax.op.nn.max_pool2d if lc.kind == "max_pool2d" else relax.op.nn.avg_pool2d
            kw = {} if lc.kind == "max_pool2d" else {"count_include_pad": False}  # Keras averages real pixels
            calls.append(lambda x=x, lc=lc, pool=pool, kw=kw: pool(
                x, pool_size=lc.kernel, strides=lc.strides, padding=lc.pads(), **kw))
    with bb.function("main", params):
        with bb.dataflow():
            outs = [bb.emit(c()) for c in calls]
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    return bb.get()
