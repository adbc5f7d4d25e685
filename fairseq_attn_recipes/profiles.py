"""The model and training profiles of the recipes and the demo, in one place.

A profile is a set of recipe variables (lowercase here, the shell variable is its uppercase name:
``lr`` is ``LR``) with their default values, as strings written the way the recipes pass them to
fairseq. The shell recipes read a profile with ``eval "$(python -m fairseq_attn_recipes profile
NAME)"``, which sets each variable the environment left unset or empty (``LR=${LR:-7e-4}``): a
user's ``MAX_UPDATE=4000 bash recipes/bible_grc_en/train.sh`` wins over every profile.

* ``base`` / ``big``: the papers' setups (Vaswani et al., 2017: 8 GPUs; CSAN, Yang et al., 2019),
  chosen by the architecture (:func:`size_of_arch`), read by train.sh and evaluate.sh;
* ``bible``: the CPU preset of recipes/bible_grc_en (6,667 verses train a small model in minutes);
* ``toy``: the toy model and corpus (the embedded synthetic pair), read by the demo (``demo``) and
  by lengths.sh with ``QUICK=1`` (``toy-study``), each adding its own run length;
* ``demo-quick``: the demo's ``--quick`` (the tests' seconds-long run);
* ``paper-quick``: table1.sh / figure2.sh with ``QUICK=1`` (smoke runs).
"""

import shlex
from typing import Dict, Iterable, Optional


def model_args(enc_layers: int, dec_layers: int, dim: int, ffn: int, heads: int) -> str:
    """MODEL_ARGS of a small Transformer (the same sizes on both sides)."""
    return (f"--encoder-layers {enc_layers} --decoder-layers {dec_layers} --encoder-embed-dim {dim} "
            f"--decoder-embed-dim {dim} --encoder-ffn-embed-dim {ffn} --decoder-ffn-embed-dim {ffn} "
            f"--encoder-attention-heads {heads} --decoder-attention-heads {heads}")


# the papers' base setup: 8 GPUs of 4096 tokens, Adam epsilon 1e-9, 4000 warm-up updates
_PAPERS = {"paper_gpus": "8", "max_tokens": "4096", "warmup": "4000", "adam_eps": "1e-9",
           "save_interval_updates": "1000", "label_smoothing": "0.1"}
_TOY = {"corpus_sizes": "train=4000,valid=200,test=400", "bpe_merges": "150",
        "model_args": model_args(3, 2, 64, 128, 4), "max_tokens": "1500", "lr": "3e-3", "warmup": "60"}

PROFILES: Dict[str, Dict[str, str]] = {
    # N_AVG: the last 5 (base) / 20 (big) checkpoints averaged, as Vaswani et al.
    "base": {**_PAPERS, "lr": "7e-4", "dropout": "0.1", "max_update": "100000", "n_avg": "5"},
    "big": {**_PAPERS, "lr": "5e-4", "dropout": "0.3", "max_update": "300000", "n_avg": "20"},
    # 32K merges would learn whole verses; one CPU replaces the papers' 8 GPUs
    # chosen on the valid set by the sweep of docs/results/lengths_study.md ("The sweep that chose the CPU preset")
    "bible": {"bpe_merges": "4000", "paper_gpus": "1", "max_tokens": "2048", "max_update": "4000",
              "lr": "2e-3", "warmup": "600", "dropout": "0.2", "save_interval_updates": "500",
              "label_smoothing": "0.1", "model_args": model_args(3, 3, 128, 256, 4)},
    "toy": _TOY,
    # the toy target reverses every word, so joint BPE splits its side more: a length ratio of 1.5
    # would drop a third of the short pairs (clean_ratio 3)
    "toy-study": {**_TOY, "train_max_len": "7", "clean_ratio": "3", "max_update": "300", "update_freq": "1",
                  "save_interval_updates": "100", "log_interval": "50", "tensorboard": "0", "n_avg": "2",
                  "ar_trials": "1000"},
    # mid-epoch checkpoints every 10 updates: a killed demo resumes where it was saved
    "demo": {**_TOY, "max_epoch": "12", "save_interval_updates": "10", "bs_samples": "1000", "ar_trials": "10000"},
    "demo-quick": {"corpus_sizes": "train=300,valid=40,test=40", "bpe_merges": "60",
                   "model_args": model_args(3, 1, 32, 64, 4), "max_tokens": "1000", "lr": "3e-3", "warmup": "10",
                   "max_epoch": "2", "save_interval_updates": "1", "bs_samples": "1000", "ar_trials": "1000"},
    "paper-quick": {"ngpus": "0", "paper_gpus": "1", "max_update": "40", "max_tokens": "400", "warmup": "2",
                    "lr": "3e-3", "save_interval_updates": "20", "n_avg": "2", "log_interval": "1",
                    "gen_args": "--max-len-a 1.2 --max-len-b 5", "model_args": model_args(3, 1, 32, 64, 8),
                    "ar_trials": "1000"},
}


def size_of_arch(arch: str) -> str:
    """``big`` for an architecture registered as a big model (fairseq's naming: ``*_big``), else
    ``base``: the one place the recipes tell the two setups apart."""
    return "big" if arch.endswith("_big") else "base"


def profile(name: str) -> Dict[str, str]:
    if name not in PROFILES:
        raise KeyError(f"unknown profile {name!r}; profiles: {', '.join(PROFILES)}")
    return dict(PROFILES[name])


def shell_defaults(values: Dict[str, str], only: Optional[Iterable[str]] = None, export: bool = False) -> str:
    """``VAR=${VAR:-value}`` lines (bash), one per variable: a value the environment gives wins."""
    keep = None if only is None else {v.lower() for v in only}
    lines = []
    for key, value in values.items():
        if keep is None or key in keep:
            var = key.upper()
            lines.append(f"{'export ' if export else ''}{var}=${{{var}:-{shlex.quote(value)}}}")
    return "\n".join(lines)


def cmd_profile(args):
    from .step_inputs import die
    if (args.name is None) == (args.arch is None):
        die("profile: give a profile NAME or --arch ARCH (its base or big setup)")
    try:
        values = profile(args.name or size_of_arch(args.arch))
    except KeyError as e:
        die(e.args[0])
    print(shell_defaults(values, args.only, args.export))


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("profile", help="a model/training profile as bash defaults (VAR=${VAR:-value} lines)")
    p.add_argument("name", nargs="?", help="base, big, bible, toy, toy-study, demo, demo-quick, paper-quick")
    p.add_argument("--arch", help="the base or big profile of this architecture")
    p.add_argument("--only", nargs="+", metavar="VAR", help="only these variables")
    p.add_argument("--export", action="store_true"); p.set_defaults(fn=cmd_profile)
