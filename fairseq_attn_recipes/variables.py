"""The recipes' settings, one table: every environment variable a recipe script passes on to a
step or a tool, what it gives, what is allowed and which scripts read it.

``python -m fairseq_attn_recipes.variables SCRIPT...`` (recipes/lib/common.sh, ``check_variables``;
also the step ``check-variables`` of ``python -m fairseq_attn_recipes``) checks every variable of
the table that SCRIPT reads and the environment sets (an empty value is unset, as the recipes'
``${VAR:-default}`` read it), before the script does anything: a wrong value is one line naming the variable, its value and what is allowed
(exit 1), never a tool's error about its own flag after hours of work (``BPE_MERGES=abc`` was
refused by the BPE step's argparse, after tokenising). ``--set VAR=VALUE`` checks a value the
environment does not hold yet (a line of a sweep). A name no recipe reads, one edit from one it
reads (``MAX_UPDATES``, ``MAX_TOKEN``, ``max_update``: :func:`meant`), is refused first, naming both:
a typo is never left to the default (``--max-update 100000``). The environment's own names
(:data:`SYSTEM`: ``AR`` and ``LD`` are one edit from ``LR``) are left alone.

Checked elsewhere, each in one place, because the check needs more than the value
(:data:`CHECKED_IN_PLACE` names where): ``ARCH``/``ARCHS`` (the registry), ``SEEDS`` with
``SEED``, ``TRAIN_CONCAT`` with ``TRAIN_DOCS``, ``CONCAT`` with ``TEST_DOCS``, ``ZHEN_PARTS``,
``CPU_THREADS``, ``SWEEP``; the order of ``CLEAN_MIN`` and ``CLEAN_MAX`` (``recipe_defaults``, where their
defaults are set) and of ``NODE_RANK`` and ``NNODES`` (``train_main``, where both are read); paths, addresses and names (:data:`FREE`) where they are used; the
flags of ``MODEL_ARGS`` and ``EXTRA_ARGS`` by fairseq-train's own parser for the architecture, its
errors naming the variable (:mod:`.flag_origins`). tests/test_recipe_variables.py holds that every
variable the recipes read is in one of these tables.
"""

import math
import os
import re
import shlex
import sys
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Optional, Tuple

from .step_inputs import die, key_values

# the scripts (recipes/<name>/<script>.sh) that read a variable; a study that runs another script's
# steps (table1.sh trains and evaluates) checks that script's variables too (common.sh)
PREP = ("prepare", "train", "evaluate")  # the data's settings: made by prepare.sh, checked by the others
TRAIN = ("train",)
EVAL = ("evaluate",)
STUDY = ("table1", "lengths", "sweep", "align")  # the tables with significance tests


@dataclass(frozen=True)
class Check:
    """One kind of value: ``problem(value)`` says what is wrong ('' when nothing), ``allowed`` what
    is allowed, in words."""
    allowed: str
    problem: Callable[[str], str]


def integer(low: int = None, high: int = None) -> Check:
    if low == 1 and high is None:
        words = "a positive integer"
    elif low == 0 and high is None:
        words = "a non-negative integer"
    else:
        words = "an integer" + (f" from {low}" if low is not None else "") + (f" to {high}" if high is not None else "")

    def problem(value: str) -> str:
        if not re.fullmatch(r"-?[0-9]+", value):
            return "not an integer"
        n = int(value)
        return "out of range" if (low is not None and n < low) or (high is not None and n > high) else ""
    return Check(words, problem)


def number(low: float = None, high: float = None, low_open: bool = False, high_open: bool = False) -> Check:
    parts = []
    if low is not None:
        parts.append(f"{'above' if low_open else 'at least'} {low:g}")
    if high is not None:
        parts.append(f"{'below' if high_open else 'at most'} {high:g}")
    words = "a number" + (" " + " and ".join(parts) if parts else "")

    def problem(value: str) -> str:
        try:
            x = float(value)
        except ValueError:
            return "not a number"
        if not math.isfinite(x):
            return "not a finite number"
        if low is not None and (x < low or (low_open and x == low)):
            return "out of range"
        if high is not None and (x > high or (high_open and x == high)):
            return "out of range"
        return ""
    return Check(words, problem)


def one_of(*values: str, words: str = None) -> Check:
    return Check(words or " or ".join(values), lambda value: "" if value in values else "not allowed")


SWITCH = one_of("0", "1", words="1 (on) or 0 (off)")


def integers(low: int, sep: str = ",", odd: bool = False) -> Check:
    """A list of integers of at least ``low`` (odd ones with ``odd``), none twice."""
    kind = f"{'odd ' if odd else ''}integers of at least {low}"
    words = f"{kind} separated by {'commas' if sep == ',' else 'spaces'}, none twice"

    def problem(value: str) -> str:
        items = value.split(sep) if sep == "," else value.split()
        if any(not re.fullmatch(r"[0-9]+", i.strip()) for i in items):
            return "not a list of integers"
        ns = [int(i) for i in items]
        if any(n < low or (odd and n % 2 == 0) for n in ns):
            return "out of range"
        return "given twice" if len(set(ns)) != len(ns) else ""
    return Check(words, problem)


def flags() -> Check:
    """Command-line flags for a tool (split at whitespace): the first word is a flag."""
    def problem(value: str) -> str:
        try:
            words = shlex.split(value)
        except ValueError:
            return "not a list of flags"
        return "" if not words or words[0].startswith("-") else "not a list of flags"
    return Check("the tool's flags and their values, the first word a flag starting with '-'", problem)


def table1_rows(exclude_baseline: bool = False) -> Check:
    """Table 1 row keys (fairseq_attn_reports.table1), comma-separated."""
    from fairseq_attn_reports import table1
    keys = [r.key for r in table1.ROWS + table1.EXTRA_ROWS]
    if exclude_baseline:
        keys = [k for k in keys if k != table1.BASELINE]
        return Check(f"Table 1 rows other than {table1.BASELINE}, comma-separated: {', '.join(keys)}",
                     lambda value: "" if all(k.strip() in keys for k in value.split(",")) else "unknown row")

    def problem(value: str) -> str:
        try:
            table1.resolve_rows(value, registered=[r.arch for r in table1.ROWS + table1.EXTRA_ROWS])
        except table1.Table1Error:
            return "unknown row"
        return ""
    return Check(f"'all' (the paper's rows) or row keys, comma-separated, {table1.BASELINE} among them "
                 f"and at least one other: {', '.join(keys)}", problem)


def length_edges() -> Check:
    from fairseq_attn_reports.by_length import EDGES_HELP, parse_edges

    def problem(value: str) -> str:
        try:
            parse_edges(value)
        except ValueError:
            return "not allowed"
        return ""
    return Check(EDGES_HELP, problem)


def split_sizes() -> Check:
    from .toy_corpus_files import SIZES_ALLOWED, sizes_problem
    return Check(SIZES_ALLOWED, sizes_problem)


def eval_subset() -> Check:
    return Check("test, valid, or a joined test set of lengths.sh (concat/k<N>.test)",
                 lambda value: "" if re.fullmatch(r"test|valid|concat/k[0-9]+\.test", value) else "not allowed")


def sacrebleu_tokenizers() -> Check:
    names = ("13a", "intl", "zh", "ja-mecab", "ko-mecab", "char", "none", "spm", "flores101", "flores200")
    return one_of(*names, words="one of sacreBLEU's tokenisers: " + ", ".join(names))


@dataclass(frozen=True)
class Variable:
    gives: str            # what the value gives, after "give": "the number of BPE merges"
    check: Callable[[], Check]  # built when checked (some read another module's table)
    scripts: Tuple[str, ...]


def _c(check: Check) -> Callable[[], Check]:
    return lambda: check


#: every variable a recipe passes on to a step or tool, checked before the script does anything
VARIABLES: Dict[str, Variable] = {
    # the data (prepare.sh makes it; train.sh and evaluate.sh check a data folder against them)
    "BPE_TOOL": Variable("the subword tool", _c(one_of("subword-nmt", "sentencepiece")), PREP),
    "BPE_MERGES": Variable("the number of BPE merges (subword-nmt) or the vocabulary size (sentencepiece)",
                           _c(integer(1)), PREP),
    "JOINT": Variable("whether both languages share one BPE and one dictionary", _c(SWITCH), PREP),
    "CLEAN_MIN": Variable("the fewest subwords a training sentence may have", _c(integer(0)), PREP),
    "CLEAN_MAX": Variable("the most subwords a training sentence may have", _c(integer(1)), PREP),
    "CLEAN_RATIO": Variable("the largest length ratio of a training pair", _c(number(1.0)), PREP),
    "TRAIN_MAX_LEN": Variable("the most source words a training pair may have", _c(integer(1)), PREP),
    "STUDY_TRAIN_MAX_LEN": Variable("the study's training-length cap (TRAIN_MAX_LEN's default in lengths.sh and sweep.sh)",
                                    _c(integer(1)), ("lengths", "sweep")),
    "TRAIN_CONCAT_SEED": Variable("the draw of the random pairs TRAIN_CONCAT joins", _c(integer(0)), PREP),
    "PREPROCESS_ARGS": Variable("extra fairseq-preprocess flags", _c(flags()), PREP),
    "WORKERS": Variable("the processes of tokenisation and fairseq-preprocess", _c(integer(1)), ("prepare",)),
    "ALLOW_PARTIAL_DATA": Variable("whether training data with parts left out is allowed", _c(SWITCH), ("prepare",)),
    "ASPEC_TRAIN_LINES": Variable("the ASPEC training pairs read (the first N of train-1/2)", _c(integer(1)),
                                  ("prepare",)),
    "QUICK_SIZES": Variable("the sizes of the toy corpus", _c(split_sizes()), ("lengths",)),
    "QUICK_BPE_MERGES": Variable("the BPE merges of the toy corpus", _c(integer(1)), ("lengths",)),
    # training
    "NGPUS": Variable("the GPUs of this node (0: CPU)", _c(integer(0)), TRAIN + EVAL),
    "NNODES": Variable("the nodes that train together", _c(integer(1)), TRAIN),
    "NODE_RANK": Variable("this node's rank, 0 to NNODES-1", _c(integer(0)), TRAIN),
    "MASTER_PORT": Variable("the rendezvous port", _c(integer(1, 65535)), TRAIN),
    "CPU_WORKERS": Variable("the CPU processes per node", _c(integer(1)), TRAIN),
    "PAPER_GPUS": Variable("the GPUs whose effective batch is kept", _c(integer(1)), TRAIN),
    "MAX_TOKENS": Variable("the tokens of a batch per process", _c(integer(1)), TRAIN),
    "UPDATE_FREQ": Variable("the batches accumulated per update", _c(integer(1)), TRAIN),
    "MAX_UPDATE": Variable("the update the training stops at", _c(integer(1)), TRAIN),
    "WARMUP": Variable("the warm-up updates", _c(integer(0)), TRAIN),
    "LR": Variable("the peak learning rate", _c(number(0.0, low_open=True)), TRAIN),
    "ADAM_EPS": Variable("Adam's epsilon", _c(number(0.0, low_open=True)), TRAIN),
    "DROPOUT": Variable("the dropout probability", _c(number(0.0, 1.0, high_open=True)), TRAIN),
    "LABEL_SMOOTHING": Variable("the label smoothing", _c(number(0.0, 1.0, high_open=True)), TRAIN),
    "SAVE_INTERVAL_UPDATES": Variable("the updates between save points (0: at epoch ends only)", _c(integer(0)), TRAIN),
    "LOG_INTERVAL": Variable("the updates between log lines", _c(integer(1)), TRAIN),
    "PATIENCE": Variable("the validations without improvement that stop a training (lengths.sh: CONVERGE)",
                         _c(integer(1)), TRAIN),
    "VALIDATE_INTERVAL": Variable("the epochs between validations", _c(integer(1)), TRAIN),
    "VALIDATE_INTERVAL_UPDATES": Variable("the updates between validations (0: at epoch ends only)",
                                          _c(integer(0)), TRAIN),
    "KEEP_INTERVAL_UPDATES_PATTERN": Variable("save points at multiples of it are never pruned (lengths.sh: CURVE)",
                                              _c(integer(1)), TRAIN),
    "PRUNE_CHECKPOINTS": Variable("whether train.sh removes a PATIENCE run's epoch checkpoints that fairseq's rule "
                                  "for interval ones would prune (off: it prints the command)", _c(SWITCH), TRAIN),
    "SEED": Variable("the training's random seed", _c(integer(0)), TRAIN),
    "FP16": Variable("whether to train in float16 (GPU)", _c(SWITCH), TRAIN),
    "SHARE_DECODER_EMBED": Variable("whether the decoder's input and output embeddings are tied", _c(SWITCH), TRAIN),
    "TENSORBOARD": Variable("whether fairseq writes TensorBoard logs", _c(SWITCH), TRAIN),
    "MODEL_ARGS": Variable("extra fairseq-train flags of the model", _c(flags()), TRAIN),
    "EXTRA_ARGS": Variable("extra fairseq-train flags", _c(flags()), TRAIN),
    # evaluation
    "BEAM": Variable("the beam size", _c(integer(1)), EVAL),
    "LENPEN": Variable("the length penalty", _c(number(0.0)), EVAL),
    "N_AVG": Variable("the save points averaged", _c(integer(1)), EVAL),
    "EVAL_SUBSET": Variable("the subset evaluated", _c(eval_subset()), EVAL),
    "GEN_ARGS": Variable("extra fairseq-generate flags", _c(flags()), EVAL),
    "GEN_MAX_TOKENS": Variable("the tokens of a generation batch", _c(integer(1)), EVAL),
    "SACREBLEU_TOK": Variable("sacreBLEU's tokeniser", _c(sacrebleu_tokenizers()), EVAL + ("table1", "figure2", "figure3")),
    "TOK_BLEU": Variable("whether tokenised BLEU is scored too", _c(SWITCH), EVAL),
    "EVAL_AT_UPDATE": Variable("the update whose one checkpoint is evaluated, no average (lengths.sh: CURVE)",
                               _c(integer(1)), EVAL),
    "PAPER_METRIC": Variable("the metric the paper's table is compared with",
                             _c(one_of("bleu", "tokenized_bleu", "chrf")), EVAL),
    # studies and tables
    "QUICK": Variable("whether to run the quick CPU sizes", _c(SWITCH), ("table1", "figure2", "lengths")),
    "ROWS": Variable("the Table 1 rows", table1_rows, ("table1",)),
    "FIG3_ROWS": Variable("the Figure 3 systems", lambda: table1_rows(exclude_baseline=True), ("figure3",)),
    "WINDOWS": Variable("the 1D-CSAN windows of Figure 2", _c(integers(1)), ("figure2",)),
    "HEADS": Variable("the 2D-CSAN heads of Figure 2", _c(integers(1, odd=True)), ("figure2",)),
    "FIG2_WINDOW": Variable("the 2D-CSAN window of Figure 2", _c(integer(1)), ("figure2",)),
    "AR_TRIALS": Variable("the approximate randomisation trials", _c(integer(1)), STUDY),
    "BS_SAMPLES": Variable("the paired bootstrap samples", _c(integer(1)), ("lengths", "sweep", "align")),
    "LENGTH_EDGES": Variable("the source-length buckets", length_edges, ("lengths",)),
    "ALIGN_REDO": Variable("whether runs aligned before are aligned again", _c(SWITCH), ("align",)),
    "PER_HEAD": Variable("whether every head is aligned too", _c(SWITCH), ("align",)),
}

#: a variable whose check needs more than its value, checked where it is used (one place each)
CHECKED_IN_PLACE = {
    "ARCH": "check-arch (the registry; the nearest names)",
    "ARCHS": "lengths_main in recipes/lib/lengths.sh, then check-arch",
    "SEEDS": "check_seeds in recipes/lib/seeds.sh (with SEED)",
    "TRAIN_CONCAT": "check_train_concat in recipes/lib/common.sh (with TRAIN_DOCS)",
    "CONCAT": "lengths_check_concat in recipes/lib/lengths.sh (with TEST_DOCS)",
    "ZHEN_PARTS": "zhen_missing_parts in recipes/wmt17_zh_en/env.sh",
    "CPU_THREADS": "cpu_threads in recipes/lib/common.sh (its default from OMP_NUM_THREADS too)",
    "CURVE": "check_converge_curve in recipes/lib/converge.sh (against MAX_UPDATE and SAVE_INTERVAL_UPDATES)",
    "CONVERGE": "check_converge_curve in recipes/lib/converge.sh (with SAVE_INTERVAL_UPDATES)",
    "SWEEP": "sweep_lines in recipes/lib/sweep.sh (each line's variables: check-variables --set)",
}

#: the variables whose value is a path, an address or a name: used as given, each refused where it is
#: used (a file that does not exist, a folder of other settings) with the variable named
FREE = {
    "WORK": "the recipe's working folder", "DATA": "a data folder (check-data: its prepare.json)",
    "SAVE_DIR": "a run folder (its run record)", "TABLE1_DIR": "Table 1's folder (its settings.txt)",
    "FIGURE2_DIR": "Figure 2's folder (its settings.txt)", "LENGTHS_DIR": "the study's folder",
    "SWEEP_DIR": "the sweep's folder", "TENSORBOARD_DIR": "TensorBoard's folder", "RUNS": "run folders (align.sh)",
    "PYTHON": "the interpreter (common.sh: it must import torch, fairseq and this package)",
    "SRC": "the source language (the recipe's check_corpus_inputs, languages.py)", "TGT": "the target language",
    "TRAIN_SRC": "a file (prepare.sh: it exists, its lines and script)", "TRAIN_TGT": "a file", "VALID_SRC": "a file",
    "VALID_TGT": "a file", "TEST_SRC": "a file", "TEST_TGT": "a file", "TRAIN_DOCS": "a file (one id per training line)",
    "TEST_DOCS": "a file (one id per test line)", "COMET_MODEL": "a checkpoint (check-comet loads it first)",
    "ASPEC_DIR": "ASPEC's folder (check_corpus_inputs)", "EXTRA_TRAIN_PAIRS": "file pairs (extra_pairs_parts)",
    "STATMT_URL": "a mirror's address", "STATMT_DATA_URL": "a mirror's address", "HF_WMT_URL": "a mirror's address",
    "WANDB_PROJECT": "a Weights & Biases project (check_loggers: wandb installed)", "MASTER_ADDR": "node 0's address",
    "OMP_NUM_THREADS": "CPU_THREADS's default",
}

# TOKENIZER_<LANG>: the tokeniser of one language (fairseq_attn_recipes/tokenisation.py)
TOKENIZERS = ("moses", "moses-plain", "jieba", "mecab", "kytea")
TOKENIZER_PREFIX = "TOKENIZER_"


#: what the recipes set for themselves and pass to their own steps (never a user's setting)
INTERNAL = {"ARCHS_CHECKED", "CPU_RANKS", "LANG_FACTS_OF", "RECIPE_DIR", "RECIPE_TRAIN_DOCS", "RUN_SUFFIX",
            "VARIABLES_CHECKED", "VAR", "SLURM_JOB_ID", "VIRTUAL_ENV", "TRAIN_LOCK", "SLURM_NODEID",
            "RECIPE_FLAG_VARIABLES", "MKL_NUM_THREADS", "COMET_GPUS", "COMET_BATCH_SIZE", "SACREBLEU_SEED",
            "LOGLEVEL", "WORLD_SIZE", "RANK", "LOCAL_RANK", "SLURM_PROCID", "USAGE_EXAMPLE", "COMET_CHECKED"}

#: what the environment itself sets (a login, a shell, a compiler toolchain, a scheduler): a name one
#: edit from a recipe variable there is the system's, not a typo (AR and LD are one edit from LR)
SYSTEM = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "TERM", "LANG", "LANGUAGE",
          "TZ", "MAIL", "HOSTNAME", "HOST", "DISPLAY", "EDITOR", "VISUAL", "PAGER", "TMPDIR", "TEMP", "TMP", "_",
          "AR", "AS", "CC", "CXX", "CPP", "LD", "NM", "FC", "F77", "RANLIB", "STRIP", "OBJCOPY", "OBJDUMP",
          "READELF", "SIZE", "STRINGS", "GCC", "GXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "CPPFLAGS", "MAKEFLAGS",
          "COLUMNS", "LINES", "OSTYPE", "MACHTYPE", "HOSTTYPE", "UID", "EUID", "PPID", "RANDOM", "SECONDS",
          "NCPUS", "DATE"}  # NCPUS: PBS's (one edit from NGPUS)
SYSTEM_PREFIXES = ("LC_", "XDG_", "SSH_", "SLURM_", "CUDA_", "NCCL_", "OMP_", "MKL_", "KMP_", "CONDA_", "PYTHON",
                   "PYTEST", "TORCH", "GIT_", "DBUS_", "HF_", "TRANSFORMERS_", "NVIDIA_", "LD_", "PIP_", "VIRTUAL_")


def one_edit(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by exactly one edit: a letter added, dropped or changed, or two
    neighbours swapped (Damerau-Levenshtein distance 1)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) < len(b):
        return a[i:] == b[i + 1:]
    return a[i + 1:] == b[i + 1:] or (i + 1 < len(a) and a[i] == b[i + 1] and a[i + 1] == b[i] and a[i + 2:] == b[i + 2:])


def recipe_names() -> set:
    """Every name a recipe reads from the environment (the three tables) or sets for itself."""
    return set(VARIABLES) | set(CHECKED_IN_PLACE) | set(FREE) | INTERNAL


def meant(name: str) -> list:
    """The recipe variables a name the environment sets was meant to be ([] when it is one, or the
    environment's own): the same name in capitals, or one edit away (``MAX_UPDATES``: MAX_UPDATE;
    ``TOKENISER_EN``: TOKENIZER_EN)."""
    known, upper = recipe_names(), name.upper()
    if name in known or upper in SYSTEM or upper.startswith(SYSTEM_PREFIXES) or name.startswith(TOKENIZER_PREFIX):
        return []
    if upper in known:
        return [upper]
    near = sorted(k for k in known - INTERNAL if one_edit(upper, k))
    head, sep, lang = upper.rpartition("_")
    if sep and re.fullmatch(r"[A-Z]{2,3}", lang) and one_edit(head + sep, TOKENIZER_PREFIX):  # a language code
        near.append(TOKENIZER_PREFIX + lang)
    return near


def typo_line(name: str, value: str) -> str:
    """The one-line refusal of a variable no recipe reads, one edit from one it reads ('' otherwise)."""
    near = meant(name) if value != "" else []
    if not near:
        return ""
    gives = [f"{n} ({VARIABLES[n].gives})" if n in VARIABLES else n for n in near]
    shown = shlex.quote(value) if value != value.strip() or " " in value else value
    return (f"{name}={shown}: no recipe reads {name}; did you mean {' or '.join(gives)}? "
            f"Rename it ({name} -> {near[0]}), or unset {name}")


def variables_of(scripts: Iterable[str]) -> Dict[str, Variable]:
    wanted = set(scripts)
    return {name: v for name, v in VARIABLES.items() if wanted & set(v.scripts)}


def problem_line(name: str, value: str, variable: Optional[Variable] = None) -> str:
    """The one-line refusal of ``name=value`` ('' when it is allowed)."""
    if name.startswith(TOKENIZER_PREFIX) and name not in VARIABLES:
        check, gives = one_of(*TOKENIZERS), f"the tokeniser of {name[len(TOKENIZER_PREFIX):].lower()}"
    else:
        variable = variable or VARIABLES[name]
        check, gives = variable.check(), variable.gives
    if not check.problem(value):
        return ""
    shown = shlex.quote(value) if value != value.strip() or " " in value else value
    return f"{name}={shown}: give {gives}, {check.allowed}"


def check(scripts: Iterable[str], environ: Dict[str, str]) -> None:
    """Refuse (one line, exit 1) a name ``environ`` sets one edit from a recipe variable (a typo no
    recipe would read), then the first variable of ``scripts`` whose value ``environ`` sets and the
    table does not allow."""
    for name, value in sorted(environ.items()):
        line = typo_line(name, value)
        if line:
            die(line)
    for name, variable in variables_of(scripts).items():
        value = environ.get(name, "")
        if value != "":
            line = problem_line(name, value, variable)
            if line:
                die(line)
    if set(scripts) & set(PREP):
        for name, value in sorted(environ.items()):
            if name.startswith(TOKENIZER_PREFIX) and value != "":
                line = problem_line(name, value)
                if line:
                    die(line)


def cmd_check_variables(args):
    check(args.scripts, {**os.environ, **key_values(args.set)})


def main(argv=None) -> None:
    """``python -m fairseq_attn_recipes.variables SCRIPT... [--set VAR=VALUE]...``: the step alone, as the
    recipes call it before every script (the same as ``python -m fairseq_attn_recipes check-variables``,
    which imports this module alone too)."""
    from fairseq_attn_records.command_line import Parser
    ap = Parser(prog="python -m fairseq_attn_recipes.variables")
    sub = ap.add_subparsers(dest="cmd")
    add_parsers(sub)
    args = ap.parse_args(["check-variables", *(sys.argv[1:] if argv is None else argv)])
    args.fn(args)


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("check-variables", help="refuse a recipe variable's value the table does not allow (one line)")
    p.add_argument("scripts", nargs="+", help="the recipe scripts whose variables are checked (prepare, train, ...)")
    p.add_argument("--set", action="append", metavar="VAR=VALUE", help="a value the environment does not hold yet")
    p.set_defaults(fn=cmd_check_variables)


def markdown() -> str:
    """The table as docs/reference/variables.md shows it (:mod:`.reference_docs`; a test keeps the two the same)."""
    rows = ["| variable | what it gives | allowed | read by |", "|---|---|---|---|"]
    for name, v in VARIABLES.items():
        c = v.check()
        rows.append(f"| `{name}` | {v.gives} | {c.allowed} | {', '.join(v.scripts)} |")
    rows.append(f"| `TOKENIZER_<LANG>` | the tokeniser of a language | {' or '.join(TOKENIZERS)} | {', '.join(PREP)} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
