"""Convolution sublayers before self-attention (``cnns``), after Yu, Dohan,
Luong, Zhao, Chen, Norouzi and Le, ICLR 2018, "QANet: Combining Local
Convolution with Global Self-attention for Reading Comprehension"; the "Cnns"
row (+42.6M) of Table 1 of Yang et al. 2019 (CSAN): "several CNN layers ... the
output of which is fed to the subsequent SAN layer", in the lower layers. The
CSAN authors' code has no Cnns layer (``shared/design/csan_table1_baselines.md``
section 5); the sublayer follows QANet's encoder block (``localminimum/QANet``)::

    x <- x + Dropout(ReLU(Conv_k(LN(x)) + b))        repeated n times

on the input of each selected encoder layer (the core's ``layer_input`` hook,
called by the encoder layer before its self-attention sublayer), then the
layer runs unchanged. Conv_k is, per ``--cnns-conv``:

* ``separable`` (default, QANet): depthwise k x 1 filter per channel (no
  bias) then a pointwise C x C matrix (bias);
* ``full`` (Kim 2014's CNN): a full C x C x k convolution with bias.

Pre-norm (``--encoder-normalize-before``): the sublayers are pre-norm residual
blocks themselves and run on the layer input whatever the flag; with pre-norm
that input is the raw residual stream and the attention sublayer normalises the
convolutions' output (tests/test_pre_norm.py).

Padding: the LN output is zeroed at pad positions before every convolution,
and the convolution zero-pads the sentence ends, so left and right padding
give the same outputs for the real tokens.

Defaults and choices the papers leave open: n = 4 convolutions of width
k = 7 (QANet's embedding encoder; ``--cnns-convs``, ``--cnns-kernel`` odd),
the lower 3 encoder layers (``--cnns-layers 0-2``), dropout = ``--dropout``
after the ReLU (QANet drops every other sublayer and adds stochastic depth;
not reproduced), torch's LayerNorm (eps 1e-5: fairseq's ``LayerNorm`` without apex; with
apex on CUDA fairseq took apex's fused kernel, same parameters), PyTorch's default Conv1d init.

Parameters per conv: separable k C + C^2 + C + 2C (LN); full k C^2 + C + 2C.
The default is 4 x 267,264 = 1,069,056 per layer, 3.21M on 3 layers: the
paper's +42.6M is not reproduced. ``--cnns-conv full --cnns-kernel 3
--cnns-convs 18`` gives 18 x 787,968 = 14,183,424 per layer, 42,550,272 on 3
layers (42.6M): a count match only, no evidence that this was the design.

Backends: the attention itself is unchanged (fused or explicit). Encoder only;
incremental decoding is refused (decoder layers reject ``layer_input`` pieces).
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..piece import AttentionPiece, AttentionSite, Choice, Int, Layers, register_piece

CONVS = ("separable", "full")
MAX_CONVS = 64
MAX_KERNEL = 63


class ConvSublayer(nn.Module):
    """x + Dropout(ReLU(Conv(LN(x)))) over time, pads zeroed before the convolution."""

    def __init__(self, dim: int, kernel: int, kind: str, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.dropout = dropout
        if kind == "separable":
            self.depthwise = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim, bias=False)
            self.pointwise = nn.Conv1d(dim, dim, 1)
        else:
            self.depthwise = None
            self.pointwise = nn.Conv1d(dim, dim, kernel, padding=kernel // 2)

    def forward(self, x: Tensor, pad: Tensor) -> Tensor:
        y = self.norm(x).masked_fill(pad, 0.0)  # (T, B, C)
        y = y.permute(1, 2, 0)  # (B, C, T)
        if self.depthwise is not None:
            y = self.depthwise(y)
        y = F.relu(self.pointwise(y)).permute(2, 0, 1)  # (T, B, C)
        return x + F.dropout(y, p=self.dropout, training=self.training)


@register_piece
class ConvSublayers(AttentionPiece):
    """QANet convolution sublayers (--cnns-convs of them) on the input of a SAN layer (Yu et al. 2018)."""

    name = "cnns"
    incremental_ok = False
    test_flags = {"cnns_layers": "0", "cnns_convs": 2, "cnns_kernel": 3}
    sides = ("encoder",)
    settings = (
        Int("cnns_convs", 4, hi=MAX_CONVS,
            help=f"convolution sublayers before each selected encoder layer, "
                 f"1..{MAX_CONVS} (default 4)"),
        Int("cnns_kernel", 7, hi=MAX_KERNEL, odd=True, metavar="K",
            help=f"convolution width, odd, 1..{MAX_KERNEL} (default 7)"),
        Choice("cnns_conv", "separable", CONVS, metavar="KIND",
               help="'separable' (depthwise + pointwise, QANet; default) or 'full'"),
        Layers("cnns_layers", "0-2", "encoder layers preceded by convolutions",
               note="the lower 3 layers"),
    )

    def __init__(self, site: AttentionSite, args):
        super().__init__(site)
        C = site.num_heads * site.head_dim
        dropout = float(getattr(args, "dropout", 0.0) or 0.0)
        self.convs = nn.ModuleList(
            ConvSublayer(C, args.cnns_kernel, args.cnns_conv, dropout) for _ in range(args.cnns_convs)
        )

    def layer_input(self, x: Tensor, key_padding_mask) -> Tensor:
        if key_padding_mask is None:
            pad = torch.zeros(x.size(0), x.size(1), 1, dtype=torch.bool, device=x.device)
        else:
            pad = key_padding_mask.t()[:, :, None].to(torch.bool)  # (T, B, 1)
        for conv in self.convs:
            x = conv(x, pad)
        return x

    def extra_repr(self):
        return f"encoder layer {self.site.layer_idx}, convs={len(self.convs)}"
