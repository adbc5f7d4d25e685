"""Position limits against the lengths a model will read: before a train-short / test-long run
trains, the architecture (its defaults and the user's MODEL_ARGS, resolved by fairseq itself)
must hold the longest valid and test sentence of the data-bin, and the longest output beam
search may write.

fairseq checks ``--max-source-positions`` / ``--max-target-positions`` against every sentence
(tokens with EOS) and caps generation at ``min(max_len_a * source tokens + max_len_b,
max_target_positions - 1)``. What this step does (``check-positions``):

* limits already large enough: prints nothing;
* sinusoidal or no absolute positions (``relpos``, ``rope``, ``alibi``, ``t5bias`` and the
  baseline): prints ``--max-source-positions S --max-target-positions T`` for the caller to add
  (sinusoidal tables are computed for any length, relative schemes have no table);
* learned position tables (``--encoder-learned-pos`` / ``--decoder-learned-pos``), whose rows
  beyond the limit do not exist, or a limit the user set in MODEL_ARGS: a one-line error naming
  the flag, before any training.
"""

import os
import shlex

from .files import die


def longest(data: str, split: str, src: str, tgt: str):
    """(longest source, longest target) of a binarised split in tokens with EOS."""
    from fairseq.data import data_utils
    out = []
    for lang in (src, tgt):
        prefix = os.path.join(data, f"{split}.{src}-{tgt}.{lang}")
        ds = data_utils.load_indexed_dataset(prefix, None)
        if ds is None:
            die(f"{prefix}.bin: no binarised {split} data in {data} (run prepare.sh)")
        out.append(int(max(ds.sizes)) if len(ds.sizes) else 0)
    return tuple(out)


def resolved_model_args(data: str, arch: str, model_args):
    """fairseq's own resolution of ARCH's defaults with MODEL_ARGS."""
    import fairseq_attn_plugins
    from fairseq import options
    user_dir = os.path.dirname(fairseq_attn_plugins.__file__)
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, [data, "--arch", arch, "--user-dir", user_dir, *model_args])


def needed_positions(lengths, max_len_a: float, max_len_b: int):
    """(source positions, target positions) that every split's sentences and beam search's
    longest output (``max_len_a * source + max_len_b``, plus EOS) need."""
    src = max(s for s, _ in lengths)
    tgt = max(max(t for _, t in lengths), int(max_len_a * src + max_len_b) + 1)
    return src, tgt


def given(flag: str, model_args) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in model_args)


def extra_positions(arch: str, data: str, model_args, need_src: int, need_tgt: int, splits) -> list:
    """The flags ARCH needs to hold ``need_src`` / ``need_tgt`` positions ([] if none); a one-line
    error for a learned table or a limit the user set in MODEL_ARGS."""
    cfg = resolved_model_args(data, arch, model_args)
    have = {"source": cfg.max_source_positions, "target": cfg.max_target_positions}
    need = {"source": need_src, "target": need_tgt}
    learned = {"source": "--encoder-learned-pos" if cfg.encoder_learned_pos else None,
               "target": "--decoder-learned-pos" if cfg.decoder_learned_pos else None}
    short = [side for side in ("source", "target") if have[side] < need[side]]
    for side in short:
        flag = f"--max-{side}-positions"
        what = (f"ARCH={arch}: {flag} is {have[side]}, but the {'/'.join(splits)} {side} sentences "
                f"and outputs need {need[side]} positions")
        if learned[side]:
            die(f"{what}, and {learned[side]} learns a table of {have[side]} rows, none beyond: train it with "
                f"{flag} {need[side]} or without {learned[side]}")
        if given(flag, model_args):
            die(f"{what}: MODEL_ARGS sets {flag} {have[side]}; raise it to {need[side]} or remove it")
    if not short:
        return []
    # both limits move together: fairseq's checks read them as a pair
    return ["--max-source-positions", str(max(need_src, have["source"])),
            "--max-target-positions", str(max(need_tgt, have["target"]))]


def cmd_check_positions(args):
    """One line per architecture: ``ARCH<TAB>flags`` (flags empty when its limits suffice)."""
    model_args = shlex.split(args.model_args or "")
    lengths = [longest(args.data, split, args.src, args.tgt) for split in args.splits]
    need_src, need_tgt = needed_positions(lengths, args.max_len_a, args.max_len_b)
    for arch in args.arch:
        print(f"{arch}\t{' '.join(extra_positions(arch, args.data, model_args, need_src, need_tgt, args.splits))}")
