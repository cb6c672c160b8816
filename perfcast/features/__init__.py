"""Features of tensor programs and devices: a registry of extractors (importing this package does not import TVM).

- `compact_ast`: CDMPP compact AST, (n_leaves, 50) leaf vectors + pre-order positional encoding
- `analytic`: 21 program-level static figures (FLOPs, bytes, trip counts, ..., cache footprint and traffic)
- `per_store`: TVM meta-schedule's PerStoreFeature, (n_stores, 164), or (164,) aggregated
- `device`: the 11 DeviceSpec features of a device
- `asm`: 55 instruction counts of the x86 assembly LLVM makes of a program (built, not run)
- `mca`: 5 llvm-mca figures of that assembly's innermost loops (cycles, throughput, dependency-chain bound)
"""

from . import analytic, asm, compact_ast, device, mca, per_store  # noqa: F401  (register the extractors)
from .analytic import ANALYTIC_FEATURES, AnalyticExtractor
from .asm import ASM_FEATURES, AsmExtractor
from .base import FeatureExtractor, as_primfunc, get_extractor, list_extractors, register
from .compact_ast import LEAF_FEATURES, CompactAST, CompactASTExtractor, positional_encoding
from .device import DEVICE_FEATURES, DeviceExtractor
from .mca import MCA_FEATURES, McaExtractor
from .per_store import PerStoreExtractor

__all__ = ["FeatureExtractor", "as_primfunc", "get_extractor", "list_extractors", "register",
           "CompactAST", "CompactASTExtractor", "LEAF_FEATURES", "positional_encoding",
           "AnalyticExtractor", "ANALYTIC_FEATURES", "PerStoreExtractor", "DeviceExtractor", "DEVICE_FEATURES",
           "AsmExtractor", "ASM_FEATURES", "McaExtractor", "MCA_FEATURES"]
