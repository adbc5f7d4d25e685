"""fairseq-attn-plot: attention heatmaps and per-head statistics for one sentence.

    fairseq-attn-plot DATA_BIN --path CK/checkpoint_best.pt \\
        --sentence "rot kat_pl hund sieht" [--target "..."] [--out-dir attn_plots]

Loads the checkpoint (with the dictionaries of ``DATA_BIN``), runs the
sentence through the model (teacher-forced on ``--target``, or on the greedy
translation) and, for every self-attention layer of encoder and decoder,
writes ``<side>_layer<L>.png``: one heatmap per head of the attention
probabilities (query rows, key columns). Cells a piece or the padding /
causal mask forbids (e.g. outside a CSAN window) are drawn grey and framed.
It prints per-head entropy, Div and disagreement (see
:mod:`fairseq_attn_plugins.attention_stats`) and, with ``--stats-json``,
writes them to a file. The sentence must be in the model's input form (same
tokenisation / BPE as the training data).

Stock fairseq models (``--arch transformer`` and the like) work too: their
self-attention is fairseq's own ``MultiheadAttention``, whose per-head
probabilities are taken from fairseq's explicit path. A model without any
self-attention, or a sentence longer than the model accepts, ends with a
one-line error.
"""

import argparse
import json
import logging
import os
import sys
from typing import Dict, List, Optional

import torch
from fairseq.modules.multihead_attention import MultiheadAttention

from .. import checkpoint_safety  # noqa: F401  (safe loading; importing the package registers the model)
from ..attention import AttentionContext, PluginSelfAttention
from ..attention_stats import head_stats


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fairseq-attn-plot", description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="fairseq binarized data dir (for the dictionaries)")
    p.add_argument("--path", required=True, help="checkpoint file (.pt)")
    p.add_argument("--sentence", required=True, help="source sentence, tokenised like the training data")
    p.add_argument("--target", default=None, help="target sentence to force (default: greedy translation)")
    p.add_argument("--out-dir", default="attn_plots", help="folder for the PNG files (default attn_plots)")
    p.add_argument("--user-dir", default=None, help="extra fairseq --user-dir to import (this package is always loaded)")
    p.add_argument("--side", choices=("encoder", "decoder", "both"), default="both")
    p.add_argument("--max-len", type=int, default=100, help="max greedy translation length (default 100)")
    p.add_argument("--stats-json", default=None, help="also write the statistics to this JSON file")
    p.add_argument("--no-png", action="store_true", help="only print the statistics")
    return p


# --------------------------------------------------------------------------
def allowed_positions(module: PluginSelfAttention, T: int, S: int, key_padding_mask=None,
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

    Each :class:`PluginSelfAttention` is re-run on its own inputs with
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
        if not isinstance(module, PluginSelfAttention):
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
    :class:`PluginSelfAttention` and fairseq's own ``MultiheadAttention`` (stock models)."""
    out = {}
    for side in ("encoder", "decoder"):
        for layer, block in enumerate(getattr(getattr(model, side, None), "layers", None) or ()):
            attn = getattr(block, "self_attn", None)
            if isinstance(attn, PluginSelfAttention):
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
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def layer_stats(records: List[Dict]) -> List[Dict]:
    rows = []
    for rec in records:
        st = head_stats(rec["probs"])
        for h in range(rec["probs"].size(0)):
            rows.append({"side": rec["side"], "layer": rec["layer"], "head": h,
                         **{k: float(v[h]) for k, v in st.items()}})
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    if not os.path.isfile(args.path):
        sys.exit(f"fairseq-attn-plot: checkpoint not found: {args.path}")
    if not os.path.isdir(args.data):
        sys.exit(f"fairseq-attn-plot: data dir not found: {args.data}")
    from fairseq import checkpoint_utils, utils

    if args.user_dir:
        utils.import_user_module(argparse.Namespace(user_dir=args.user_dir))
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [args.path], arg_overrides={"data": args.data})
    model = models[0].cpu().float().eval()
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary

    if not self_attention_sites(model):
        sys.exit(f"fairseq-attn-plot: {type(model).__name__} has no self-attention layer this tool "
                 f"can read (neither fairseq's MultiheadAttention nor the plugin's)")
    max_src, max_tgt = model.max_positions()
    src = src_dict.encode_line(args.sentence, add_if_not_exist=False, append_eos=True).long()[None]
    if src.size(1) > max_src:
        sys.exit(f"fairseq-attn-plot: the sentence has {src.size(1)} tokens (with EOS), more than the "
                 f"{max_src} this model accepts (--max-source-positions, --convattn-max-len, "
                 f"--dpi-max-len); give a shorter sentence")
    n_unk = int((src == src_dict.unk()).sum())
    if n_unk:
        print(f"warning: {n_unk} source token(s) not in the dictionary (shown as {src_dict.unk_word})",
              file=sys.stderr)
    if args.target is not None:
        tgt = tgt_dict.encode_line(args.target, add_if_not_exist=False, append_eos=False).long()
        prev = torch.cat([torch.tensor([tgt_dict.eos()]), tgt])[None]
        if prev.size(1) > max_tgt:
            sys.exit(f"fairseq-attn-plot: --target has {prev.size(1)} tokens (with the leading EOS), "
                     f"more than the {max_tgt} this model accepts; give a shorter target")
    else:
        prev = greedy_translate(model, src, tgt_dict.eos(), min(args.max_len, max_tgt - 1))
        print("translation:", tgt_dict.string(prev[0, 1:]) or "(empty; pass --target to force one)")

    sides = ("encoder", "decoder") if args.side == "both" else (args.side,)
    records = collect_attention(model, src, prev, sides)
    if not records:
        sys.exit(f"fairseq-attn-plot: no {'/'.join(sides)} self-attention layer found in this model")
    src_labels = [src_dict[i] for i in src[0].tolist()]
    tgt_labels = [tgt_dict[i] for i in prev[0].tolist()]

    if not args.no_png:
        os.makedirs(args.out_dir, exist_ok=True)
    stats = layer_stats(records)
    for rec in records:
        labels = src_labels if rec["side"] == "encoder" else tgt_labels
        if not args.no_png:
            path = os.path.join(args.out_dir, f"{rec['side']}_layer{rec['layer']}.png")
            plot_layer(rec, labels, labels, path)
            print("wrote", path)

    print(f"{'side':8} {'layer':>5} {'head':>4} {'entropy':>9} {'div':>9} {'disagree':>9}")
    for r in stats:
        print(f"{r['side']:8} {r['layer']:5d} {r['head']:4d} {r['entropy']:9.4f} {r['div']:9.4f} "
              f"{r['disagreement']:9.4f}")
    if args.stats_json:
        tmp = args.stats_json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(stats, f, indent=1)
        os.replace(tmp, args.stats_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
