"""The piece block (block self-attention, Shen et al. 2018b): intra-block attention, the
block summaries, the inter-block attention and the gate written out in float64 per
sentence, block and head, against the layer (fused and explicit, left and right padding)."""

import math

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import output64, padded_batch, projections64
from locality_helpers import LENGTHS, attention
from piece_refs import assert_matches_reference, loop_apply64, loop_probs64


def block_reference(attn, x, kpm, bs):
    """Block self-attention written out per sentence, block and head (float64)."""
    piece = attn.pieces[0]
    B, H, D = x.size(1), attn.num_heads, attn.head_dim
    q, k, v = projections64(attn, x)
    blocks = []  # blocks[b] = list of lists of indices
    for b in range(B):
        real = [t for t in range(x.size(0)) if not kpm[b, t]]
        blocks.append([real[s:s + bs] for s in range(0, len(real), bs)])

    def same_block(b, h, i, j):
        return 0.0 if any(i in blk and j in blk for blk in blocks[b]) else float("-inf")

    r = loop_apply64(loop_probs64(q, k, kpm, same_block), v)  # (B, H, T, D) intra-block
    W = {name: (getattr(piece, name).weight.double(), getattr(piece, name).bias)
         for name in ("s2t_hidden", "s2t_logits", "inter_query", "gate", "context_proj")}

    def lin(name, vec):
        w, bias = W[name]
        return w @ vec + (bias.double() if bias is not None else 0.0)

    y = output64(attn, r)  # W_o r + b_o
    for b in range(B):
        r_cat = {t: torch.cat([r[b, h, t] for h in range(H)]) for blk in blocks[b] for t in blk}
        vbar = []  # per block: (H, D)
        for blk in blocks[b]:
            logits = {t: lin("s2t_logits", torch.sigmoid(lin("s2t_hidden", r_cat[t]))) for t in blk}
            summary = torch.zeros(H, D, dtype=torch.float64)
            for h in range(H):
                z = sum(math.exp(float(logits[t][h])) for t in blk)
                for t in blk:
                    summary[h] += math.exp(float(logits[t][h])) / z * r[b, h, t]
            vbar.append(summary)
        for m, blk in enumerate(blocks[b]):
            u = lin("inter_query", vbar[m].reshape(-1)).view(H, D)
            o = torch.zeros(H, D, dtype=torch.float64)
            for h in range(H):
                s = [float(u[h] @ vbar[n][h]) / math.sqrt(D) for n in range(len(blocks[b]))]
                z = sum(math.exp(si) for si in s)
                for n in range(len(blocks[b])):
                    o[h] += math.exp(s[n]) / z * vbar[n][h]
            g = torch.sigmoid(lin("gate", torch.cat([vbar[m].reshape(-1), o.reshape(-1)])))
            e = g * o.reshape(-1) + (1 - g) * vbar[m].reshape(-1)
            for t in blk:
                y[t, b] += lin("context_proj", e)
    return y


@pytest.mark.parametrize("bs", [1, 2, 3])
@pytest.mark.parametrize("backend", ["explicit", "fused"])
def test_block_matches_loop_reference(bs, backend):
    attn = attention("block", backend, block_layers="0", block_size=bs)
    with torch.no_grad():  # non-zero biases, so that they are checked too
        for name, p in attn.pieces[0].named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.3)
    assert_matches_reference(attn, lambda attn, x, kpm: block_reference(attn, x, kpm, bs), LENGTHS)


def test_block_size_one_block_covering_the_sentence_is_plain_attention_plus_context():
    """With one block covering the sentence, the intra-block output is plain attention:
    only the context term W_e e differs from the baseline layer."""
    attn = attention("block", block_layers="0", block_size=8)
    base = attention("")
    base.load_state_dict({k: v for k, v in attn.state_dict().items() if "pieces" not in k})
    x, kpm = padded_batch(LENGTHS, dtype=torch.float64)
    with torch.no_grad():
        attn.pieces[0].context_proj.weight.zero_()
    y, _ = attn(x, x, x, key_padding_mask=kpm)
    y0, _ = base(x, x, x, key_padding_mask=kpm)
    real = ~kpm.t()
    assert_close(y[real], y0[real])
