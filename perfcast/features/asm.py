"""What LLVM made of a program: instruction counts of its x86 assembly.

A TIR schedule says which loops are unrolled and vectorized, but the speed of a CPU kernel also depends on what LLVM
then does with it: its own unrolling, SLP vectorization of scalar code, register allocation (spills), gathers for
strided vector loads. The compact AST and TVM's per-store features cannot see those decisions; the assembly can.
This extractor builds the program with `tvm.build` for its target (no running: ~0.1 s) and counts its instructions
by class, over the whole compute code and over the innermost loops (a loop is a backward jump to a label above
it; an innermost loop contains no other), which is where a kernel spends its time.

TVM's runtime helpers (`__tvm_set_raised*`, `__TVMBackend*`, half-float conversions) are skipped; the argument-
checking wrapper (`__tvm_ffi_*`) is read, because LLVM inlines a small program's compute code into it.

Output (`ASM_FEATURES`, all log2(1 + x)): per class, the count in all compute code and in the innermost loops'
bodies; then the number of loops, the innermost loops, the deepest nesting, the longest innermost body, and two
estimates of executed work: the program's FLOPs divided by the floating-point lanes one pass of the innermost
loops does, times that pass's instructions (or memory accesses).
"""

from __future__ import annotations

import json
import re
import warnings

import numpy as np

from .base import FeatureExtractor, as_primfunc, register

# instruction classes, tested in order: the first that matches counts (mnemonic, operand text) -> class
CLASSES = ("fma_zmm", "fma_ymm", "fma_xmm", "fma_scalar", "fp_zmm", "fp_ymm", "fp_xmm", "fp_scalar", "div_sqrt",
           "gather", "scatter", "broadcast", "shuffle", "vec_int", "vload", "vstore", "load", "store", "spill", "lea",
           "call", "branch", "int_alu", "other")
_SKIP = re.compile(r"^(__tvm_set_raised|__TVMBackend|__truncsfhf2|__extendhfsf2|__gnu_|__float)")
_FP_OPS = re.compile(r"^v?(add|sub|mul|max|min)(p|s)[sdh]$")
_LABEL = re.compile(r"^(\.?[\w.$]+):")
_JUMP = re.compile(r"^j[a-z]+$")


def _width(ops: str) -> str:
    return "zmm" if "%zmm" in ops else "ymm" if "%ymm" in ops else "xmm"


def classify(mnemonic: str, ops: str) -> str:
    """The class (`CLASSES`) of one AT&T instruction."""
    m = mnemonic
    mem = "(" in ops
    if m.startswith(("vfmadd", "vfmsub", "vfnmadd", "vfnmsub")):
        return "fma_scalar" if m.endswith(("ss", "sd", "sh")) else f"fma_{_width(ops)}"
    if m.startswith(("vdiv", "div", "vsqrt", "sqrt", "vrcp", "vrsqrt")) and m[-2:] in ("ps", "pd", "ss", "sd"):
        return "div_sqrt"
    if _FP_OPS.match(m):
        return "fp_scalar" if m.endswith(("ss", "sd", "sh")) else f"fp_{_width(ops)}"
    if m.startswith(("vgather", "vpgather")):
        return "gather"
    if m.startswith(("vscatter", "vpscatter")):
        return "scatter"
    if "broadcast" in m:
        return "broadcast"
    if m.startswith(("vinsert", "vextract", "vperm", "vshuf", "vunpck", "vblend", "vpshuf", "vpalign", "vmovhl",
                     "vmovlh", "vpermt", "vpermi", "vcompress", "vexpand")):
        return "shuffle"
    if m.startswith(("vpadd", "vpsub", "vpmul", "vpand", "vpor", "vpxor", "vpsll", "vpsrl", "vpsra", "vpcmp",
                     "vpmin", "vpmax", "vpternlog")):
        return "vec_int"  # vector integer arithmetic: gather indices, masks
    if "(%rsp" in ops:  # a stack slot: a spilled register, or a small local buffer TVM put on the stack
        return "spill"
    scalar_move = m in ("vmovss", "vmovsd", "movss", "movsd", "vmovd", "vmovq", "movd")
    if m.startswith(("vmov", "movap", "movup", "vpmov")) and "mm" in ops and mem and not scalar_move:
        # AT&T: the destination is the last operand
        return "vstore" if ops.rstrip().endswith(")") else "vload"
    if (m.startswith("mov") or scalar_move) and mem:
        return "store" if ops.rstrip().endswith(")") else "load"
    if m.startswith("lea"):
        return "lea"
    if m.startswith("call"):  # a library function (expf, tanhf, ...) or TVM's runtime
        return "call"
    if _JUMP.match(m) or m.startswith("ret"):
        return "branch"
    if m.startswith(("add", "sub", "inc", "dec", "imul", "cmp", "test", "and", "or", "xor", "shl", "shr", "sar",
                     "mov", "cmov", "neg", "not")):
        return "int_alu"
    return "other"


def _lanes(cls: str, mnemonic: str) -> int:
    """Floating-point operations one instruction of class `cls` does (an FMA counts two per lane)."""
    if not cls.startswith(("fma_", "fp_")):
        return 0
    width = cls.split("_")[1]
    bits = {"zmm": 512, "ymm": 256, "xmm": 128, "scalar": 0}[width]
    elem = 64 if mnemonic.endswith(("pd", "sd")) else 16 if mnemonic.endswith(("ph", "sh")) else 32
    lanes = bits // elem if bits else 1
    return lanes * (2 if cls.startswith("fma_") else 1)


def parse(asm: str) -> list[list[tuple[str, str]]]:
    """The compute functions of an assembly text, each a list of (mnemonic or 'label:NAME', operands)."""
    funcs, cur = [], None
    for raw in asm.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line:
            continue
        if not line[0].isspace():  # a label
            m = _LABEL.match(line)
            if not m:
                continue
            name = m.group(1)
            if not name.startswith("."):  # a function
                cur = None if _SKIP.match(name) else []
                if cur is not None:
                    funcs.append(cur)
            elif cur is not None:
                cur.append((f"label:{name}", ""))
            continue
        if cur is None:
            continue
        parts = line.split(None, 1)
        if parts[0].startswith("."):  # a directive
            continue
        cur.append((parts[0], parts[1] if len(parts) > 1 else ""))
    return funcs


def loops(func: list[tuple[str, str]]) -> list[tuple[int, int]]:
    """(first, last) instruction positions of every loop of a function: a jump back to a label above it."""
    where = {m[6:]: i for i, (m, _) in enumerate(func) if m.startswith("label:")}
    out = []
    for i, (m, ops) in enumerate(func):
        if _JUMP.match(m):
            target = ops.strip()
            if target in where and where[target] < i:
                out.append((where[target], i))
    return out


def innermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The loops of `spans` (`loops`) that contain no other."""
    return [s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]


ASM_FEATURES = (*(f"all_{c}" for c in CLASSES), *(f"inner_{c}" for c in CLASSES),
                 "n_loops", "n_innermost", "max_depth", "max_inner_body", "inner_fp_lanes",
                 "est_executed_insts", "est_executed_mem")


def asm_figures(asm: str, flops: float) -> dict[str, float]:
    """The raw (not log) figures of `ASM_FEATURES` for an assembly text and the program's FLOPs."""
    counts = {f"all_{c}": 0.0 for c in CLASSES} | {f"inner_{c}": 0.0 for c in CLASSES}
    n_loops = n_inner = depth = max_body = 0
    inner_insts = inner_mem = lanes = 0.0
    for func in parse(asm):
        spans = loops(func)
        inner = innermost(spans)
        n_loops += len(spans)
        n_inner += len(inner)
        in_inner = np.zeros(len(func), bool)
        nest = np.zeros(len(func), np.int32)
        for a, b in spans:
            nest[a:b + 1] += 1
        for a, b in inner:
            in_inner[a:b + 1] = True
            max_body = max(max_body, sum(not m.startswith("label:") for m, _ in func[a:b + 1]))
        depth = max(depth, int(nest.max()) if len(nest) else 0)
        for i, (m, ops) in enumerate(func):
            if m.startswith("label:"):
                continue
            c = classify(m, ops)
            counts[f"all_{c}"] += 1
            if in_inner[i]:
                counts[f"inner_{c}"] += 1
                inner_insts += 1
                inner_mem += c in ("vload", "vstore", "load", "store", "spill", "gather", "scatter", "broadcast")
                lanes += _lanes(c, m)
    passes = flops / lanes if lanes else 0.0
    return {**counts, "n_loops": n_loops, "n_innermost": n_inner, "max_depth": depth, "max_inner_body": max_body,
            "inner_fp_lanes": lanes, "est_executed_insts": passes * inner_insts,
            "est_executed_mem": passes * inner_mem}


def not_x86(target) -> str | None:
    """What `target` (a Target, its dict or JSON text; None: this machine) compiles for when that is not LLVM x86
    (`"cuda"`, `"llvm -mtriple=aarch64-linux-gnu"`), else None. A target that names no `mtriple` (as `local`'s never
    does) builds for this machine's triple. The one x86 test: `program_asm` refuses such a target, and
    `features_of_programs` gives its programs missing (NaN) asm features."""
    import tvm

    if isinstance(target, tvm.target.Target):
        target = target.export()
    target = json.loads(target) if isinstance(target, str) else dict(target or {})
    triple = str(target.get("mtriple") or tvm.target.codegen.llvm_get_system_triple())
    kind = str(target.get("kind", "llvm"))
    if kind == "llvm" and triple.startswith(("x86_64", "i686", "i386")):
        return None
    return f"llvm -mtriple={triple}" if kind == "llvm" else kind


def program_asm(func, target) -> str:
    """The x86 assembly `tvm.build` makes of a PrimFunc for `target` (a Target, its dict or JSON text); a
    PerfcastError for a target that is not x86 (its assembly would be counted as if it were)."""
    import tvm

    from ..errors import PerfcastError

    what = not_x86(target)
    if what is not None:
        raise PerfcastError(f"the asm features read x86 assembly, and target {what!r} is not x86")
    if isinstance(target, str):
        target = json.loads(target)
    with warnings.catch_warnings():  # tvm.build's deprecation note; it is the build the collector times
        warnings.simplefilter("ignore", DeprecationWarning)
        lib = tvm.build(func, target=tvm.target.Target(target))
    return lib.inspect_source("asm")


@register
class AsmExtractor(FeatureExtractor):
    """Instruction counts of a program's assembly -> float64 vector of length 55 (`ASM_FEATURES`), log2(1 + x).

    `target`: the LLVM target to compile for (dict or JSON; default this machine's `llvm -mcpu=native`-like
    target of the `local` device).
    """

    name = "asm"
    version = 1
    ndim = 1

    def __init__(self, target=None):
        self.target = json.loads(target) if isinstance(target, str) else target

    def params(self) -> dict:
        return {"target": self.target}

    def feature_names(self) -> list[str]:
        return list(ASM_FEATURES)

    @staticmethod
    def check_tools() -> None:
        """A PerfcastError naming the fix when a tool `extract` runs is missing (here none: TVM builds)."""

    def _target(self):
        if self.target is not None:
            return self.target
        from ..devices import get_device

        return json.loads(get_device("local").target_json)

    def extract(self, program) -> np.ndarray:
        from .analytic import AnalyticExtractor

        func = as_primfunc(program)
        flops = AnalyticExtractor().figures(func)["flops"]
        fig = asm_figures(program_asm(func, self._target()), flops)
        return np.log2(1.0 + np.array([fig[k] for k in ASM_FEATURES], np.float64))
