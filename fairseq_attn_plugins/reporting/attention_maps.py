"""Attention maps of one sentence: the probabilities of every self-attention layer,
where the pieces and the masks let a query attend, heatmaps and per-head statistics.

Used by ``fairseq-attn-plot`` (:mod:`fairseq_attn_reports.cli.plot`); the statistics
are those of :mod:`fairseq_attn_plugins.reporting.attention_stats`.
"""

import logging
from typing import Dict, List

import torch
from fairseq.modules.multihead_attention import MultiheadAttention
from fairseq_attn_records.output_files import staged

from fairseq_attn_core import AttentionContext, SelfAttention
from .attention_stats import head_stats


def allowed_positions(module: SelfAttention, T: int, S: int, key_padding_mask=None,
                      attn_mask=None) -> torch.Tensor:
    """(H, T, S) bool: where the pieces, the padding and the causal mask let row 0 of the batch attend."""
    H = module.num_heads
    allowed = torch.ones(H, T, S, dtype=torch.bool)
    pieces = getattr(module, "pieces", ())  # fairseq's own MultiheadAttention: none
    if pieces:
        ctx = AttentionContext(site=module.site, bsz=1, tgt_len=T, src_len=S,
                               q_pos=torch.arange(T), k_pos=torch.arange(S),
                               key_padding_mask=None if key_padding_mask is None else key_padding_mask[:1].bool(),
                               training=False, incremental=False)
    for piece in pieces:
        m = piece.allowed_mask(ctx)
        if m is not None:
            m = m.cpu()
            while m.dim() > 3:
                m = m[0]
            allowed &= m.expand(H, T, S)
    if attn_mask is not None:
        am = attn_mask.cpu()
        allowed &= (~am if am.dtype == torch.bool else torch.isfinite(am)).expand(H, T, S)
    if key_padding_mask is not None:
        allowed &= ~key_padding_mask[0].bool().cpu()[None, None, :]
    return allowed


def collect_attention(model, src_tokens: torch.Tensor, prev_output_tokens: torch.Tensor,
                      sides=("encoder", "decoder")) -> List[Dict]:
    """Run one forward pass; return per self-attention layer the (H, T, S) probabilities.

    Each :class:`~fairseq_attn_core.SelfAttention` is re-run on its own inputs with
    ``need_head_weights=True`` (explicit path: same probabilities as the fused one);
    fairseq's own self-attention (stock models) likewise, through fairseq's explicit
    path (a throw-away incremental state keeps it off the fused F.multi_head_attention_forward).
    """
    records: List[Dict] = []
    handles = []
    where = self_attention_sites(model)

    def hook(module, args, kwargs, output):
        kw = dict(kwargs)
        names = ("query", "key", "value", "key_padding_mask", "incremental_state", "need_weights",
                 "static_kv", "attn_mask")
        kw.update(zip(names, args))
        kw["need_weights"], kw["need_head_weights"] = True, True
        if not isinstance(module, SelfAttention):
            kw["incremental_state"] = {}  # fairseq's explicit path returns per-head weights
        _, w = module.forward(**kw)  # bypasses the hooks
        probs = w[:, 0].detach().float().cpu()  # (H, T, S)
        T, S = probs.shape[1:]
        side, layer = where[module]
        records.append({
            "side": side,
            "layer": layer,
            "pieces": [p.name for p in getattr(module, "pieces", ())],
            "probs": probs,
            "allowed": allowed_positions(module, T, S, kw.get("key_padding_mask"), kw.get("attn_mask")),
        })

    for m, (side, _) in where.items():
        if side in sides:
            handles.append(m.register_forward_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            model(src_tokens, torch.tensor([src_tokens.size(1)]), prev_output_tokens)
    finally:
        for h in handles:
            h.remove()
    return records


def self_attention_sites(model) -> Dict:
    """module -> (side, layer) for every self-attention of the model: the plugin's
    :class:`~fairseq_attn_core.SelfAttention` and fairseq's own ``MultiheadAttention`` (stock models)."""
    out = {}
    for side in ("encoder", "decoder"):
        for layer, block in enumerate(getattr(getattr(model, side, None), "layers", None) or ()):
            attn = getattr(block, "self_attn", None)
            if isinstance(attn, SelfAttention):
                out[attn] = (attn.site.side, attn.site.layer_idx)
            elif isinstance(attn, MultiheadAttention) and getattr(attn, "self_attention", False):
                out[attn] = (side, layer)
    return out


def greedy_translate(model, src_tokens: torch.Tensor, eos: int, max_len: int) -> torch.Tensor:
    """(1, L) greedy output tokens, starting with EOS as fairseq's decoder input does."""
    out = torch.tensor([[eos]])
    src_lengths = torch.tensor([src_tokens.size(1)])
    with torch.no_grad():
        enc = model.encoder(src_tokens, src_lengths=src_lengths)
        for _ in range(max_len):
            logits, _ = model.decoder(out, encoder_out=enc)
            nxt = logits[0, -1].argmax().item()
            if nxt == eos:
                break
            out = torch.cat([out, torch.tensor([[nxt]])], dim=1)
    return out


def _frame(ax, allowed) -> None:
    """Draw the cell edges between allowed and masked cells."""
    T, S = allowed.shape
    segs = []
    for i in range(T):
        for j in range(S):
            if not allowed[i, j]:
                continue
            for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                ni, nj = i + di, j + dj
                if 0 <= ni < T and 0 <= nj < S and not allowed[ni, nj]:
                    if di:
                        y = i + di / 2
                        segs.append(((j - 0.5, y), (j + 0.5, y)))
                    else:
                        x = j + dj / 2
                        segs.append(((x, i - 0.5), (x, i + 0.5)))
    from matplotlib.collections import LineCollection

    ax.add_collection(LineCollection(segs, colors="white", linewidths=1.2))


def plot_layer(rec: Dict, q_labels: List[str], k_labels: List[str], path: str) -> None:
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    probs, allowed = rec["probs"].numpy(), rec["allowed"].numpy()
    H = probs.shape[0]
    ncols = min(H, 4)
    nrows = (H + ncols - 1) // ncols
    size = 0.35 * max(len(k_labels), 4) + 1.5
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols + 1, size * nrows + 0.6), squeeze=False,
                             layout="constrained")
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#d0d0d0")
    for h in range(nrows * ncols):
        ax = axes[h // ncols][h % ncols]
        if h >= H:
            ax.axis("off")
            continue
        shown = np.ma.masked_array(probs[h], mask=~allowed[h])
        im = ax.imshow(shown, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        if not allowed[h].all():  # frame the allowed region (window / mask boundary)
            _frame(ax, allowed[h])
        ax.set_title(f"head {h}", fontsize=9)
        ax.set_xticks(range(len(k_labels)))
        ax.set_xticklabels(k_labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(q_labels)))
        ax.set_yticklabels(q_labels, fontsize=7)
    pieces = ",".join(rec["pieces"]) or "plain"
    fig.suptitle(f"{rec['side']} self-attention, layer {rec['layer']} ({pieces}); grey = masked")
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8)
    with staged(path, ".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)


def layer_stats(records: List[Dict]) -> List[Dict]:
    rows = []
    for rec in records:
        st = head_stats(rec["probs"])
        for h in range(rec["probs"].size(0)):
            rows.append({"side": rec["side"], "layer": rec["layer"], "head": h,
                         **{k: float(v[h]) for k, v in st.items()}})
    return rows
