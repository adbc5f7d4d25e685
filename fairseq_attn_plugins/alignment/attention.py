"""Cross-attention of every decoder layer under teacher forcing, and hard word links from it.

fairseq's decoder returns one layer's head-averaged cross-attention (``alignment_layer``); this
reads every layer's, per head: a forward pre-hook on each decoder layer's ``encoder_attn``
(fairseq's :class:`MultiheadAttention` in every architecture of the package: the plugin's
pieces replace self-attention only) asks it for ``need_head_weights`` and a forward hook keeps
the weights. The model's own forward runs unchanged (the plugin core's self-attention on
whatever path it chooses), one sentence at a time (no padding).

Links (:func:`word_links`): target word j is linked to the source word with the largest
attention, the rows and columns of a word's subword pieces averaged (EOS column left out):

* ``naive``: the row of the decoder step that outputs the token;
* ``shift`` (Shift-Att, Chen et al., EMNLP 2020): the row of the step after, where the token is
  the decoder's input.
"""

from contextlib import contextmanager
from typing import List, Optional, Sequence, Set, Tuple

import torch

METHODS = ("naive", "shift")


def no_cross_attention_reason(model) -> Optional[str]:
    """Why the model has no cross-attention this tool can read, or None."""
    layers = getattr(getattr(model, "decoder", None), "layers", None)
    if not layers or getattr(model, "encoder", None) is None:
        return f"{type(model).__name__} is not an encoder-decoder model with decoder layers"
    if any(getattr(layer, "encoder_attn", None) is None for layer in layers):
        return "its decoder layers have no encoder-decoder attention (trained with --no-cross-attention)"
    return None


@contextmanager
def capture_cross_attention(model):
    """Yields a list that, after a forward pass, holds each decoder layer's (H, B, T, S) weights."""
    found: List[torch.Tensor] = []
    handles = []

    def ask(module, args, kwargs):
        return args, dict(kwargs, need_weights=True, need_head_weights=True)

    def keep(module, args, kwargs, output):
        found.append(output[1].detach())

    for layer in model.decoder.layers:
        handles.append(layer.encoder_attn.register_forward_pre_hook(ask, with_kwargs=True))
        handles.append(layer.encoder_attn.register_forward_hook(keep, with_kwargs=True))
    try:
        yield found
    finally:
        for h in handles:
            h.remove()


def teacher_forced_attention(model, src: torch.Tensor, tgt: torch.Tensor, eos: int) -> torch.Tensor:
    """(L, H, T, S) cross-attention for source ids ``src`` and reference ids ``tgt`` (1-D, each
    ending with EOS): row t is the step whose input is ``tgt[t-1]`` (EOS at t = 0) and which
    outputs ``tgt[t]``."""
    prev = torch.cat([torch.tensor([eos]), tgt[:-1]])[None]
    with capture_cross_attention(model) as found, torch.no_grad():
        model(src[None], torch.tensor([src.numel()]), prev)
    if len(found) != len(model.decoder.layers):
        raise RuntimeError(f"read {len(found)} cross-attention maps for {len(model.decoder.layers)} decoder layers")
    return torch.stack([w[:, 0] for w in found]).double()


def word_matrix(attn: torch.Tensor, src_words: Sequence[int], tgt_words: Sequence[int], method: str) -> torch.Tensor:
    """(..., target words, source words) attention of one layer or head ``attn`` (..., T, S), T and
    S counting EOS: rows of a target word's tokens (the output step, or the step after for
    ``shift``) and columns of a source word's tokens averaged; a word without tokens: NaN."""
    n_src = max(src_words, default=-1) + 1
    n_tgt = max(tgt_words, default=-1) + 1
    offset = {"naive": 0, "shift": 1}[method]
    rows = attn[..., offset:offset + len(tgt_words), :len(src_words)]
    R = torch.zeros(n_tgt, len(tgt_words), dtype=attn.dtype)
    R[list(tgt_words), list(range(len(tgt_words)))] = 1.0
    C = torch.zeros(len(src_words), n_src, dtype=attn.dtype)
    C[list(range(len(src_words))), list(src_words)] = 1.0
    counts = R.sum(1)[:, None] * C.sum(0)[None, :]
    return torch.where(counts > 0, (R @ rows @ C) / counts.clamp(min=1), torch.full_like(counts, float("nan")))


def word_links(matrix: torch.Tensor) -> Set[Tuple[int, int]]:
    """(source word, target word) links: each target word with tokens to its argmax source word."""
    has = ~torch.isnan(matrix).all(-1)
    best = torch.nan_to_num(matrix, nan=-1.0).argmax(-1)
    return {(int(best[j]), j) for j in range(matrix.size(0)) if has[j]}
