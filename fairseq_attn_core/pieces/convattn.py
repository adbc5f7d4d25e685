"""Convoluted attention (``convattn1d``, ``convattn2d``), Dufter, Schmitt &
Schütze, COLING 2020, "Increasing Learning Efficiency of Self-Attention
Networks through Direct Position Interactions, Learnable Temperature, and
Convoluted Attention" (aclanthology 2020.coling-main.324; code pdufter/convatt).

A convolution post-processes every head's attention probabilities
sigma(A) = softmax(logits) (T queries x S keys) before they weight the
values; the result is NOT renormalised::

    o^h = f(conv^h(sigma(A^h)) + b^h) V^h,     f = ReLU by default

* ``convattn1d``: per head, t filters of width k (default 3) slide over the
  query rows; the key columns are the t input channels and the t filters give
  the t output columns:
  ``C_io = b_o + sum_c sum_r W_{o,c,r} sigma(A)_{i+r-k//2, c}`` (t = maximum
  sentence length ``--convattn-max-len``, default 256: t*t*k + t parameters
  per head and layer, so keep t small. ``--max-source-positions`` (given or
  fairseq's default 1024) is lowered to t at model build with a warning, so
  fairseq skips longer training pairs, and the model refuses longer
  validation pairs before the first update (see ``AttnTransformerModel.
  max_positions``); an input longer than t that reaches the layer anyway
  fails with an error naming the flag).
* ``convattn2d``: per head, one k x k filter (default 3 x 3) plus a bias over
  the (query, key) plane: ``C_ij = b + sum_{r,s} W_{r,s} sigma(A)_{i+r-k//2, j+s-k//2}``.

Verified in the authors' Keras code (models/seqlabel.py,
``MultiHeadSelfAttentionconv`` / ``...conv2d``): ``Conv1D(max_len,
cnn_filter_width, padding='same')`` on the (batch, query, key) probabilities
(so query rows are the steps and key columns the channels) and
``Conv2D(1, cnn_filter_width, padding='same')`` on (batch, 1, query, key);
both with bias, ``activation_function`` (default relu), filter width 3,
Keras' default glorot-uniform kernels and zero biases; no renormalisation.
There they are used in every layer (``--convattn-layers`` default ``all``).

Padding: padded query rows and key columns are zeroed before and after the
convolution, so with 'same' zero padding the real block sees exactly what an
unpadded sentence sees. For the 1D form the channel index must be the key's
position within its sentence: columns are re-aligned per sentence (left
padding would otherwise shift every key by the pad count).

Options: ``--convattn-kernel`` odd width 1..15 (default 3),
``--convattn-activation`` ``relu`` (default) or ``linear``,
``--convattn-init`` ``glorot`` (default, as the authors) or ``identity``
(centre tap = identity, bias 0: starts as the baseline).

Encoder only: the convolution over query rows mixes row i with row i+1, which
in a decoder would leak the next target token. Conflicts with csan2d (its key
axis concatenates several heads' keys). With csan1d the convolution sees the
windowed probabilities and may move weight up to k//2 positions outside the
window (still inside the sentence). Backends: explicit only
(``post_softmax`` needs the probabilities).
"""

import logging
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..piece import AttentionPiece, AttentionSite, Choice, Int, Layers, register_piece
from ..sentence_positions import sentence_positions
from ..settings import FAIRSEQ_MAX_POSITIONS

ACTIVATIONS = ("relu", "linear")
INITS = ("glorot", "identity")
MAX_KERNEL = 15
logger = logging.getLogger(__name__)
DEFAULT_MAX_LEN = 256
MAX_LEN_LIMIT = 4096
ONE_CONV_REASON = ("convattn1d and convattn2d are alternative convolutions of the same "
                   "probabilities (the paper compares them); pick one")
KERNEL = Int("convattn_kernel", 3, hi=MAX_KERNEL, odd=True, metavar="K",
             help=f"convoluted attention: filter width k (1D: k query rows; 2D: "
                  f"k x k), odd, 1..{MAX_KERNEL} (default 3)")
LAYERS = Layers("convattn_layers", "all", "encoder layers with convoluted attention",
                note="as in the authors' code")
ACTIVATION = Choice("convattn_activation", "relu", ACTIVATIONS, metavar="ACT",
                    help="activation after the convolution: 'relu' (default) or 'linear'")
INIT = Choice("convattn_init", "glorot", INITS, metavar="INIT",
              help="filter initialisation: 'glorot' (uniform, zero bias; default) or "
                   "'identity' (starts as the baseline)")
# None = not given: resolved against --max-source-positions in ConvAttention1D.validate
MAX_LEN = Int("convattn_max_len", None, hi=MAX_LEN_LIMIT, metavar="T",
              help=f"convattn1d: maximum sentence length t = number of filters and "
                   f"channels per head, 1..{MAX_LEN_LIMIT} (default: "
                   f"min(--max-source-positions, {DEFAULT_MAX_LEN}); when that lowers t "
                   f"below --max-source-positions, the latter is lowered to t with a "
                   f"warning, so fairseq refuses or skips longer sources)")
CSAN2D_REASON = ("convoluted attention convolves one head's query x key plane; 2D-CSAN's widened "
                 "key axis concatenates several heads' keys, so the kernel would mix unrelated heads")


class _ConvAttentionBase(AttentionPiece):
    fused_ok = False
    incremental_ok = False
    conflicts = {"csan2d": CSAN2D_REASON}
    sides = ("encoder",)
    settings = (KERNEL, LAYERS, ACTIVATION, INIT)

    def __init__(self, site: AttentionSite, args):
        super().__init__(site)
        self.kernel = args.convattn_kernel
        self.activation = args.convattn_activation

    def _activate(self, x: Tensor) -> Tensor:
        return torch.relu(x) if self.activation == "relu" else x

    @staticmethod
    def _real_masks(ctx, dtype):
        """(B|1, 1, T, 1) and (B|1, 1, 1, S) float masks, 1 = real token."""
        kpm = ctx.key_padding_mask
        if kpm is None:
            ones_q = torch.ones(1, 1, ctx.tgt_len, 1, dtype=dtype, device=ctx.k_pos.device)
            return ones_q, ones_q.new_ones(1, 1, 1, ctx.src_len)
        real_k = (~kpm).to(dtype)  # (B, S)
        return real_k.index_select(1, ctx.q_pos)[:, None, :, None], real_k[:, None, None, :]

    def post_softmax(self, probs: Tensor, ctx) -> Tensor:
        if ctx.kv_factor != 1:
            raise RuntimeError(f"{self.name}: " + CSAN2D_REASON)
        w_dtype = self.weight.dtype
        row, col = self._real_masks(ctx, w_dtype)
        x = probs.to(w_dtype) * row * col
        y = self._activate(self._convolve(x, ctx))
        return (y * row * col).to(probs.dtype)


@register_piece
class ConvAttention1D(_ConvAttentionBase):
    """t filters per head over query rows, key columns as channels (Dufter et al. 2020)."""

    name = "convattn1d"
    conflicts = {"csan2d": CSAN2D_REASON, "convattn2d": ONE_CONV_REASON}
    # --max-source-positions <= t makes fairseq refuse longer sentences up front
    test_flags = {"convattn_layers": "0", "convattn_max_len": 16, "max_source_positions": 16}
    settings = (KERNEL, LAYERS, ACTIVATION, INIT, MAX_LEN)

    @classmethod
    def validate(cls, args):
        # unset --max-source-positions: fairseq's build_model uses its default (1024)
        sources = getattr(args, "max_source_positions", None) or FAIRSEQ_MAX_POSITIONS
        if args.convattn_max_len is None:  # not given: t = min(sources, 256)
            args.convattn_max_len = min(sources, DEFAULT_MAX_LEN)
        super().validate(args)
        t = args.convattn_max_len
        # t filters of t channels per head grow as t^2 (25M parameters a layer at t = 1024), so
        # instead of refusing a model whose --max-source-positions exceeds t (fairseq-generate
        # re-validates with the task's default 1024), cap it at t: fairseq then refuses longer
        # sources up front (or skips them with --skip-invalid-size-inputs-valid-test)
        if sources > t:
            logger.warning(
                "convattn1d: lowering --max-source-positions from %d to --convattn-max-len %d; "
                "longer source sentences are skipped in training (fairseq's 'invalid sizes' "
                "warning) and refused up front in validation and generation (or skipped with "
                "--skip-invalid-size-inputs-valid-test)", sources, t)
            args.max_source_positions = t

    def __init__(self, site: AttentionSite, args):
        super().__init__(site, args)
        H, t, k = site.num_heads, args.convattn_max_len, self.kernel
        self.max_len = t
        # grouped conv1d: head h owns output channels h*t..h*t+t-1 and reads its own t channels
        self.weight = nn.Parameter(torch.zeros(H * t, t, k))
        self.bias = nn.Parameter(torch.zeros(H * t))
        with torch.no_grad():
            if args.convattn_init == "glorot":  # Keras: fan_in = fan_out = t * k
                limit = math.sqrt(6.0 / (2 * t * k))
                self.weight.uniform_(-limit, limit)
            else:
                self.weight.view(H, t, t, k)[:, range(t), range(t), k // 2] = 1.0

    def _convolve(self, x: Tensor, ctx) -> Tensor:
        B, H, T, S = x.shape
        t = self.max_len
        _, pos_k, lengths = sentence_positions(ctx)
        longest = int(lengths.max())
        if longest > t:
            raise ValueError(
                f"convattn1d (encoder layer {self.site.layer_idx}): a sentence of {longest} tokens "
                f"exceeds --convattn-max-len {t}; raise --convattn-max-len or filter longer "
                f"sentences (--max-source-positions {t})"
            )
        # channel c = key position c within the sentence (pads are zero: adding them is harmless)
        idx = pos_k.clamp(max=t - 1)[:, None, None, :].expand(B, H, T, S)
        aligned = x.new_zeros(B, H, T, t).scatter_add_(3, idx, x)
        inp = aligned.permute(0, 1, 3, 2).reshape(B, H * t, T)
        out = F.conv1d(inp, self.weight, self.bias, padding=self.kernel // 2, groups=H)
        out = out.view(B, H, t, T).permute(0, 1, 3, 2)  # (B, H, T, t)
        return out.gather(3, idx)

    def extra_repr(self):
        return f"encoder layer {self.site.layer_idx}, t={self.max_len}, kernel={self.kernel}"


@register_piece
class ConvAttention2D(_ConvAttentionBase):
    """One k x k filter per head over the query x key plane (Dufter et al. 2020)."""

    name = "convattn2d"
    conflicts = {"csan2d": CSAN2D_REASON, "convattn1d": ONE_CONV_REASON}
    test_flags = {"convattn_layers": "0"}
    unused_settings = (MAX_LEN,)

    def __init__(self, site: AttentionSite, args):
        super().__init__(site, args)
        H, k = site.num_heads, self.kernel
        self.weight = nn.Parameter(torch.zeros(H, 1, k, k))
        self.bias = nn.Parameter(torch.zeros(H))
        with torch.no_grad():
            if args.convattn_init == "glorot":  # Keras: fan_in = fan_out = k * k
                limit = math.sqrt(6.0 / (2 * k * k))
                self.weight.uniform_(-limit, limit)
            else:
                self.weight[:, 0, k // 2, k // 2] = 1.0

    def _convolve(self, x: Tensor, ctx) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, padding=self.kernel // 2, groups=x.size(1))

    def extra_repr(self):
        return f"encoder layer {self.site.layer_idx}, kernel={self.kernel}x{self.kernel}"
