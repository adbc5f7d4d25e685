"""The argument lists of fairseq-train, fairseq-preprocess and fairseq-generate, built in one
place for the recipes (the ``fairseq-args`` step, recipes/lib/common.sh) and the demo.

Settings are recipe variables, lowercase (``lr`` is ``LR``); a setting that is missing or empty
leaves its flag out (fairseq's default). MODEL_ARGS, EXTRA_ARGS, PREPROCESS_ARGS and GEN_ARGS are
split at whitespace, as the shell splits them, and come last: they override what is before them.
"""

from typing import List, Mapping, Optional

# the recipes' fixed training settings (the papers'), under every profile; the demo keeps
# fairseq's defaults for these
RECIPE_TRAINING = {"warmup_init_lr": "1e-07", "weight_decay": "0.0", "keep_interval_updates": "20",
                   "label_smoothing": "0.1", "log_interval": "100", "seed": "1"}

# fairseq-train: (flag, the setting giving its value, or "=VALUE" for a fixed value)
_TRAIN = (("--optimizer", "=adam"), ("--adam-betas", "=(0.9, 0.98)"), ("--adam-eps", "adam_eps"),
          ("--clip-norm", "=0.0"), ("--lr", "lr"), ("--lr-scheduler", "=inverse_sqrt"),
          ("--warmup-updates", "warmup"), ("--warmup-init-lr", "warmup_init_lr"),
          ("--criterion", "=label_smoothed_cross_entropy"), ("--label-smoothing", "label_smoothing"),
          ("--dropout", "dropout"), ("--weight-decay", "weight_decay"), ("--max-tokens", "max_tokens"),
          ("--update-freq", "update_freq"), ("--max-update", "max_update"), ("--max-epoch", "max_epoch"),
          ("--save-dir", "save_dir"), ("--save-interval-updates", "save_interval_updates"),
          ("--keep-interval-updates", "keep_interval_updates"),
          ("--keep-interval-updates-pattern", "keep_interval_updates_pattern"), ("--patience", "patience"),
          ("--validate-interval", "validate_interval"), ("--validate-interval-updates", "validate_interval_updates"),
          ("--log-format", "=json"),
          ("--log-interval", "log_interval"), ("--seed", "seed"))


def _given(settings: Mapping[str, str], key: str) -> Optional[str]:
    value = settings.get(key)
    return None if value is None or str(value) == "" else str(value)


def train_args(data: str, user_dir: str, arch: str, settings: Mapping[str, str]) -> List[str]:
    """fairseq-train's arguments. Beyond the table above: ``joint`` (1: all embeddings shared,
    Vaswani et al.'s tied embeddings with a joint vocabulary; else the decoder's input and output
    embeddings unless ``share_decoder_embed`` is 0), ``fp16``, ``cpu`` and ``no_epoch_checkpoints``
    (1: the flag), ``num_workers``, ``tensorboard_logdir``, ``wandb_project``, then ``model_args``
    and ``extra_args``."""
    args = [data, "--user-dir", user_dir, "--arch", arch]
    for flag, key in _TRAIN:
        value = key[1:] if key.startswith("=") else _given(settings, key)
        if value is not None:
            args += [flag, value]
    if _given(settings, "joint") == "1":
        args.append("--share-all-embeddings")
    elif (_given(settings, "share_decoder_embed") or "1") == "1":
        args.append("--share-decoder-input-output-embed")
    for flag in ("fp16", "cpu", "no_epoch_checkpoints"):
        if _given(settings, flag) == "1":
            args.append("--" + flag.replace("_", "-"))
    for key in ("num_workers", "tensorboard_logdir", "wandb_project"):
        if _given(settings, key) is not None:
            args += ["--" + key.replace("_", "-"), settings[key]]
    return args + (_given(settings, "model_args") or "").split() + (_given(settings, "extra_args") or "").split()


def preprocess_args(src: str, tgt: str, destdir: str, *, trainpref: str = None, validpref: str = None,
                    testpref: str = None, joined: bool = False, srcdict: str = None, tgtdict: str = None,
                    dict_only: bool = False, workers: int = 1, extra: str = "") -> List[str]:
    """fairseq-preprocess's arguments: the splits given, a joined dictionary (JOINT=1) or the
    dictionaries given (a capped data-bin's, a joined test set's), then PREPROCESS_ARGS."""
    args = ["--source-lang", src, "--target-lang", tgt]
    for flag, pref in (("--trainpref", trainpref), ("--validpref", validpref), ("--testpref", testpref)):
        if pref:
            args += [flag, pref]
    args += ["--dict-only"] if dict_only else []
    args += ["--destdir", destdir] + (["--joined-dictionary"] if joined else [])
    args += (["--srcdict", srcdict] if srcdict else []) + (["--tgtdict", tgtdict] if tgtdict else [])
    return args + ["--workers", str(workers)] + (extra or "").split()


def generate_args(data: str, user_dir: str, checkpoint: str, subset: str, *, beam: str, lenpen: str,
                  bpe_tool: str = "subword-nmt", max_tokens: str = None, batch_size: str = None,
                  cpu: bool = False, extra: str = "") -> List[str]:
    """fairseq-generate's arguments: beam search on ``subset`` with the subword marks removed.
    ``--required-batch-size-multiple 1``: fairseq 0.12 silently drops a final batch smaller than
    the multiple."""
    args = [data, "--user-dir", user_dir, "--path", checkpoint, "--gen-subset", subset,
            "--beam", str(beam), "--lenpen", str(lenpen),
            "--remove-bpe=sentencepiece" if bpe_tool == "sentencepiece" else "--remove-bpe"]
    args += (["--max-tokens", str(max_tokens)] if max_tokens else []) + (["--batch-size", str(batch_size)] if batch_size else [])
    args += ["--num-workers", "0", "--required-batch-size-multiple", "1"] + (["--cpu"] if cpu else [])
    return args + (extra or "").split()


def check_loggers(s: dict) -> None:
    """The training logs asked for need their packages (one line, before any training): TensorBoard
    unless ``tensorboard`` is 0 (the package of fairseq's torch.utils.tensorboard writer), Weights &
    Biases with ``wandb_project``. Without TensorBoard, no ``tensorboard_logdir``."""
    from .step_inputs import die
    if s.get("tensorboard", "1") != "1":
        s.pop("tensorboard_logdir", None)
    elif not _importable("tensorboard"):
        die("TensorBoard logging needs the tensorboard package (pip install tensorboard), or set TENSORBOARD=0")
    if s.get("wandb_project") and not _importable("wandb"):
        die(f"WANDB_PROJECT={s['wandb_project']} needs wandb (pip install wandb; wandb login)")


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except Exception:
        return False
    return True


def cmd_fairseq_args(args):
    """fairseq-args train|preprocess|generate ...: the arguments, one a line (for ``mapfile``)."""
    from .step_inputs import key_values
    s = key_values(args.set)
    if args.tool == "train":
        s = {**RECIPE_TRAINING, **{k: v for k, v in s.items() if v}}
        check_loggers(s)
        out = train_args(args.data, args.user_dir, args.arch, s)
    elif args.tool == "preprocess":
        out = preprocess_args(s["src"], s["tgt"], args.destdir, trainpref=s.get("trainpref"),
                              validpref=s.get("validpref"), testpref=s.get("testpref"),
                              joined=s.get("joint") == "1", srcdict=s.get("srcdict"), tgtdict=s.get("tgtdict"),
                              dict_only=s.get("dict_only") == "1", workers=s.get("workers", "1"),
                              extra=s.get("preprocess_args", ""))
    else:
        out = generate_args(args.data, args.user_dir, s["path"], s["subset"], beam=s["beam"], lenpen=s["lenpen"],
                            bpe_tool=s.get("bpe_tool", "subword-nmt"), max_tokens=s.get("gen_max_tokens") or "8000",
                            cpu=s.get("cpu") == "1", extra=s.get("gen_args", ""))
    print("\n".join(out))


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("fairseq-args", help="fairseq-train / -preprocess / -generate arguments, one a line")
    p.add_argument("tool", choices=["train", "preprocess", "generate"]); p.add_argument("--data")
    p.add_argument("--user-dir"); p.add_argument("--arch"); p.add_argument("--destdir")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a recipe variable, lowercase")
    p.set_defaults(fn=cmd_fairseq_args)
