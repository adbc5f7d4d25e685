"""Direct position interactions (``dpi``), Dufter, Schmitt & Schütze, COLING 2020,
"Increasing Learning Efficiency of Self-Attention Networks through Direct
Position Interactions, Learnable Temperature, and Convoluted Attention"
(aclanthology 2020.coling-main.324; authors' code: pdufter/convatt).

Learned position-position scalars are added to the attention logits of every
head (tables are NOT shared across heads), after the 1/sqrt(d) scaling::

    e_ij^h = q_i^h . k_j^h / sqrt(d) + A^p,h_ij + A^r,h_ij

* ``P`` (absolute): A^p,h is a free t x t matrix per head;
* ``R`` (relative): A^r,h_ij = a^h_{i-j+t}, one scalar per offset i - j;
* ``PR``: both (``--dpi-mode p|r|pr``, default ``pr``).

i and j are positions *within the sentence* (0-based, whatever the padding
side), so a sentence gets the same scalars in any batch. t = ``--dpi-max-len``
(default 1024): inputs longer than t fail with an error naming the flag; when
fairseq's ``--max-source-positions`` (``--max-target-positions`` for the
decoder side; unset = fairseq's default 1024) is larger than t the model build
fails, so that no long sentence can crash a training run later: with a small t
pass ``--max-source-positions t`` and fairseq refuses longer sentences up front.

Relative form (``--dpi-relative-form``):

* ``paper`` (default): the paper's formula. With 1 <= i, j <= t the offsets
  i - j + t take the 2t - 1 values 1..2t-1, so we store those 2t - 1 scalars
  per head (the paper counts 2t; a_{2t} can never be reached).
* ``circulant``: the authors' code (models/selfattention.py) instead builds
  ``LinearOperatorCirculant(r)`` from 2t learnable values r, materialises it
  and keeps the top-left t x t block. That operator treats r as the
  *spectrum* of the circulant matrix and is cast to float, so the added matrix
  is A_ij = c_{(i-j) mod 2t} with c = Re(IDFT(r)): a SYMMETRIC circulant
  (c_k = c_{2t-k}, so A_ij = A_ji: t + 1 distinct values, one per |i - j|).
  This option reproduces that form.

Initialisation (``--dpi-init``): ``glorot`` (default) follows the authors'
Keras ``glorot_normal``: normal truncated at two standard deviations, std
sqrt(1/t) for A^p and (2t)^(-1/4) for the relative vector (Keras' fan rule
for 1-D weights). ``zeros`` starts from the baseline.

Layers: the paper adds the tables in the first layer only: ``--dpi-layers``
default ``0``; ``--dpi-sides`` default ``encoder`` (``decoder``/``both``
also work, incremental decoding included).

SAN+P (positions only through A^p, no token position embeddings) is the
configuration ``--dpi-mode p --no-token-positional-embeddings`` (fairseq's
flag; it removes the embeddings of encoder AND decoder, so use
``--dpi-sides both`` then). The piece never turns the embeddings off itself;
:data:`SAN_P` holds these defaults for the architecture that documents them:
``transformer_dpi_sanp_*``. SAN+P+R (both tables, no token position
embeddings, the paper's combined replacement of the embeddings) is
:data:`SAN_PR`: ``transformer_dpi_sanpr_*``. The plain ``dpi``
architectures keep fairseq's sinusoidal embeddings and add P+R on top (SAN+PE
plus the tables, not a configuration of the paper).

Backends: fused and explicit (the tables are an additive bias).
"""

import math

import torch
from torch import Tensor, nn

from ..piece import (
    AttentionPiece,
    AttentionSite,
    Choice,
    Int,
    Layers,
    PieceConfigError,
    Sides,
    register_piece,
)
from ..sentence_positions import sentence_positions
from ..settings import FAIRSEQ_MAX_POSITIONS

MODES = ("p", "r", "pr")
RELATIVE_FORMS = ("paper", "circulant")
INITS = ("glorot", "zeros")
MAX_LEN_LIMIT = 8192


# The paper's SAN+P: positions only through A^p (``--dpi-mode p``), fairseq's token
# position embeddings off (``--no-token-positional-embeddings`` removes them from encoder
# and decoder alike) and therefore the tables on both sides: ``transformer_dpi_sanp_*``.
SAN_P = {"no_token_positional_embeddings": True, "dpi_mode": "p", "dpi_sides": "both"}
# The paper's SAN+P+R (its Tables 2b/2c row "SAN+P+R"): A^p + A^r replace the position
# embeddings ("we propose to replace embeddings with a direct position interaction
# matrix"), tables on both sides, first layer: ``transformer_dpi_sanpr_*``.
SAN_PR = {"no_token_positional_embeddings": True, "dpi_mode": "pr", "dpi_sides": "both"}


@register_piece
class DirectPositionInteractions(AttentionPiece):
    """Learned absolute/relative position scalars on the logits (Dufter et al. 2020)."""

    name = "dpi"
    # fairseq's --max-source/target-positions must not exceed --dpi-max-len (checked at build)
    test_flags = {"dpi_layers": "0", "dpi_max_len": 16, "dpi_sides": "both",
                  "max_source_positions": 16, "max_target_positions": 16}
    settings = (
        Choice("dpi_mode", "pr", MODES,
               help="direct position interactions: 'p' (absolute t x t table), "
                    "'r' (relative, one scalar per offset) or 'pr' (both; default)"),
        Int("dpi_max_len", 1024, hi=MAX_LEN_LIMIT, metavar="T",
            help="maximum sentence length t of the position tables, "
                 f"1..{MAX_LEN_LIMIT}; longer inputs fail (default 1024, fairseq's "
                 "--max-source-positions)"),
        Sides("dpi_sides", "encoder", "position tables"),
        Choice("dpi_relative_form", "paper", RELATIVE_FORMS, metavar="FORM",
               help="relative table: 'paper' (a_{i-j+t}, default) or 'circulant' "
                    "(the authors' code: symmetric circulant from 2t values)"),
        Choice("dpi_init", "glorot", INITS, metavar="INIT",
               help="table initialisation: 'glorot' (truncated normal as in the "
                    "authors' code, default) or 'zeros'"),
        Layers("dpi_layers", "0", "layers with position tables", note="the first layer as in the paper"),
    )
    architectures = {"dpi_sanp": SAN_P, "dpi_sanpr": SAN_PR}

    @classmethod
    def check_combination(cls, args):
        t = args.dpi_max_len
        sides = cls.covered_sides(args)
        for side, positions_flag, fairseq_default in (
            ("encoder", "max_source_positions", FAIRSEQ_MAX_POSITIONS),
            ("decoder", "max_target_positions", FAIRSEQ_MAX_POSITIONS),
        ):
            if side not in sides:
                continue
            # unset -> fairseq's TransformerModel.build_model uses its default (1024)
            longest = getattr(args, positions_flag, None) or fairseq_default
            if longest > t:
                raise PieceConfigError(
                    f"--dpi-max-len {t} is shorter than --{positions_flag.replace('_', '-')} "
                    f"{longest}: sentences up to that length would not fit the position tables; "
                    f"raise --dpi-max-len (1..{MAX_LEN_LIMIT}) or lower "
                    f"--{positions_flag.replace('_', '-')}"
                )

    def __init__(self, site: AttentionSite, args):
        super().__init__(site)
        H, t = site.num_heads, args.dpi_max_len
        self.max_len = t
        self.mode = args.dpi_mode
        self.relative_form = args.dpi_relative_form
        self.absolute = None
        self.relative = None
        if "p" in self.mode:
            self.absolute = nn.Parameter(torch.zeros(H, t, t))
        if "r" in self.mode:
            n = 2 * t - 1 if self.relative_form == "paper" else 2 * t
            self.relative = nn.Parameter(torch.zeros(H, n))
        if args.dpi_init == "glorot":
            with torch.no_grad():
                if self.absolute is not None:
                    std = math.sqrt(1.0 / t)
                    nn.init.trunc_normal_(self.absolute, std=std, a=-2 * std, b=2 * std)
                if self.relative is not None:
                    std = (2 * t) ** -0.25
                    nn.init.trunc_normal_(self.relative, std=std, a=-2 * std, b=2 * std)

    def relative_values(self) -> Tensor:
        """(H, n) the value added for each offset index (see module docstring)."""
        if self.relative_form == "paper":
            return self.relative
        return torch.fft.ifft(self.relative.double(), dim=-1).real.to(self.relative.dtype)

    def score_bias(self, q: Tensor, k: Tensor, ctx) -> Tensor:
        pos_q, pos_k, lengths = sentence_positions(ctx)
        longest = int(lengths.max())
        t = self.max_len
        if longest > t:
            raise ValueError(
                f"dpi ({self.site.side} layer {self.site.layer_idx}): a sentence of {longest} "
                f"tokens exceeds --dpi-max-len {t}; raise --dpi-max-len or filter longer "
                f"sentences (--max-source-positions / --max-target-positions)"
            )
        # clamp: pad rows of a sentence may sit past its last token
        pos_q = pos_q.clamp(max=t - 1)[:, :, None]  # (B|1, T, 1)
        pos_k = pos_k.clamp(max=t - 1)[:, None, :]  # (B|1, 1, S)
        bias = None
        if self.absolute is not None:
            bias = self.absolute[:, pos_q, pos_k]  # (H, B|1, T, S)
        if self.relative is not None:
            if self.relative_form == "paper":
                idx = pos_q - pos_k + (t - 1)  # 0-based a_{i-j+t}
            else:
                idx = (pos_q - pos_k) % (2 * t)
            rel = self.relative_values()[:, idx]
            bias = rel if bias is None else bias + rel
        return bias.transpose(0, 1).to(q.dtype)  # (B|1, H, T, S)

    def extra_repr(self):
        return (f"{self.site.side} layer {self.site.layer_idx}, mode={self.mode}, t={self.max_len}, "
                f"relative_form={self.relative_form}")
