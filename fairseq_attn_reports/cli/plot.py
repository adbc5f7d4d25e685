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
:mod:`fairseq_attn_plugins.reporting.attention_stats`) and, with ``--stats-json``,
writes them to a file. The sentence must be in the model's input form (same
tokenisation / BPE as the training data).

Stock fairseq models (``--arch transformer`` and the like) work too: their
self-attention is fairseq's own ``MultiheadAttention``, whose per-head
probabilities are taken from fairseq's explicit path. A model without any
self-attention, or a sentence longer than the model accepts, ends with a
one-line error.
"""

import argparse
import os
import sys
from typing import List, Optional

from fairseq_attn_records.command_line import Parser
from fairseq_attn_records.output_files import write_json


def get_parser() -> argparse.ArgumentParser:
    p = Parser(prog="fairseq-attn-plot", description=__doc__.split("\n\n")[0])
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


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    if not os.path.isfile(args.path):
        sys.exit(f"fairseq-attn-plot: checkpoint not found: {args.path}")
    if not os.path.isdir(args.data):
        sys.exit(f"fairseq-attn-plot: data dir not found: {args.data}")
    # the plugin first: it registers the model, loads checkpoints safely and, before fairseq is
    # imported, quiets fairseq's import-time notice and its INFO lines (quiet_imports)
    from fairseq_attn_plugins.reporting.attention_maps import (collect_attention, greedy_translate, layer_stats,
                                                               plot_layer, self_attention_sites)
    import torch
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
        write_json(args.stats_json, stats, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
