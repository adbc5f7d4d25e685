"""Every message names what the user set: each recipe variable's value is checked against one table
(fairseq_attn_recipes/variables.py) before the script does anything, in one line naming the variable
and what is allowed; a flag of MODEL_ARGS / EXTRA_ARGS refused by fairseq-train's parser names its
variable and the nearest flags of the architecture (the recipes' own: test_recipe_refusals, with a
moved run of other data refused in one error with its fix)."""

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import recipe_data  # noqa: E402
from test_recipes import RECIPES, prepared_ende, run  # noqa: E402

ROOT = os.path.dirname(RECIPES)

#: an allowed value of each variable of the table, written here (a new variable needs one)
ALLOWED = {
    "BPE_TOOL": "sentencepiece", "BPE_MERGES": "32000", "JOINT": "0", "CLEAN_MIN": "0", "CLEAN_MAX": "250",
    "CLEAN_RATIO": "1.5", "TRAIN_MAX_LEN": "20", "STUDY_TRAIN_MAX_LEN": "20", "TRAIN_CONCAT_SEED": "0",
    "PREPROCESS_ARGS": "--thresholdsrc 2", "WORKERS": "4", "ALLOW_PARTIAL_DATA": "1", "ASPEC_TRAIN_LINES": "2000000",
    "QUICK_SIZES": "train=300,valid=40,test=40", "QUICK_BPE_MERGES": "60", "NGPUS": "0", "NNODES": "2",
    "NODE_RANK": "1", "MASTER_PORT": "29500", "CPU_WORKERS": "2", "PAPER_GPUS": "8", "MAX_TOKENS": "4096",
    "UPDATE_FREQ": "2", "MAX_UPDATE": "100000", "WARMUP": "0", "LR": "7e-4", "ADAM_EPS": "1e-9", "DROPOUT": "0",
    "LABEL_SMOOTHING": "0.1", "SAVE_INTERVAL_UPDATES": "0", "LOG_INTERVAL": "100", "PATIENCE": "4", "VALIDATE_INTERVAL": "1",
    "VALIDATE_INTERVAL_UPDATES": "0", "KEEP_INTERVAL_UPDATES_PATTERN": "1000", "PRUNE_CHECKPOINTS": "1", "EVAL_AT_UPDATE": "2000", "SEED": "0", "FP16": "1",
    "SHARE_DECODER_EMBED": "0", "TENSORBOARD": "0", "MODEL_ARGS": "--encoder-layers 2", "EXTRA_ARGS": "--csan-window 3",
    "BEAM": "4", "LENPEN": "0.6", "N_AVG": "5", "EVAL_SUBSET": "concat/k4.test", "GEN_ARGS": "--max-len-a 2 --max-len-b 10",
    "GEN_MAX_TOKENS": "8000", "SACREBLEU_TOK": "zh", "TOK_BLEU": "0", "PAPER_METRIC": "tokenized_bleu", "QUICK": "1",
    "ROWS": "baseline,csan2d,rope", "FIG3_ROWS": "csan1d,csan2d", "WINDOWS": "3,5,7", "HEADS": "1,3", "FIG2_WINDOW": "11",
    "AR_TRIALS": "10000", "BS_SAMPLES": "1000", "LENGTH_EDGES": "10,20,30", "ALIGN_REDO": "1", "PER_HEAD": "0",
}

#: values out of range, each refused (a reference written plainly: what the table's words say)
OUT_OF_RANGE = {"MAX_UPDATE": "0", "BPE_MERGES": "-5", "DROPOUT": "1", "LR": "0", "CLEAN_RATIO": "0.5",
                "MASTER_PORT": "70000", "HEADS": "1,2", "WINDOWS": "3,3", "ROWS": "csan2d", "FIG3_ROWS": "baseline",
                "EVAL_SUBSET": "train", "JOINT": "yes", "FP16": "true", "BEAM": "4.0", "SEED": " 1", "QUICK_SIZES": "train=3,valid=4"}


def check(scripts, environ):
    """check-variables in this process: (exit status, stderr lines)."""
    from fairseq_attn_recipes import variables
    err = io.StringIO()
    code = 0
    with contextlib.redirect_stderr(err):
        try:
            variables.check(scripts, environ)
        except SystemExit as e:
            code = e.code
    return code, err.getvalue().splitlines()


def test_every_variable_of_the_table_refuses_a_wrong_value_in_one_line_naming_it():
    from fairseq_attn_recipes import variables
    assert set(ALLOWED) == set(variables.VARIABLES)
    for name, var in variables.VARIABLES.items():
        allowed = var.check().allowed
        assert check(var.scripts, {name: ALLOWED[name]}) == (0, []), name
        for bad in ("nope", OUT_OF_RANGE.get(name)):
            if bad is None:
                continue
            code, said = check(var.scripts, {name: bad})
            shown = shlex.quote(bad) if " " in bad else bad
            assert code == 1 and said == [f"error: {name}={shown}: give {var.gives}, {allowed}"], (name, bad, said)
        # read only by the scripts it names: another script leaves it alone
        others = {"prepare", "train", "evaluate", "table1", "figure2", "figure3", "lengths", "sweep", "align"} - set(var.scripts)
        assert check(sorted(others), {name: "nope"}) == (0, []), name
    # an empty value is unset (the recipes' ${VAR:-default})
    assert check(["train"], {"MAX_UPDATE": ""}) == (0, [])
    code, said = check(["prepare"], {"TOKENIZER_JA": "mecab", "TOKENIZER_EN": "moses3"})
    assert code == 1 and said == ["error: TOKENIZER_EN=moses3: give the tokeniser of en, moses or moses-plain or jieba or mecab or kytea"]


def test_the_table_covers_every_variable_the_recipes_read():
    from fairseq_attn_recipes import variables
    text = ""
    for d, _, files in os.walk(RECIPES):
        text += "".join(open(os.path.join(d, f)).read() for f in files if f.endswith(".sh"))
    read = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)(?::?[-+=?]|\})", text))
    loop = re.search(r"for v in (ADAM_EPS[^;]*);", text).group(1)  # train.sh's variables read as ${!v:-}
    read |= set(loop.replace("\\", " ").split())
    covered = variables.recipe_names()
    assert read - covered == set(), "read by a recipe but in no table of fairseq_attn_recipes/variables.py"
    assert not set(variables.VARIABLES) & (set(variables.CHECKED_IN_PLACE) | set(variables.FREE))


def typos(name):
    """Four typos of ``name``, written plainly: its last letter dropped, a letter doubled, two
    neighbours swapped, a letter changed."""
    middle = len(name) // 2
    changed = "X" if name[middle] != "X" else "Y"
    return [name[:-1], name[:middle] + name[middle] + name[middle:],
            name[:middle - 1] + name[middle] + name[middle - 1] + name[middle + 1:],
            name[:middle] + changed + name[middle + 1:]]


def test_a_typo_of_a_recipe_variable_is_refused_naming_both_never_ignored():
    """A sweep of 30 typos over the variables table (every third variable, each kind of edit in
    turn): every one is refused in one line naming the name set and the variable meant, by every
    script's check; a name the recipes read, or the environment sets, is not refused."""
    from fairseq_attn_recipes import variables
    known = set(variables.VARIABLES) | set(variables.CHECKED_IN_PLACE) | set(variables.FREE)
    names = sorted(known)
    swept = []
    for i, name in enumerate(names[::3]):
        typo = typos(name)[i % 4]
        if typo not in known and typo != name and len(name) > 3:
            swept.append((typo, name))
    swept = swept[:30]
    assert len(swept) == 30
    for typo, name in swept:
        code, said = check(["prepare"], {typo: "7"})
        assert code == 1 and len(said) == 1, (typo, said)
        assert said[0].startswith(f"error: {typo}=7: no recipe reads {typo}; did you mean "), said
        assert f" {name}" in said[0] and f"unset {typo}" in said[0], said
    # the examples of the issue, and the same name in lower case, in every script
    for typo, name in (("MAX_UPDATES", "MAX_UPDATE"), ("MAX_TOKEN", "MAX_TOKENS"), ("max_update", "MAX_UPDATE"),
                       ("TOKENISER_EN", "TOKENIZER_EN")):
        for scripts in (["train"], ["lengths"], ["evaluate"], ["align"]):
            code, said = check(scripts, {typo: "10"})
            assert code == 1 and f"did you mean {name}" in said[0] and f"({typo} -> {name})" in said[0], said
    # two variables one edit away: both named
    code, said = check(["prepare"], {"CLEAN_MIX": "3"})
    assert code == 1 and "did you mean CLEAN_MAX (" in said[0] and ") or CLEAN_MIN (" in said[0], said
    # the environment's own names (AR and LD are one edit from LR), the recipes' own, this process's
    # environment and an empty value (unset) are never refused
    for name in ("AR", "LD", "PATH", "HOME", "LC_ALL", "SEEDS", "ARCHS", "RUN_SUFFIX", "OMP_NUM_THREADS",
                 "TOKENIZERS_PARALLELISM", "NCPUS"):
        assert check(["train"], {name: "1"}) == (0, []), name
    assert check(["train"], {"MAX_UPDATES": ""}) == (0, [])
    assert check(["train", "prepare", "evaluate", "lengths"], dict(os.environ)) == (0, [])


@pytest.mark.parametrize("recipe, name, typo, meant", [("bible_grc_en", "train.sh", "MAX_UPDATES", "MAX_UPDATE"),
                                                       ("wmt14_en_de", "prepare.sh", "BPE_MERGE", "BPE_MERGES"),
                                                       ("bible_grc_en", "lengths.sh", "CONVERG", "CONVERGE"),
                                                       ("wmt14_en_de", "data.sh", "WROK", "WORK")])
def test_a_typo_is_refused_by_the_script_before_any_step(tmp_path, recipe, name, typo, meant):
    env = recipe_data.write_pair(str(tmp_path / "corpus"), "en", "de")
    work = tmp_path / "work"
    args = ("prune", "--yes") if name == "data.sh" else ()
    p = script(recipe, name, *args, env=dict(env, WORK=str(work), **{typo: "10"}))
    assert p.returncode == 1 and p.stdout == "" and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"error: {typo}=10: no recipe reads {typo}; did you mean {meant}"), p.stderr
    assert f"({typo} -> {meant})" in p.stderr
    assert not work.exists()


def test_the_docs_show_the_table():
    from fairseq_attn_recipes import variables
    docs = open(os.path.join(ROOT, "docs", "reference", "variables.md"), encoding="utf-8").read()
    assert variables.markdown() in docs


def script(recipe, name, *args, env):
    full = dict(os.environ, PYTHON=sys.executable, **env)
    full["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full["PATH"]
    return subprocess.run(["bash", os.path.join(RECIPES, recipe, name), *args], env=full, capture_output=True, text=True)


@pytest.mark.parametrize("recipe, name, var, value, allowed", [
    ("bible_grc_en", "train.sh", "MAX_UPDATE", "abc", "a positive integer"),
    ("wmt14_en_de", "table1.sh", "ROWS", "nope", "'all' (the paper's rows) or row keys"),
    ("wmt14_en_de", "prepare.sh", "BPE_MERGES", "abc", "a positive integer"),
    ("bible_grc_en", "lengths.sh", "QUICK", "yes", "1 (on) or 0 (off)"),
])
def test_a_wrong_setting_is_refused_by_the_script_in_one_line_before_any_step(tmp_path, recipe, name, var, value, allowed):
    env = recipe_data.write_pair(str(tmp_path / "corpus"), "en", "de")  # local files: prepare.sh would start at once
    work = tmp_path / "work"
    p = script(recipe, name, env=dict(env, WORK=str(work), **{var: value}))
    assert p.returncode == 1 and p.stdout == "", p.stdout
    assert len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"error: {var}={value}: give ") and allowed in p.stderr, p.stderr
    assert not work.exists()  # before any step: nothing made


@pytest.mark.parametrize("recipe", ["wmt14_en_de", "bible_grc_en"])
def test_figure2_with_windows_and_heads_both_empty_is_refused_before_any_step(tmp_path, recipe):
    """WINDOWS= or HEADS= set to nothing runs one half of Figure 2; both empty leave nothing to run."""
    work = tmp_path / "work"
    p = script(recipe, "figure2.sh", env={"WORK": str(work), "WINDOWS": "", "HEADS": ""})
    assert p.returncode == 1 and p.stdout == "", p.stdout
    assert p.stderr == "error: WINDOWS and HEADS are both empty\n", p.stderr
    assert not work.exists()


@pytest.mark.parametrize("given", [{"CLEAN_MIN": "300"}, {"CLEAN_MIN": "5", "CLEAN_MAX": "4"}])
def test_a_cleaning_range_that_drops_every_pair_is_refused_before_any_step(tmp_path, given):
    """CLEAN_MIN above CLEAN_MAX (the one given, or its default 250): one line naming both values."""
    env = recipe_data.write_pair(str(tmp_path / "corpus"), "en", "de")
    work = tmp_path / "work"
    p = script("wmt14_en_de", "prepare.sh", env=dict(env, WORK=str(work), **given))
    low, high = given["CLEAN_MIN"], given.get("CLEAN_MAX", "250")
    assert p.returncode == 1 and p.stdout == "" and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"error: CLEAN_MIN={low} is above CLEAN_MAX={high}: give CLEAN_MIN at most CLEAN_MAX"), p.stderr
    assert not work.exists()


@pytest.mark.e2e
def test_a_run_another_train_sh_trains_or_a_node_rank_outside_the_nodes_is_refused_before_training(tmp_path):
    import fcntl
    env = prepared_ende(tmp_path / "work")
    save = tmp_path / "run"
    # another training holds the run (its .train.lock: here this test): one line, nothing trained
    save.mkdir()
    with open(save / ".train.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        p = run("wmt14_en_de", "train.sh", dict(env, SAVE_DIR=str(save), MAX_UPDATE="2"), check=False)
    errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert p.returncode == 1 and errors == [f"error: SAVE_DIR={save}: another train.sh trains this run (it holds "
                                            f"{save}/.train.lock); wait for it to end, or give another SAVE_DIR"], p.stderr
    assert not any(f.startswith("checkpoint") or f in ("train.log", "run.json") for f in os.listdir(save)), os.listdir(save)
    p = run("wmt14_en_de", "train.sh", dict(env, SAVE_DIR=str(save), MAX_UPDATE="2", NNODES="2", NODE_RANK="2",
                                            MASTER_ADDR="127.0.0.1"), check=False)
    errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert p.returncode == 1 and errors == ["error: NODE_RANK=2: give this node's rank, 0 to NNODES-1 (1 with NNODES=2)"], p.stderr
    assert not os.path.exists(save / "checkpoint_last.pt")
    assert not os.path.exists(save / ".train.node2.lock")  # refused before anything is written
    # threads that cannot be: refused before the run's folder (its data.json) is made
    fresh = tmp_path / "fresh"
    p = run("wmt14_en_de", "train.sh", dict(env, SAVE_DIR=str(fresh), MAX_UPDATE="2", CPU_THREADS="0"), check=False)
    errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert p.returncode == 1 and len(errors) == 1 and errors[0].startswith("error: CPU_THREADS=0: give the threads"), p.stderr
    assert not fresh.exists()


def test_data_sh_list_names_its_subcommand(tmp_path):
    p = script("wmt14_en_de", "data.sh", "list", "extra", env={"WORK": str(tmp_path / "w")})
    assert p.returncode == 2 and p.stderr == "error: data.sh list: unknown argument 'extra': 'list' takes none (data.sh list)\n"


def test_a_sweep_line_with_a_wrong_value_is_refused_before_any_step(tmp_path):
    sweep = tmp_path / "sweep.tsv"
    sweep.write_text("a\tLR=1e-3\nb\tLR=fast\tDROPOUT=0.1\n")
    work = tmp_path / "work"
    p = script("bible_grc_en", "sweep.sh", env={"WORK": str(work), "SWEEP": str(sweep)})
    assert p.returncode == 1 and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr == f"error: SWEEP={sweep}, line b: LR=fast: give the peak learning rate, a number above 0\n"
    assert not work.exists()


def test_a_wrong_flag_names_its_variable_and_the_nearest_flags_of_the_architecture():
    """fairseq-train's own parser for the architecture (in this process), its error explained."""
    from fairseq import options

    import fairseq_attn_plugins  # noqa: F401
    from fairseq_attn_recipes import flag_origins
    plugin = os.path.dirname(fairseq_attn_plugins.__file__)
    given = {"MODEL_ARGS": ["--encoder-layers", "1"], "EXTRA_ARGS": ["--csan-windw", "3"]}
    said = {}
    for extra in (["--csan-windw", "3"], ["--bogus-flag", "1"], ["--encoder-layers", "x"]):
        argv = ["data", "--user-dir", plugin, "--arch", "transformer_csan2d_wmt_en_de", "--task", "translation",
                "--encoder-layers", "1", *extra]
        with pytest.raises(flag_origins.ArgumentError) as e, flag_origins.argument_errors_raised():
            options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
        source = {"EXTRA_ARGS": extra} if extra[1] != "x" else {"MODEL_ARGS": extra}
        said[extra[0] + extra[1]] = flag_origins.explain(e.value.parser, e.value.message, argv, {**given, **source})
    listed = ("fairseq-attn-pieces --arch transformer_csan2d_wmt_en_de lists the model's flags, "
              "fairseq-train --help the others")
    assert said["--csan-windw3"] == ("EXTRA_ARGS='--csan-windw 3': fairseq-train with ARCH=transformer_csan2d_wmt_en_de "
                                     f"has no flag --csan-windw (did you mean --csan-window?) ({listed})")
    assert said["--bogus-flag1"] == ("EXTRA_ARGS='--bogus-flag 1': fairseq-train with ARCH=transformer_csan2d_wmt_en_de "
                                     f"has no flag --bogus-flag (no flag is near it) ({listed})")
    assert said["--encoder-layersx"] == (f"MODEL_ARGS='--encoder-layers x': argument --encoder-layers: invalid int "
                                         f"value: 'x' ({listed})")
    # a flag no variable gave: not explained here (the plugin's own one line)
    assert flag_origins.explain(None, "unrecognized arguments: --zzz", ["--arch", "a"], given) is None


def test_a_wrong_preprocess_flag_names_its_variable():
    """fairseq-preprocess as the recipes run it (prepare.sh hands it PREPROCESS_ARGS's text)."""
    env = dict(os.environ, RECIPE_FLAG_VARIABLES="PREPROCESS_ARGS=--thresholdsrcc 2")
    p = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes.fairseq_command", "preprocess", "--source-lang", "en",
                        "--target-lang", "de", "--thresholdsrcc", "2"], env=env, capture_output=True, text=True)
    errors = [line for line in p.stderr.splitlines() if "error" in line or "usage" in line]
    assert p.returncode == 2 and errors == [
        "error: PREPROCESS_ARGS='--thresholdsrcc 2': fairseq-preprocess has no flag --thresholdsrcc (did you mean "
        "--thresholdsrc?) (fairseq-preprocess --help lists its flags)"], p.stderr
