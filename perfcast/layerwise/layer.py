"""A layer and its features, the inputs of the layerwise paper's regressors (§5: layer hyper-parameters, tensor
sizes and FLOPs).

A `Layer` comes either from a TIR kernel (`layer_of_tir`: the anchor block of a conv2d / dense / pooling kernel,
fused epilogues counted) or from a table row of layer hyper-parameters (`layer_of_row`, e.g. the TVM_Profiling_Dataset
sample). Both give the same `FEATURES` vector, so a model trained on one kind predicts the other.

Layer types (one regressor family per device, type and metric): conv2d, depthwise_conv2d, dilated_conv2d, dense,
max_pool2d, avg_pool2d. Any other kernel (attention matmuls, norms, element-wise) has no layer type.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, fields

LAYER_TYPES = ("conv2d", "depthwise_conv2d", "dilated_conv2d", "dense", "max_pool2d", "avg_pool2d")


@dataclass(frozen=True)
class Layer:
    """NCHW sizes; dense layers use in_c = input features, out_c = units, batch = rows, spatial sizes 1."""

    layer_type: str
    batch: int
    in_c: int
    in_h: int = 1
    in_w: int = 1
    out_c: int = 1
    out_h: int = 1
    out_w: int = 1
    kernel_h: int = 1
    kernel_w: int = 1
    stride_h: int = 1
    stride_w: int = 1
    dilation_h: int = 1
    dilation_w: int = 1
    groups: int = 1
    epilogue_ops: int = 0  # element-wise blocks fused after the layer (bias add, activation, ...)

    def flops(self) -> float:
        if self.layer_type == "dense":
            return 2.0 * self.batch * self.in_c * self.out_c
        window = self.kernel_h * self.kernel_w
        if self.layer_type.endswith("pool2d"):
            return float(self.batch * self.out_c * self.out_h * self.out_w * window)
        return 2.0 * self.batch * self.out_c * self.out_h * self.out_w * (self.in_c // self.groups) * window

    def sizes(self) -> tuple[float, float, float]:
        """(input, weight, output) elements."""
        if self.layer_type == "dense":
            return self.batch * self.in_c, self.in_c * self.out_c, self.batch * self.out_c
        weights = 0 if self.layer_type.endswith("pool2d") else \
            self.out_c * (self.in_c // self.groups) * self.kernel_h * self.kernel_w
        return (self.batch * self.in_c * self.in_h * self.in_w, weights,
                self.batch * self.out_c * self.out_h * self.out_w)


_INT_FIELDS = [f.name for f in fields(Layer)][1:]
FEATURES = tuple(_INT_FIELDS) + ("log_flops", "log_in_elems", "log_weight_elems", "log_out_elems",
                                 "flops_per_out_elem")
"""The feature vector: the 15 integer fields of `Layer` after its type, then log2 of FLOPs and of the input,
weight and output element counts (log2(1 + x)), and FLOPs per output element (20 values)."""


def features(layer: Layer) -> list[float]:
    flops = layer.flops()
    i, w, o = layer.sizes()
    return [float(v) for v in astuple(layer)[1:]] + [math.log2(1 + flops), math.log2(1 + i), math.log2(1 + w),
                                                      math.log2(1 + o), flops / max(o, 1)]


def conv_type(groups: int, in_c: int, dilation: tuple[int, int]) -> str:
    if max(dilation) > 1:
        return "dilated_conv2d"
    if groups > 1 and groups == in_c:
        return "depthwise_conv2d"
    return "conv2d"


# --- from TIR -----------------------------------------------------------------------------------------------------

def _blocks(func) -> list:
    """Every SBlock of a PrimFunc except the root, in program order (TVM 0.27 has no Python stmt visitor)."""
    import tvm
    from tvm import s_tir

    t, out, stack = tvm.tirx, [], [func.body]
    while stack:
        s = stack.pop()
        tp = type(s)
        if tp is t.SeqStmt:
            stack.extend(reversed(list(s.seq)))
        elif tp is t.For or tp is t.AttrStmt or tp is t.While:
            stack.append(s.body)
        elif tp is t.IfThenElse:
            stack.extend(x for x in (s.else_case, s.then_case) if x is not None)
        elif tp is s_tir.SBlockRealize:
            stack.append(s.block)
        elif tp is s_tir.SBlock:
            out.append(s)
            stack.append(s.body)
    return [b for b in out if b.name_hint != "root"]


def _shape(buf) -> list[int]:
    return [int(x) for x in buf.shape]


def _coeffs(expr, vars_) -> list[int]:
    """Integer coefficients of `expr` in `vars_` (then the constant); zeros when it is not linear."""
    import tvm

    got = tvm.sym.detect_linear_equation(expr, vars_)  # TVM 0.27: tvm.arith moved to tvm.sym
    if len(got) != len(vars_) + 1:
        return [0] * (len(vars_) + 1)
    return [int(c) if isinstance(c, tvm.tirx.IntImm) else 0 for c in got]


def layer_of_tir(func) -> Layer | None:
    """The layer a (possibly fused) TIR kernel computes, or None when it is not a conv2d / dense / pooling kernel."""
    blocks = _blocks(func)
    names = [b.name_hint for b in blocks]
    anchor = next((b for b in blocks if any(k in b.name_hint for k in ("conv2d", "pool_max", "pool_sum", "matmul",
                                                                       "dense"))), None)
    if anchor is None:
        return None
    rest = [n for n in names if n != anchor.name_hint and n != "pad_temp" and not n.endswith(("pool_avg",))]
    epilogue = len(rest)
    out = _shape(anchor.writes[0].source)
    spatial = [iv.var for iv in anchor.iter_vars if int(iv.iter_type) == 0]
    reduce = [iv for iv in anchor.iter_vars if int(iv.iter_type) != 0]
    name = anchor.name_hint
    if "conv2d" in name:
        if not name.endswith("nchw") or len(out) != 4 or len(anchor.reads) < 2:  # NHWC etc.: left to the model
            return None
        data, weight = anchor.reads[0], anchor.reads[1]
        dshape, wshape = _shape(data.source), _shape(weight.source)
        if len(dshape) != 4 or len(wshape) != 4:
            return None
        # data index along H is yy*stride + ry*dilation: read the coefficients of the block's own variables
        ry, rx = reduce[-2].var, reduce[-1].var
        sh = _coeffs(data.region[2].min, [spatial[2], ry])
        sw = _coeffs(data.region[3].min, [spatial[3], rx])
        in_c = dshape[1]
        groups = max(1, in_c // max(wshape[1], 1))
        dil = (sh[1] or 1, sw[1] or 1)
        return Layer(conv_type(groups, in_c, dil), out[0], in_c, dshape[2], dshape[3], out[1], out[2], out[3],
                     wshape[2], wshape[3], sh[0] or 1, sw[0] or 1, dil[0], dil[1], groups, epilogue)
    if "pool" in name:
        if len(out) != 4 or not anchor.reads:
            return None
        dshape = _shape(anchor.reads[0].source)
        kind = "max_pool2d" if "max" in name else "avg_pool2d"
        if name.startswith("adaptive"):  # global/adaptive pooling: the window is the input over the output
            kh, kw = dshape[2] // max(out[2], 1), dshape[3] // max(out[3], 1)
            return Layer(kind, out[0], dshape[1], dshape[2], dshape[3], out[1], out[2], out[3], kh, kw, kh, kw,
                         epilogue_ops=epilogue)
        kh, kw = (int(iv.dom.extent) for iv in reduce[-2:]) if len(reduce) >= 2 else (1, 1)
        sh = _coeffs(anchor.reads[0].region[2].min, [spatial[2]])
        sw = _coeffs(anchor.reads[0].region[3].min, [spatial[3]])
        return Layer(kind, out[0], dshape[1], dshape[2], dshape[3], out[1], out[2], out[3], kh, kw,
                     sh[0] or 1, sw[0] or 1, epilogue_ops=epilogue)
    # matmul: a dense layer when the second operand is a 2-D weight matrix (batched attention matmuls are not)
    if len(reduce) != 1 or len(anchor.reads) < 2:
        return None
    a, b = _shape(anchor.reads[0].source), _shape(anchor.reads[1].source)
    if len(b) != 2 or len(a) < 2:
        return None
    k = int(reduce[0].dom.extent)
    n = b[1] if b[0] == k else b[0]
    return Layer("dense", math.prod(a[:-1]), k, out_c=n, epilogue_ops=epilogue)


# --- from a table of layer hyper-parameters (TVM_Profiling_Dataset) -----------------------------------------------

def _int(v, default: int = 1) -> int:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(f) else int(f)


def layer_of_row(row: dict) -> Layer:
    """A row with the TVM_Profiling_Dataset columns (workload, batch_size, filters, kernel_h, ..., NHWC sizes)."""
    work = str(row.get("workload", ""))
    b = _int(row.get("batch_size"))
    if work == "dense":
        return Layer("dense", b, _int(row.get("in_features")), out_c=_int(row.get("out_features")))
    in_c, out_c = _int(row.get("in_c")), _int(row.get("out_c"))
    geo = dict(in_h=_int(row.get("in_h")), in_w=_int(row.get("in_w")), out_c=out_c, out_h=_int(row.get("out_h")),
               out_w=_int(row.get("out_w")), kernel_h=_int(row.get("kernel_h")), kernel_w=_int(row.get("kernel_w")),
               stride_h=_int(row.get("stride_h")), stride_w=_int(row.get("stride_w")))
    if "pool" in work:
        return Layer("max_pool2d" if "max" in work else "avg_pool2d", b, in_c, **geo)
    dil = (_int(row.get("dilation_h")), _int(row.get("dilation_w")))
    groups = _int(row.get("groups"))
    return Layer(conv_type(groups, in_c, dil), b, in_c, **geo, dilation_h=dil[0], dilation_w=dil[1], groups=groups)
