"""The recipes' facts in Python (profiles, languages, fairseq argument lists) as the shell
recipes read them: the environment wins over a profile, the zh/ja rule, the argument lists the
recipes and the demo passed to fairseq, the records once built in bash."""

import json
import os
import subprocess
import sys

import pytest

from fairseq_attn_recipes import fairseq_args, profiles
from fairseq_attn_recipes.demo import PROFILES, TRAINING

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = [sys.executable, "-m", "fairseq_attn_recipes"]


def _bash_args(script: str, extra: dict) -> dict:
    """The arguments that run a bash snippet with recipes/lib/common.sh sourced (as a recipe's env.sh
    does it), in an environment without the recipe settings of this shell."""
    full = f'RECIPE_DIR={ROOT}/recipes/bible_grc_en; PYTHON={sys.executable}; . {ROOT}/recipes/lib/common.sh\n{script}'
    env = {k: v for k, v in os.environ.items() if k not in ("MAX_UPDATE", "LR", "MODEL_ARGS", "TOKENIZER_ZH", "BPE_MERGES",
                                                            "QUICK_SIZES", "QUICK_BPE_MERGES", "WORK", "QUICK")}
    return {"args": ["bash", "-c", full], "text": True, "env": {**env, **extra}}


def _bash_env(script: str, extra: dict) -> subprocess.CompletedProcess:
    """A bash snippet run with recipes/lib/common.sh sourced, to its end."""
    return subprocess.run(**_bash_args(script, extra), capture_output=True)


@pytest.mark.parametrize("name", sorted(profiles.PROFILES))
def test_a_profile_sets_what_the_environment_leaves_unset_and_nothing_else(name):
    values = profiles.PROFILES[name]
    # one variable given by the environment (a user's MAX_UPDATE=4000 ...), one given empty
    given, empty = sorted(values)[0].upper(), sorted(values)[-1].upper()
    shown = " ".join(f'"{k.upper()}=${{{k.upper()}}}"' for k in values)
    p = _bash_env(f'profile {name}; printf "%s\\n" {shown}', {given: "from-the-environment", empty: ""})
    assert p.returncode == 0, p.stderr
    got = dict(line.split("=", 1) for line in p.stdout.splitlines())
    want = {k.upper(): v for k, v in values.items()}
    want[given] = "from-the-environment"
    assert got == want


def test_the_bible_preset_is_overridden_as_a_user_runs_train_sh():
    p = _bash_env(f'. {ROOT}/recipes/bible_grc_en/env.sh; echo "$MAX_UPDATE|$LR|$MODEL_ARGS|$BPE_MERGES"',
                  {"MAX_UPDATE": "4000"})
    assert p.returncode == 0, p.stderr
    bible = profiles.PROFILES["bible"]
    assert p.stdout.strip() == f"4000|{bible['lr']}|{bible['model_args']}|{bible['bpe_merges']}"


def test_base_and_big_follow_the_architecture():
    for arch, size, n_avg, lr in (("transformer_attn_wmt_en_de", "base", "5", "7e-4"),
                                  ("transformer_csan2d_vaswani_wmt_en_de_big", "big", "20", "5e-4")):
        assert profiles.size_of_arch(arch) == size
        p = _bash_env(f'profile --arch {arch} --only N_AVG LR; echo "$N_AVG $LR ${{DROPOUT:-unset}}"', {})
        assert p.returncode == 0 and p.stdout.split() == [n_avg, lr, "unset"], p.stderr


def test_an_unknown_profile_is_one_line():
    p = subprocess.run(STEPS + ["profile", "bigger"], capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "bigger" in p.stderr and "base, big" in p.stderr


@pytest.mark.parametrize("lang, tool, counted", [("zh", "jieba", "tokenised"), ("ja", "mecab", "tokenised"),
                                                 ("en", "moses", "raw"), ("grc", "moses", "raw")])
def test_language_facts_reach_the_recipes(lang, tool, counted):
    p = _bash_env(f'SRC={lang}; TGT=en; tokenizer_tool {lang}; words_counted_on {lang}', {})
    assert p.returncode == 0 and p.stdout.split() == [tool, counted], p.stderr
    # TOKENIZER_<LANG> overrides the default tool
    p = _bash_env(f'SRC={lang}; TGT=en; tokenizer_tool {lang}', {f"TOKENIZER_{lang.upper()}": "kytea"})
    assert p.stdout.split() == ["kytea"]


def test_recipe_train_arguments_are_the_papers_setup():
    """The list recipes/lib/common.sh passed to fairseq-train, written out."""
    s = {**fairseq_args.RECIPE_TRAINING, **profiles.PROFILES["base"], "update_freq": "2", "save_dir": "S",
         "seed": "3", "joint": "1", "fp16": "1", "tensorboard_logdir": "S/tb", "model_args": "--encoder-layers 2",
         "extra_args": "--csan-window 5"}
    want = ["D", "--user-dir", "U", "--arch", "A", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
            "--adam-eps", "1e-9", "--clip-norm", "0.0", "--lr", "7e-4", "--lr-scheduler", "inverse_sqrt",
            "--warmup-updates", "4000", "--warmup-init-lr", "1e-07", "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", "--dropout", "0.1", "--weight-decay", "0.0", "--max-tokens", "4096",
            "--update-freq", "2", "--max-update", "100000", "--save-dir", "S", "--save-interval-updates", "1000",
            "--keep-interval-updates", "20", "--log-format", "json", "--log-interval", "100", "--seed", "3",
            "--share-all-embeddings", "--fp16", "--tensorboard-logdir", "S/tb", "--encoder-layers", "2",
            "--csan-window", "5"]
    assert fairseq_args.train_args("D", "U", "A", s) == want
    # separate vocabularies: the decoder's embeddings tied unless SHARE_DECODER_EMBED=0
    assert "--share-decoder-input-output-embed" in fairseq_args.train_args("D", "U", "A", {**s, "joint": "0"})
    untied = fairseq_args.train_args("D", "U", "A", {**s, "joint": "0", "share_decoder_embed": "0"})
    assert not [a for a in untied if a.startswith("--share")]


def test_the_step_fills_the_recipe_defaults_for_empty_variables():
    p = subprocess.run(STEPS + ["fairseq-args", "train", "--data", "D", "--user-dir", "U", "--arch", "A",
                                "--set", "lr=1e-3", "--set", "label_smoothing=", "--set", "log_interval=",
                                "--set", "adam_eps=", "--set", "model_args=--encoder-layers 2 --decoder-layers 1"],
                       capture_output=True, text=True)
    args = p.stdout.splitlines()
    pairs = dict(zip(args[1::2], args[2::2]))
    assert p.returncode == 0 and pairs["--lr"] == "1e-3" and pairs["--label-smoothing"] == "0.1"
    assert pairs["--log-interval"] == "100" and "--adam-eps" not in args
    assert args[-4:] == ["--encoder-layers", "2", "--decoder-layers", "1"]


def test_demo_train_arguments_are_the_ones_it_always_passed():
    """The demo's fairseq-train flags (--quick), written out: fairseq's defaults where it gave none."""
    p = {**TRAINING, **PROFILES["quick"], "seed": "1", "save_dir": "R"}
    got = fairseq_args.train_args("D", "U", "A", p)
    want = {"--lr": "3e-3", "--warmup-updates": "10", "--max-tokens": "1000", "--max-epoch": "2",
            "--dropout": "0.1", "--label-smoothing": "0.1", "--save-interval-updates": "1",
            "--keep-interval-updates": "1", "--log-interval": "1000", "--seed": "1", "--save-dir": "R",
            "--num-workers": "0", "--encoder-layers": "3", "--decoder-layers": "1", "--encoder-embed-dim": "32",
            "--decoder-embed-dim": "32", "--encoder-ffn-embed-dim": "64", "--decoder-ffn-embed-dim": "64",
            "--encoder-attention-heads": "4", "--decoder-attention-heads": "4", "--optimizer": "adam",
            "--adam-betas": "(0.9, 0.98)", "--clip-norm": "0.0", "--lr-scheduler": "inverse_sqrt",
            "--criterion": "label_smoothed_cross_entropy", "--log-format": "json"}
    flags = {"--share-all-embeddings", "--cpu", "--no-epoch-checkpoints"}
    assert got[:5] == ["D", "--user-dir", "U", "--arch", "A"]
    rest, pairs, alone = got[5:], {}, set()
    while rest:
        if rest[0] in flags:
            alone.add(rest.pop(0))
        else:
            pairs[rest[0]] = rest[1]
            rest = rest[2:]
    assert pairs == want and alone == flags


def test_generate_and_preprocess_arguments():
    assert fairseq_args.generate_args("D", "U", "c.pt", "valid", beam="4", lenpen="0.6", bpe_tool="sentencepiece",
                                      max_tokens="8000", cpu=True, extra="--max-len-a 2") == [
        "D", "--user-dir", "U", "--path", "c.pt", "--gen-subset", "valid", "--beam", "4", "--lenpen", "0.6",
        "--remove-bpe=sentencepiece", "--max-tokens", "8000", "--num-workers", "0",
        "--required-batch-size-multiple", "1", "--cpu", "--max-len-a", "2"]
    assert fairseq_args.preprocess_args("zh", "en", "out", trainpref="t", dict_only=True, workers=2) == [
        "--source-lang", "zh", "--target-lang", "en", "--trainpref", "t", "--dict-only", "--destdir", "out",
        "--workers", "2"]
    assert fairseq_args.preprocess_args("en", "de", "out", testpref="x", srcdict="a", tgtdict="b", extra="--nwordssrc 9") == [
        "--source-lang", "en", "--target-lang", "de", "--testpref", "x", "--destdir", "out", "--srcdict", "a",
        "--tgtdict", "b", "--workers", "1", "--nwordssrc", "9"]


def test_parts_record_and_score_fields_once_written_in_bash(tmp_path):
    src = tmp_path / "train.grc"
    src.write_text("a\nb\nc\n")
    rec = tmp_path / "train.parts.json"
    p = subprocess.run(STEPS + ["parts-record", "--part", f"sblgnt-bsb={src}", "--record", str(rec)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(rec.read_text()) == {"parts": {"sblgnt-bsb": 3}, "missing": [], "partial": False}
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("the cat sat\n")
    ref.write_text("the cat sat\n")
    out = tmp_path / "scores.json"
    base = STEPS + ["score", "--hyp", str(hyp), "--ref", str(ref), "--output", str(out)]
    p = subprocess.run(base + ["--text", "arch_requested=A", "--text", "checkpoint=c.pt", "--number", "beam=4",
                               "--number", "lenpen=0.6", "--text", "paper_table_metric="], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    got = json.loads(out.read_text())
    assert (got["arch_requested"], got["checkpoint"], got["beam"], got["lenpen"], got["paper_table_metric"]) == (
        "A", "c.pt", 4, 0.6, "")
    out.unlink()
    p = subprocess.run(base + ["--number", "beam=4x"], capture_output=True, text=True)
    assert p.returncode == 2 and "beam must be a number" in p.stderr and not out.exists()


def test_length_study_quick_reads_the_toy_profile(tmp_path):
    """QUICK=1 of lengths.sh: the toy-study profile, the toy corpus's sizes and merges given as
    QUICK_SIZES / QUICK_BPE_MERGES (a BPE_MERGES of the environment does not reach the toy corpus)."""
    show = 'printf "%s\\n" "$SRC $TGT $JOINT" "$QUICK_SIZES" "$BPE_MERGES" "$MAX_UPDATE" "$MODEL_ARGS" "$TRAIN_MAX_LEN"'
    # stage (the toy corpus written, tested by the length study's own tests) left out: the settings alone
    script = f'. {ROOT}/recipes/lib/lengths.sh; stage() {{ :; }}; lengths_quick_settings; {show}'
    toy, small = profiles.PROFILES["toy-study"], "train=50,valid=5,test=5"
    p = _bash_env(script, {"WORK": str(tmp_path / "w"), "BPE_MERGES": "999", "MAX_UPDATE": "7"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["src tgt 1", toy["corpus_sizes"], toy["bpe_merges"], "7", toy["model_args"],
                                     toy["train_max_len"]]
    p = _bash_env(script, {"WORK": str(tmp_path / "w"), "QUICK_SIZES": small, "QUICK_BPE_MERGES": "40"})
    assert p.returncode == 0 and p.stdout.splitlines()[1:4] == [small, "40", toy["max_update"]], p.stderr


@pytest.mark.parametrize("seeds", ["", "1 3"])
def test_length_study_trains_seeds_outermost(seeds, tmp_path):
    """Step 3 of lengths.sh: every run once, each with its condition's data and folder, the position
    limits of its architecture, and the seeds outermost (a study stopped part-way has compared every
    system and condition at its first seeds). The training step prints what it was given. Run in a
    folder of its own: the study's run locks are made under the (relative) run folders."""
    script = (f'cd "{tmp_path}"; . {ROOT}/recipes/lib/lengths.sh\n'
              'lengths_train_evaluate() { echo "${SEED:-}|$SAVE_DIR|$DATA|$TRAIN_CONCAT|$ARCH|${MODEL_ARGS:-}|$*"; }\n'
              'names=(baseline relpos); archs=(A_base A_rel); conds=("" 2,4); cond_dirs=(L L/tc); datas=(D0 D1)\n'
              "lines=$'A_rel\\t--max-source-positions 300'; ks=(1 2 4)\n"
              'lengths_train_all')
    p = _bash_env(script, {"SEEDS": seeds, "MODEL_ARGS": "-m"})
    assert p.returncode == 0, p.stderr
    want = []
    for seed in seeds.split() or [None]:  # the plain order: seed, then condition, then system
        for cond, cdir, data in [("", "L", "D0"), ("2,4", "L/tc", "D1")]:
            for name, arch, extra in [("baseline", "A_base", ""), ("relpos", "A_rel", " --max-source-positions 300")]:
                folder = f"{cdir}/{name}" + (f"_seed{seed}" if seed else "")
                want.append(f"{seed or ''}|{folder}|{data}|{cond}|{arch}|-m{extra}|1 2 4")
    assert p.stdout.splitlines() == want


def test_length_study_joins_each_conditions_test_set_in_its_own_folder(tmp_path):
    """Step 1b of lengths.sh: each training condition's joined test inputs are built from its own data
    folder's test set into its own folder, so that its tables name its own data's documents (the real
    concat-test and stage steps, in folders whose names hold a space; the binarisation of each k, which
    needs real BPE codes, is left out here)."""
    base = tmp_path / "a b"
    src = ["a b", "c", "d e f", "g", "h i"]
    tgt = ["A B", "C", "D E F", "G", "H I"]
    docs = ["d1", "d1", "d1", "d2", "d2"]
    datas = []
    for name in ("D0", "D1"):
        raw = base / name / "raw"
        raw.mkdir(parents=True)
        for ext, lines in (("src", src), ("tgt", tgt), ("docs", docs)):
            (raw / f"test.{ext}").write_text("\n".join(lines) + "\n")
        for lang in ("src", "tgt"):
            (base / name / f"dict.{lang}.txt").write_text("a 1\n")
        datas.append(str(base / name))
    (base / "w" / "bpe").mkdir(parents=True)
    for lang in ("src", "tgt"):  # each side its own codes (JOINT=0): both are inputs of the subset's stage
        (base / "w" / "bpe" / f"codes.{lang}").write_text("a b\n")
    study = base / "L"
    script = (f'. {ROOT}/recipes/lib/lengths.sh\n'
              'lengths_concat_subset() { echo "subset $1 of $DATA" >> "$WORK/subsets"; }\n'
              f'datas=("{datas[0]}" "{datas[1]}"); cond_dirs=("{study}" "{study}/tc"); ks=()\n'
              'lengths_concat_all; echo "ks=${ks[*]}"')
    p = _bash_env(script, {"SRC": "src", "TGT": "tgt", "JOINT": "0", "CONCAT": "1,2", "WORK": str(base / "w")})
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "ks=1 2"
    assert (base / "w" / "subsets").read_text().splitlines() == [f"subset 2 of {d}" for d in datas]
    # the plain grouping: consecutive, non-overlapping pairs of one document, a short rest dropped
    groups = [[0, 1], [3, 4]]
    for data, folder in zip(datas, (study / "concat", study / "tc" / "concat")):
        info = json.loads((folder / "concat.json").read_text())
        assert info["documents"] == os.path.join(data, "raw", "test.docs")
        assert info["k"]["2"]["first_lines"] == [g[0] + 1 for g in groups]
        assert (folder / "k2.src").read_text().splitlines() == [" ".join(src[i] for i in g) for g in groups]
        assert (folder / "k2.tgt").read_text().splitlines() == [" ".join(tgt[i] for i in g) for g in groups]


def test_length_study_tables_wait_for_another_study_writing_them(tmp_path):
    """Steps 4-5 of lengths.sh: a second study of the same LENGTHS_DIR (its SEEDS split over two
    processes) waits while the first writes the tables, says so in one line, and goes on once the first
    ends; a study alone takes the lock at once (the real flock of the recipe, held here as a study does)."""
    import fcntl
    import time

    script = (f'. {ROOT}/recipes/lib/lengths.sh\nLENGTHS_DIR="{tmp_path}"\n'
              'lengths_tables_lock; echo "tables $(date +%s.%N)"')
    alone = _bash_env(script, {})
    assert alone.returncode == 0 and alone.stdout.startswith("tables "), alone.stderr
    assert "waiting" not in alone.stderr, alone.stderr
    with open(tmp_path / ".tables.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the first study's table step holds it
        second = subprocess.Popen(**_bash_args(script, {}), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1.0)
        assert second.poll() is None, "the second study did not wait for the lock"
        released = time.time()
        fcntl.flock(lock, fcntl.LOCK_UN)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    said = [line for line in err.splitlines() if line.strip()]
    assert len(said) == 1 and said[0].endswith(f"waiting: another study writes its tables in {tmp_path} "
                                               f"(it holds {tmp_path}/.tables.lock)"), err
    assert float(out.split()[1]) >= released


def test_paper_quick_exports_its_profile():
    """table1.sh / figure2.sh with QUICK=1: the paper-quick profile, exported (the runs are subshells)."""
    quick = profiles.PROFILES["paper-quick"]
    script = (f'. {ROOT}/recipes/lib/paper.sh; QUICK=1 paper_quick_defaults; '
              f'bash -c \'printf "%s\\n" "$MODEL_ARGS" "$GEN_ARGS" "$LR"\'')
    p = _bash_env(script, {"LR": "1e-4"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [quick["model_args"], quick["gen_args"], "1e-4"]


def test_training_logs_are_asked_for_and_need_their_packages():
    import importlib.util
    base = STEPS + ["fairseq-args", "train", "--data", "D", "--user-dir", "U", "--arch", "A",
                    "--set", "save_dir=S", "--set", "tensorboard_logdir=S/tb"]
    off = subprocess.run(base + ["--set", "tensorboard=0"], capture_output=True, text=True)
    assert off.returncode == 0 and "--tensorboard-logdir" not in off.stdout.splitlines()
    on = subprocess.run(base, capture_output=True, text=True)
    if importlib.util.find_spec("tensorboard"):
        assert on.returncode == 0 and "--tensorboard-logdir\nS/tb" in on.stdout
    else:
        assert on.returncode == 1 and "pip install tensorboard" in on.stderr
    wandb = subprocess.run(base + ["--set", "tensorboard=0", "--set", "wandb_project=p"], capture_output=True, text=True)
    if importlib.util.find_spec("wandb"):
        assert wandb.returncode == 0 and "--wandb-project\np" in wandb.stdout
    else:
        assert wandb.returncode == 1 and wandb.stderr.strip() == "error: WANDB_PROJECT=p needs wandb (pip install wandb; wandb login)"


def test_a_bad_download_moved_aside_never_overwrites_an_earlier_one(tmp_path):
    """moved_aside (a download that fails its checksum or does not unpack; it may be one the user
    staged by hand): FILE.bad, then FILE.bad.2, each keeping its bytes; the path may hold a space."""
    folder = tmp_path / "down loads"
    folder.mkdir()
    archive = folder / "corpus.tgz"
    for n, content in enumerate(("first\n", "second\n"), 1):
        archive.write_text(content)
        p = _bash_env(f'moved_aside "{archive}"', {})
        expected = folder / ("corpus.tgz.bad" if n == 1 else f"corpus.tgz.bad.{n}")
        assert p.returncode == 0 and p.stdout.strip() == str(expected), p.stderr
    assert not archive.exists()
    assert [(folder / f).read_text() for f in ("corpus.tgz.bad", "corpus.tgz.bad.2")] == ["first\n", "second\n"]
