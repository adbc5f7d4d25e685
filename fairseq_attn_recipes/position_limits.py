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
  beyond the limit do not exist, a limit the user set in MODEL_ARGS, or a piece whose own table
  caps the positions (``--dpi-max-len``, ``--convattn-max-len``; checked by building the model as
  training will): a one-line error naming the flag, before any training.
"""

import os
import shlex


from .step_inputs import die


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


def model_limits(data: str, arch: str, model_args):
    """(resolved model flags, (source, target) positions the built model reads): fairseq's own
    resolution of ARCH's defaults with MODEL_ARGS, then the model built on the data's
    dictionaries, so that the pieces' own checks and caps (``--dpi-max-len``,
    ``--convattn-max-len``) apply as in training."""
    from fairseq_attn_plugins import registration
    registration.register()
    from fairseq import tasks

    from .recording import resolve_train_args
    user_dir = os.path.dirname(registration.__file__)
    cfg = resolve_train_args([data, "--task", "translation", "--arch", arch, "--user-dir", user_dir, *model_args])
    try:
        model = tasks.setup_task(cfg.task).build_model(cfg.model)
    except ValueError as e:  # a piece refusing its flags (PieceConfigError is a ValueError)
        die(f"ARCH={arch} with MODEL_ARGS {' '.join(model_args)!r}: {str(e).splitlines()[0]}")
    src, tgt = model.max_positions()
    return cfg.model, (int(src), int(tgt))


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
    error for a learned table, a limit the user set in MODEL_ARGS, or a piece that caps them."""
    cfg, (src, tgt) = model_limits(data, arch, model_args)
    have = {"source": src, "target": tgt}
    need = {"source": need_src, "target": need_tgt}
    learned = {"source": "--encoder-learned-pos" if cfg.encoder_learned_pos else None,
               "target": "--decoder-learned-pos" if cfg.decoder_learned_pos else None}
    short = [side for side in ("source", "target") if have[side] < need[side]]
    for side in short:
        flag = f"--max-{side}-positions"
        what = (f"ARCH={arch}: the model reads {have[side]} {side} positions ({flag}), but the "
                f"{'/'.join(splits)} {side} sentences and outputs need {need[side]}")
        if learned[side]:
            die(f"{what}, and {learned[side]} learns a table of {have[side]} rows, none beyond: train it with "
                f"{flag} {need[side]} or without {learned[side]}")
        if given(flag, model_args):
            die(f"{what}: MODEL_ARGS sets {flag} {have[side]}; raise it to {need[side]} or remove it")
    if not short:
        return []
    # both limits move together: fairseq's checks read them as a pair
    extra = ["--max-source-positions", str(max(need_src, src)), "--max-target-positions", str(max(need_tgt, tgt))]
    _, (src2, tgt2) = model_limits(data, arch, model_args + extra)
    if src2 < need_src or tgt2 < need_tgt:
        die(f"ARCH={arch}: with {' '.join(extra)} the model still reads only {src2} source / {tgt2} target "
            f"positions (a piece caps them, e.g. --convattn-max-len), but the {'/'.join(splits)} sentences "
            f"need {need_src} / {need_tgt}: raise that piece's limit in MODEL_ARGS")
    return extra


def cmd_check_positions(args):
    """One line per architecture: ``ARCH<TAB>flags`` (flags empty when its limits suffice)."""
    # the plugin first: it imports fairseq without scikit-learn and scipy.stats (import_fairseq),
    # which this step never calls, and quiets fairseq's notice and INFO lines (quiet_imports)
    from fairseq_attn_plugins import registration
    registration.register()
    model_args = shlex.split(args.model_args or "")
    lengths = [longest(args.data, split, args.src, args.tgt) for split in args.splits]
    need_src, need_tgt = needed_positions(lengths, args.max_len_a, args.max_len_b)
    for arch in args.arch:
        print(f"{arch}\t{' '.join(extra_positions(arch, args.data, model_args, need_src, need_tgt, args.splits))}")


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("check-positions", help="print the position limits ARCH needs for the longest "
                       "valid/test sentence and output (or refuse: learned tables, a limit set in MODEL_ARGS)")
    p.add_argument("--data", required=True); p.add_argument("--arch", nargs="+", required=True)
    p.add_argument("--src", required=True); p.add_argument("--tgt", required=True)
    p.add_argument("--splits", nargs="+", default=["valid", "test"])
    p.add_argument("--max-len-a", type=float, default=0.0); p.add_argument("--max-len-b", type=int, default=200)
    p.add_argument("--model-args", default="", help="MODEL_ARGS, one string"); p.set_defaults(fn=cmd_check_positions)
