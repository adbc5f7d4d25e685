"""The core's self-attention (:class:`fairseq_attn_core.SelfAttention`) as a layer of
fairseq's Transformer: what fairseq adds to its own ``MultiheadAttention`` and the core
leaves out, so the model trains, decodes and loads checkpoints as before the core was
fairseq-free (same parameters, names, initialisation and numbers):

* fairseq's ``FairseqDropout`` holds the attention dropout rate (``--retain-dropout``
  and ``--retain-dropout-modules PluginSelfAttention`` reach it);
* quant noise on the four projections (``--quant-noise-pq``; none at the default 0);
* fairseq's upgrade of checkpoints that hold one ``in_proj_weight`` for q, k and v.
"""

from typing import List

from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.modules.multihead_attention import MultiheadAttention
from fairseq.modules.quant_noise import quant_noise

from fairseq_attn_core import AttentionPiece, AttentionSite, SelfAttention
from fairseq_attn_core.backends import DEFAULT, Policy


class PluginSelfAttention(SelfAttention):
    """The core's self-attention inside fairseq's Transformer. See module docstring."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        site: AttentionSite,
        pieces: List[AttentionPiece] = (),
        dropout: float = 0.0,
        backend: str = "auto",
        flex_compile: str = "auto",
        q_noise: float = 0.0,
        qn_block_size: int = 8,
        policy: Policy = DEFAULT,
    ):
        super().__init__(embed_dim, num_heads, site, pieces=pieces, dropout=dropout, backend=backend,
                         flex_compile=flex_compile, policy=policy)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        for proj in (self.k_proj, self.v_proj, self.q_proj, self.out_proj):
            quant_noise(proj, q_noise, qn_block_size)  # a forward hook when q_noise > 0; no draws

    def upgrade_state_dict_named(self, state_dict, name):
        """fairseq's upgrade (one ``in_proj_weight`` split into q, k, v), then the core's."""
        MultiheadAttention.upgrade_state_dict_named(self, state_dict, name)
        super().upgrade_state_dict_named(state_dict, name)
