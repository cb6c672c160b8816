"""Import a torch module into Relax through `torch.export` (weights become constants in the IRModule)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import torch
    import tvm


def torch_to_relax(module: "torch.nn.Module", example_inputs: Sequence["torch.Tensor"]) -> "tvm.IRModule":
    """`torch.export.export(module, inputs)` then `relax.frontend.torch.from_exported_program` (static shapes of
    `example_inputs`, parameters bound as constants: `keep_params_as_input=False`)."""
    import warnings

    import torch
    from tvm.relax.frontend.torch import from_exported_program

    module = module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        # torch.export deep-copies its own tree specs through a class torch itself deprecated: a FutureWarning on
        # every network, about torch's code, not the user's (torch 2.13)
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                category=FutureWarning)
        exported = torch.export.export(module, tuple(example_inputs))
        return from_exported_program(exported, keep_params_as_input=False)
