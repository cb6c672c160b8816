"""`cmd`: CDMPP's cross-device fine-tuning (§5.3, Eq. 6-7): train on the target's measured programs *and* a replay
sample of the source devices' records, with `alpha` x CMD(source latents, target latents) pulling the two latent
distributions together, so that the decoder keeps working on what the encoder learned from the source devices.
"""

from __future__ import annotations

from .base import register_method
from .finetune import FineTune


@register_method
class CMDFineTune(FineTune):
    name = "cmd"
    uses_source = True
    EXTRA = dict(alpha=0.1, moments=5, source_weight=0.5)

    def _loss(self, m, net, seq, vec, z, y, loss_fn, src_batch):
        from ..models._torch import cmd

        p = self.p_
        zt = net.encode(seq, vec)
        sseq, svec, sz, sy = src_batch
        zs = net.encode(sseq, svec)
        return (loss_fn(net.decode(zt), z, y) + p["source_weight"] * loss_fn(net.decode(zs), sz, sy)
                + p["alpha"] * cmd(zs, zt, p["moments"]))
