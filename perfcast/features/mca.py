"""How fast LLVM's own model of the CPU says a program's innermost loops run: `llvm-mca` columns.

The asm features (`asm.py`) count a loop body's instructions by class; they cannot see its dependency chains: a
reduction into one register runs at the FMA's latency, an unrolled one with several accumulators at its
throughput. LLVM's machine-code analyzer `llvm-mca` simulates a loop body on a CPU's scheduling model and says
both. This extractor builds the program for its target (`asm.program_asm`, as the asm features do), runs every
innermost loop body (`asm.innermost`) through one `llvm-mca -mcpu=CPU -iterations=100` (a code region per loop)
and returns `MCA_FEATURES`:

- `mca_cycles`: log2(1 + the loops' simulated cycles per iteration, summed);
- `mca_rthroughput`: log2(1 + their block reciprocal throughputs, summed);
- `mca_est_cycles`: log2(1 + FLOPs / the loops' floating-point lanes per pass x cycles per pass);
- `mca_latency_bound`: cycles / reciprocal throughput (above 1: a dependency chain binds, not the ports);
- `mca_loops`: the number of loops simulated.

A program without loops gets zeros; one whose loops llvm-mca refuses gets NaN (the trees' missing value). The
figures are LLVM 14's (`MCA_VERSION`, Debian's `llvm-14`; another version's scheduling models give other numbers,
so any other is refused). A target CPU that LLVM 14 does not know is simulated as a stand-in that runs its code
(`MCA_STAND_IN_CPU`: znver4 and znver5, whose AVX-512 LLVM 14's AMD models lack, as Ice Lake server cores). Measured on
5.7k-record samples of rocketlake and znver3 records (`bench/mca_features.py`, README Models): 1.7-3.2 points of
by_network MAPE for the tree member beside the asm columns; on an 11.5k sample 1.1 points, with Kendall tau .03
lower, so no model reads them (2026-12-07).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np

from .asm import AsmExtractor, program_asm
from .base import as_primfunc, register

MCA_FEATURES = ("mca_cycles", "mca_rthroughput", "mca_est_cycles", "mca_latency_bound", "mca_loops")
MCA_VERSION = 14  # LLVM major version of the llvm-mca whose scheduling models the columns are
# The stand-in for a CPU LLVM 14 does not know (znver4, znver5, emeraldrapids, ...): one that runs every x86 ISA
# extension up to AVX-512 (not AMX or AVX512-FP16). LLVM 14's AMD models (znver1-3) have no AVX-512, which znver4
# and znver5 code uses.
MCA_STAND_IN_CPU = "icelake-server"
MCA_ITERATIONS = 100
MCA_TIMEOUT_S = 120


@functools.cache
def mca_binary() -> str:
    """Path of an llvm-mca of LLVM `MCA_VERSION`; a PerfcastError naming the fix when there is none."""
    from ..errors import PerfcastError

    for name in (f"llvm-mca-{MCA_VERSION}", "llvm-mca"):
        path = shutil.which(name)
        if path is None:
            continue
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
        if f"LLVM version {MCA_VERSION}." in out:
            return path
    raise PerfcastError(f"the mca features need llvm-mca of LLVM {MCA_VERSION} on the PATH; install it "
                        f"(Debian: apt install llvm-{MCA_VERSION})")


@functools.cache
def known_cpus() -> frozenset[str]:
    """The x86 CPUs the pinned llvm-mca has scheduling models for (`llvm-mca -mcpu=help`)."""
    r = subprocess.run([mca_binary(), "-mcpu=help", "-mtriple=x86_64-unknown-linux-gnu"], capture_output=True,
                       text=True, timeout=30)
    names = set()
    for line in (r.stdout + r.stderr).splitlines():
        parts = line.split(" - Select the ")
        if len(parts) == 2:
            names.add(parts[0].strip())
    return frozenset(names)


def mca_cpu(target) -> str:
    """The llvm-mca CPU that simulates `target` (a dict or JSON text of an LLVM target): its `mcpu` when LLVM 14
    knows it, else `MCA_STAND_IN_CPU`; no `mcpu` is LLVM's generic `x86-64`."""
    target = json.loads(target) if isinstance(target, str) else dict(target or {})
    cpu = str(target.get("mcpu") or "x86-64")
    return cpu if cpu in known_cpus() else MCA_STAND_IN_CPU


def mca_regions(blocks: list[list[str]], cpu: str) -> list[tuple[float, float]]:
    """(cycles per iteration over `MCA_ITERATIONS` iterations, block reciprocal throughput) of each loop body
    (lines of AT&T assembly), from one llvm-mca run with a code region per body; NaNs if llvm-mca refuses the
    text (it is all or nothing)."""
    text = []
    for i, b in enumerate(blocks):
        text += [f"# LLVM-MCA-BEGIN L{i}", *b, f"# LLVM-MCA-END L{i}"]
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write("\n".join(text) + "\n")
    try:
        r = subprocess.run([mca_binary(), "-mtriple=x86_64-unknown-linux-gnu", f"-mcpu={cpu}",
                            f"-iterations={MCA_ITERATIONS}", "-resource-pressure=0", "-instruction-info=0", f.name],
                           capture_output=True, text=True, timeout=MCA_TIMEOUT_S)
    finally:
        os.unlink(f.name)
    lines = r.stdout.splitlines()
    cyc = [float(x.split(":")[1]) / MCA_ITERATIONS for x in lines if x.startswith("Total Cycles:")]
    rthr = [float(x.split(":")[1]) for x in lines if x.startswith("Block RThroughput:")]
    if r.returncode != 0 or len(cyc) != len(blocks) or len(rthr) != len(blocks):
        return [(float("nan"), float("nan"))] * len(blocks)
    return list(zip(cyc, rthr))


def mca_columns(asm: str, flops: float, cpu: str) -> np.ndarray:
    """(len(MCA_FEATURES),) float64 columns of an assembly text (module docstring) on llvm-mca CPU `cpu`. The
    floating-point lanes per pass are summed over the loop bodies as simulated (two innermost loops that share
    instructions count them twice, as llvm-mca runs them twice)."""
    from .asm import _lanes, classify, innermost, loops, parse

    bodies = [[(m, ops) for m, ops in func[a:b + 1] if not m.startswith("label:")]
              for func in parse(asm) for a, b in innermost(loops(func))]
    bodies = [b for b in bodies if b]
    if not bodies:
        return np.zeros(len(MCA_FEATURES))
    res = mca_regions([[f"\t{m}\t{ops}" for m, ops in b] for b in bodies], cpu)
    if not np.isfinite(res[0][0]):
        return np.full(len(MCA_FEATURES), np.nan)
    cycles, rthr = sum(c for c, _ in res), sum(t for _, t in res)
    lanes = sum(_lanes(classify(m, ops), m) for b in bodies for m, ops in b)
    est = (flops / lanes if lanes else 0.0) * cycles
    return np.array([np.log2(1 + cycles), np.log2(1 + rthr), np.log2(1 + est),
                     cycles / rthr if rthr > 0 else np.nan, len(res)])


@register
class McaExtractor(AsmExtractor):
    """llvm-mca figures of a program's innermost loops -> float64 vector of length 5 (`MCA_FEATURES`).

    `target`: the LLVM target to compile for and simulate (dict or JSON; default this machine's, as `asm`'s).
    """

    name = "mca"
    version = 1

    def feature_names(self) -> list[str]:
        return list(MCA_FEATURES)

    @staticmethod
    def check_tools() -> None:
        mca_binary()

    def extract(self, program) -> np.ndarray:
        from .analytic import AnalyticExtractor

        func = as_primfunc(program)
        target = self._target()
        return mca_columns(program_asm(func, target), AnalyticExtractor().figures(func)["flops"], mca_cpu(target))
