"""Import a torch module into Relax through `torch.export` (weights become constants in the IRModule)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import torch
    import tvm


def torch_to_relax(module: "torch.nn.Module", example_inputs: Sequence["torch.Tensor"]) -> "tvm.IRModule":
    """`torch.export.export(module, inputs)` then `relax.frontend.torch.from_exported_program` (static shapes of
    `example_inputs`, parameters bound as constants: `keep_params_as_input=False`)."""
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    module = module.eval()
    with torch.no_grad():
        exported = torch.export.export(module, tuple(example_inputs))
        return from_exported_program(exported, keep_params_as_input=False)
