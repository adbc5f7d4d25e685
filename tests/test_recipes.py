"""The recipes on tiny local corpora: real tokenisers, real BPE, real binarisation,
a few CPU updates, evaluation; the distributed path as 2 CPU (gloo) processes;
bad input; resuming."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
import recipe_data  # noqa: E402
from shared_builds import build_once, copy_of  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = os.path.join(ROOT, "recipes")
TINY_MODEL = ("--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 --decoder-embed-dim 32 "
              "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --encoder-attention-heads 4 "
              "--decoder-attention-heads 4")


def run(recipe, script, env, check=True):
    full = dict(os.environ, PYTHON=sys.executable, WORKERS="1", OMP_NUM_THREADS="1", NGPUS="0",
                BPE_MERGES="60", MAX_TOKENS="400", WARMUP="2", LOG_INTERVAL="1", SAVE_INTERVAL_UPDATES="2",
                MODEL_ARGS=TINY_MODEL, GEN_ARGS="--max-len-a 1.2 --max-len-b 5", N_AVG="2")
    full["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full["PATH"]
    full.update(env)
    p = subprocess.run(["bash", os.path.join(RECIPES, recipe, script)], env=full, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"{recipe}/{script} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def steps(*args):
    return subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", *args],
                          capture_output=True, text=True)


def steps_in_process(*args):
    """:func:`steps` run by the same ``main`` in this process, for a step that loads torch and
    fairseq (``average``): this process has them loaded, a new one would spend seconds starting
    them. The same argument parsing, output and exit status (``die``'s ``sys.exit``)."""
    import contextlib
    import io

    from fairseq_attn_recipes.__main__ import main
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return subprocess.CompletedProcess(["fairseq_attn_recipes", *args], code, out.getvalue(), err.getvalue())


# ------------------------------------------------------------------ fast checks
def test_every_recipe_has_thin_scripts():
    for recipe in ("wmt14_en_de", "wmt17_zh_en", "wat17_ja_en", "bible_grc_en"):
        for script in ("prepare.sh", "train.sh", "evaluate.sh", "data.sh", "lengths.sh", "README.md", "env.sh"):
            assert os.path.isfile(os.path.join(RECIPES, recipe, script)), (recipe, script)
        for script in ("prepare.sh", "train.sh", "evaluate.sh", "data.sh", "lengths.sh"):
            body = [line for line in read(os.path.join(RECIPES, recipe, script))
                    if line.strip() and not line.startswith("#")]
            assert len(body) <= 3, f"{recipe}/{script} should only call the shared library"


def test_clean_by_length_and_ratio(tmp_path):
    (tmp_path / "a.src").write_text("a b c\na\n" + "w " * 300 + "\nx y\n")
    (tmp_path / "a.tgt").write_text("a b c d\na b c d e f\nw\nx\n")
    p = steps("clean", "--src-in", str(tmp_path / "a.src"), "--tgt-in", str(tmp_path / "a.tgt"),
              "--src-out", str(tmp_path / "o.src"), "--tgt-out", str(tmp_path / "o.tgt"), "--ratio", "1.5")
    assert p.returncode == 0, p.stderr
    # kept: 3/4 tokens (ratio 1.33); dropped: 1/6 (ratio 6), 300 tokens (> 250), 2/1 (ratio 2)
    assert read(tmp_path / "o.src") == ["a b c"] and read(tmp_path / "o.tgt") == ["a b c d"]


def test_compound_splitting_and_hyp_order(tmp_path):
    (tmp_path / "t").write_text("ein well-known Film , 3-4 x\n")
    assert steps("split-compounds", str(tmp_path / "t"), str(tmp_path / "o")).returncode == 0
    assert read(tmp_path / "o") == ["ein well ##AT##-##AT## known Film , 3 ##AT##-##AT## 4 x"]
    # an empty hypothesis is an empty line; CRLF endings are line endings
    (tmp_path / "g").write_bytes(b"S-1\tx\nH-1\t-0.5\tzweite\nH-0\t-0.1\terste\nD-0\t-0.1\terste\nH-2\t-0.9\t\r\n")
    assert steps("hyps", str(tmp_path / "g"), "--n", "3", "--output", str(tmp_path / "h")).returncode == 0
    assert read(tmp_path / "h") == ["erste", "zweite", ""]
    p = steps("hyps", str(tmp_path / "g"), "--n", "4", "--output", str(tmp_path / "h4"))
    assert p.returncode == 1 and "3 hypotheses for a test set of 4" in p.stderr and not (tmp_path / "h4").exists()


def test_eval_text_writes_what_the_single_steps_write_and_refuses_half_asked(tmp_path):
    """evaluate.sh's one-process text step against hyps, detok, tokenize and split-compounds run one
    by one (en-de, with compounds and punctuation), byte for byte; a half-given request is one line."""
    (tmp_path / "g").write_text("H-1\t-0.5\tein well-known Film , 3-4 x &quot;\nH-0\t-0.1\tDas ist &apos;s gut .\n")
    (tmp_path / "ref").write_text("Das ist's gut.\nein well-known Film, 3-4 x.\n")
    one = {k: tmp_path / f"one.{k}" for k in ("tok", "hyp", "tokhyp", "tokref")}
    chain = [("hyps", str(tmp_path / "g"), "--n", "2", "--output", str(one["tok"])),
             ("detok", "--lang", "de", str(one["tok"]), str(one["hyp"])),
             ("tokenize", "--lang", "de", "--tool", "moses-plain", str(one["hyp"]), str(one["tokhyp"]),
              str(tmp_path / "ref"), str(one["tokref"])),
             ("split-compounds", str(one["tokhyp"]), str(one["tokhyp"]), str(one["tokref"]), str(one["tokref"]))]
    for args in chain:
        p = steps(*args)
        assert p.returncode == 0, (args, p.stderr)
    both = {k: tmp_path / f"both.{k}" for k in one}
    p = steps("eval-text", "--lang", "de", "--hyp", str(both["hyp"]), "--generate-out", str(tmp_path / "g"), "--n", "2",
              "--hyp-tok", str(both["tok"]), "--tok-tool", "moses-plain", "--ref", str(tmp_path / "ref"),
              "--tok-hyp", str(both["tokhyp"]), "--tok-ref", str(both["tokref"]), "--split-compounds")
    assert p.returncode == 0, p.stderr
    for k in one:
        assert both[k].read_bytes() == one[k].read_bytes(), k
    assert "##AT##-##AT##" in both["tokref"].read_text()
    for args, said in ((("--split-compounds",), "--split-compounds needs --tok-tool"),
                       (("--generate-out", str(tmp_path / "g")), "--generate-out needs --n and --hyp-tok"),
                       (("--tok-tool", "moses-plain", "--ref", str(tmp_path / "ref")), "--tok-tool needs --ref, --tok-hyp")):
        p = steps("eval-text", "--lang", "de", "--hyp", str(tmp_path / "h"), *args)
        assert p.returncode == 1 and said in p.stderr and not (tmp_path / "h").exists(), p.stderr


def test_checkpoint_averaging_is_the_mean(tmp_path):
    g = torch.Generator().manual_seed(0)
    states = []
    # checkpoint_last.pt holds the newest save point again (update 2): one save point, not two
    for i, name in enumerate(["checkpoint1.pt", "checkpoint2.pt", "checkpoint3.pt", "checkpoint_last.pt"]):
        st = {"model": {"w": torch.randn(3, 4, generator=g), "steps": torch.tensor(i)}, "args": None, "cfg": None,
              "optimizer_history": [{"criterion_name": "x", "optimizer_name": "adam",
                                     "lr_scheduler_state": {"best": 1.0}, "num_updates": min(i, 2)}],
              "extra_state": {"epoch": i}, "last_optimizer_state": {}}
        torch.save(st, tmp_path / name)
        states.append(st)
    out = tmp_path / "avg.pt"
    p = steps_in_process("average", str(tmp_path), "--n", "2", "--output", str(out))
    assert p.returncode == 0, p.stderr
    avg = torch.load(out)["model"]
    # the last two epoch checkpoints (2 and 3), averaged in float64 by hand
    expected = torch.zeros(3, 4, dtype=torch.float64)
    for r in range(3):
        for c in range(4):
            expected[r, c] = (states[1]["model"]["w"][r, c].double() + states[2]["model"]["w"][r, c].double()) / 2
    torch.testing.assert_close(avg["w"].double(), expected, rtol=1e-6, atol=1e-7)
    assert avg["w"].dtype == torch.float32

    # the same files again: the average is reused, not made again (the file untouched)
    made = out.stat().st_mtime_ns
    p = steps_in_process("average", str(tmp_path), "--n", "2", "--output", str(out), "--record", str(tmp_path / "r.json"))
    assert p.returncode == 0 and "made before from the same files, reused" in p.stdout, p.stdout + p.stderr
    assert out.stat().st_mtime_ns == made and json.load(open(tmp_path / "r.json"))["num_updates"] == 2
    # a source rewritten (another training in the folder): averaged again, from the new weights
    states[2]["model"]["w"] = states[2]["model"]["w"] + 1
    torch.save(states[2], tmp_path / "checkpoint3.pt")
    p = steps_in_process("average", str(tmp_path), "--n", "2", "--output", str(out))
    assert p.returncode == 0 and "reused" not in p.stdout
    torch.testing.assert_close(torch.load(out)["model"]["w"].double(), expected + 0.5, rtol=1e-6, atol=1e-6)
    # the average itself changed since it was made: not trusted, made again
    torch.save({"model": {}}, out)
    p = steps_in_process("average", str(tmp_path), "--n", "2", "--output", str(out))
    assert p.returncode == 0 and "reused" not in p.stdout
    torch.testing.assert_close(torch.load(out)["model"]["w"].double(), expected + 0.5, rtol=1e-6, atol=1e-6)


def test_missing_corpus_file_fails_fast(tmp_path):
    env = recipe_data.write_pair(str(tmp_path / "data"), "en", "de")
    env["VALID_TGT"] = str(tmp_path / "nope.de")
    env["WORK"] = str(tmp_path / "work")
    p = run("wmt14_en_de", "prepare.sh", env, check=False)
    assert p.returncode == 1
    assert "VALID_TGT" in p.stderr and "nope.de" in p.stderr and "no such file" in p.stderr
    assert not os.path.exists(tmp_path / "work" / "data-bin")
    assert os.listdir(tmp_path / "work" / "raw") == []


def test_missing_tool_fails_fast(tmp_path):
    env = recipe_data.write_pair(str(tmp_path / "data"), "ja", "en")
    env.update(WORK=str(tmp_path / "work"), TOKENIZER_JA="kytea")  # KyTea is not installed here
    p = run("wat17_ja_en", "prepare.sh", env, check=False)
    assert p.returncode == 1
    assert "kytea" in p.stderr and "fix:" in p.stderr and "TOKENIZER_JA=mecab" in p.stderr
    assert os.listdir(tmp_path / "work" / "raw") == []
    # a Python without the package: test_recipe_refusals.test_an_interpreter_without_torch_is_refused...


def test_unknown_arch_fails_fast(tmp_path):
    p = run("wmt14_en_de", "train.sh", {"WORK": str(tmp_path / "work"), "ARCH": "transformer_csan_2d_wmt_en_de"},
            check=False)
    assert p.returncode == 1
    errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "unknown ARCH='transformer_csan_2d_wmt_en_de'" in errors[0]
    # the nearest registered architectures, not all of them
    named = [a for a in errors[0].split("are ", 1)[1].split(" (")[0].split(", ")]
    assert "transformer_csan2d_wmt_en_de" in named and len(named) <= 4
    assert "transformer_rope_wmt_en_de" not in errors[0]
    assert not os.path.exists(tmp_path / "work" / "runs")


def test_missing_aspec_says_what_to_do(tmp_path):
    p = run("wat17_ja_en", "prepare.sh", {"WORK": str(tmp_path / "work")}, check=False)
    assert p.returncode == 1 and "ASPEC_DIR" in p.stderr and "licen" in p.stderr


# ------------------------------------------------------------------ end to end
def _ende_corpus():
    """recipe_data's en-de pair (TRAIN_SRC... as env), written once per test run in a folder of its
    own: its paths stay what the prepared WORK's raw step recorded (a folder built by
    :func:`build_once` is renamed when complete)."""
    d = os.path.join(build_once("recipes_ende_corpus", lambda root: recipe_data.write_pair(
        os.path.join(root, "a folder with spaces"), "en", "de")), "a folder with spaces")  # every path is quoted
    return {f"{split.upper()}_{side}": os.path.join(d, f"{split}.{lang}")
            for split in ("train", "valid", "test") for side, lang in (("SRC", "en"), ("TGT", "de"))}


def _prepare_ende(root):
    """recipe_data's en-de pair prepared by the wmt14 recipe, once per test run, after an
    interrupted prepare (binarisation fails half-way on a bad option; earlier steps are kept)."""
    d = os.path.join(root, "a folder with spaces")  # every path is quoted
    env = dict(_ende_corpus(), WORK=os.path.join(d, "work"))
    p = run("wmt14_en_de", "prepare.sh", dict(env, PREPROCESS_ARGS="--no-such-option"), check=False)
    assert p.returncode == 1 and "binarise" in p.stderr
    assert "it/s]" not in p.stderr and "%|" not in p.stderr  # no progress bar (learn_bpe's) where no one watches
    assert not os.path.exists(os.path.join(d, "work", "data-bin")) and not os.path.exists(os.path.join(d, "work", "data-bin.tmp"))
    p = run("wmt14_en_de", "prepare.sh", env)
    assert "tok.en: done before, skipped" in p.stderr and "clean: done before, skipped" in p.stderr
    assert "binarise: done before" not in p.stderr


def _ende_inputs():
    """The corpus files of the en-de WORK prepared once (TRAIN_SRC... as env) and that WORK."""
    root = build_once("recipes_ende", _prepare_ende)
    return _ende_corpus(), os.path.join(root, "a folder with spaces", "work")


def prepared_ende(work):
    """The env of a prepared en-de WORK of its own at ``work`` (a copy of the one prepared once)."""
    env, prepared = _ende_inputs()
    return dict(env, WORK=copy_of(prepared, str(work)))


#: what :func:`trained_ende`'s run was made by, in order: (name, script, the env it adds)
TRAINED_STEPS = (("first", "train.sh", {"MAX_UPDATE": "2"}), ("resumed", "train.sh", {"MAX_UPDATE": "4"}),
                 ("evaluated", "evaluate.sh", {}))


def _train_ende(root):
    """The run of :func:`trained_ende`: trained to update 2, resumed to 4, evaluated;
    each step's output kept in ``made.json``, the run folder as the first training left it in
    ``after_first_training``, for :func:`test_wmt14_prepare_train_resume_evaluate` to check."""
    work = os.path.join(root, "work")
    env = prepared_ende(work)
    save = os.path.join(work, "runs", "transformer_attn_wmt_en_de")
    made = {"work": work, "save": save}
    for name, script, given in TRAINED_STEPS:
        p = run("wmt14_en_de", script, dict(env, **given))
        made[name] = {"stdout": p.stdout, "stderr": p.stderr}
        if name == "first":
            shutil.copytree(save, os.path.join(root, "after_first_training"))
    with open(os.path.join(root, "made.json"), "w", encoding="utf-8") as f:
        json.dump(made, f)


def trained_run():
    """The folder :func:`trained_ende` copies from (built once per test run), and what its steps said."""
    root = build_once("recipes_ende_trained", _train_ende)
    with open(os.path.join(root, "made.json"), encoding="utf-8") as f:
        return root, json.load(f)


def trained_ende(work):
    """The env of :func:`prepared_ende` whose WORK also holds a tiny run, trained to update 2, resumed
    to update 4 (a save point at each update) and evaluated on test, in
    ``WORK/runs/transformer_attn_wmt_en_de`` (train.sh's default SAVE_DIR): a copy (as ``cp -a``)
    of the one trained once per test run (:data:`TRAINED_STEPS`). Tests starting from it share
    the pytest-xdist group ``ende_trained_run``: one worker makes it, the others never wait."""
    root, _ = trained_run()
    return dict(_ende_inputs()[0], WORK=copy_of(os.path.join(root, "work"), str(work)))


@pytest.fixture
def ende(tmp_path):
    return prepared_ende(tmp_path / "a folder with spaces" / "work")


@pytest.mark.e2e
@pytest.mark.xdist_group("ende_trained_run")  # starts from trained_ende (test_copies, test_evaluation_reuse...)
def test_wmt14_prepare_train_resume_evaluate(tmp_path):
    """The run of trained_ende, made once per test run by the recipe (TRAINED_STEPS: trained to
    update 2, resumed to 4, evaluated): what each step said and wrote, then refusals, a skip and the
    validation set on a copy of it. Resumed with other threads: test_evaluation_integrity."""
    ende = trained_ende(tmp_path / "a folder with spaces" / "work")
    built, made = trained_run()
    work = ende["WORK"]
    # real Moses tokenisation (aggressive hyphen splitting) and real BPE
    assert "well @-@ known" in " ".join(read(os.path.join(work, "tok", "train.en")))
    assert any("@@ " in line for line in read(os.path.join(work, "bpe", "train.de")))
    # joined dictionary for shared embeddings
    assert read(os.path.join(work, "data-bin", "dict.en.txt")) == read(os.path.join(work, "data-bin", "dict.de.txt"))

    # trained to update 2 (train.sh, MAX_UPDATE=2): the run folder it left
    first = os.path.join(built, "after_first_training")
    assert "cpu_threads=1" in made["first"]["stderr"]  # run() sets OMP_NUM_THREADS=1
    assert "CPU: torch computes with 1 threads per process" in made["first"]["stdout"]
    # the run record: fairseq's resolved flags, data-bin, seed, effective batch, code, checkpoints
    rec = json.load(open(os.path.join(first, "run.json")))
    assert rec["arch"] == "transformer_attn_wmt_en_de" and rec["seed"] == 1
    assert rec["model"]["encoder_embed_dim"] == 32 and rec["model"]["dropout"] == 0.1  # MODEL_ARGS, arch default
    assert rec["batch"] == {"max_tokens": 400, "update_freq": 8, "world_size": 1, "tokens_per_update_max": 3200}
    assert rec["data"]["data_id"] == json.load(open(os.path.join(work, "data-bin", "prepare.json")))["data_id"]
    assert rec["code"]["fairseq_attn_plugins"] and rec["code"]["torch"] == torch.__version__
    assert rec["num_updates"] == 2 and rec["checkpoints"]
    import fairseq_attn_plugins  # noqa: F401  allowlists fairseq's checkpoint classes for torch.load
    for name, info in rec["checkpoints"].items():  # each file's own update number
        state = torch.load(os.path.join(first, name))
        assert info["num_updates"] == state["optimizer_history"][-1]["num_updates"], name
    # resumed to update 4 (each start recording the threads it computed with)
    resumed = made["resumed"]
    assert f"resuming from {made['save']}/checkpoint_last.pt" in resumed["stdout"]  # the training step's output (train.log too)
    assert "update_freq=8" in resumed["stderr"]  # 1 CPU worker keeps the 8-GPU effective batch
    save = os.path.join(work, "runs", "transformer_attn_wmt_en_de")
    record = lambda: json.load(open(os.path.join(save, "run.json")))
    rec = record()
    assert [(t["max_update"], t["from_update"], t["to_update"]) for t in rec["trainings"]] == [(2, 0, 2), (4, 2, 4)]
    assert [t["cpu_threads"] for t in rec["trainings"]] == [1, 1]
    for name, info in rec["checkpoints"].items():  # checkpoint_last.pt now holds update 4
        state = torch.load(os.path.join(save, name))
        assert info["num_updates"] == state["optimizer_history"][-1]["num_updates"], name
    log = open(os.path.join(save, "train.log"), encoding="utf-8").read()
    assert re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 2 updates\)", log)
    assert '"train_num_updates": "4"' in log
    assert re.search(r"\| INFO \| train_inner \| \{", log)  # fairseq-train's own log format (parsed by the tables)
    assert "pin_memory" not in log and "autocast" not in log  # torch's CPU warnings, dropped by message
    # TensorBoard logs by default, beside the checkpoints
    events = [f for _, _, fs in os.walk(os.path.join(save, "tensorboard")) for f in fs if "tfevents" in f]
    assert events and "--tensorboard-logdir" in log

    # a changed model flag: refused with the difference named, with or without a longer MAX_UPDATE
    for max_update in ("4", "6"):
        p = run("wmt14_en_de", "train.sh", dict(ende, MAX_UPDATE=max_update, MODEL_ARGS=TINY_MODEL + " --dropout 0.3"),
                check=False)
        assert p.returncode == 1 and "dropout: 0.1 recorded, 0.3 now" in p.stdout, p.stdout[-2000:]
        assert "holds another run" in p.stdout and "SAVE_DIR=<new folder>" in p.stdout
        assert "resuming from" not in p.stdout + p.stderr  # nothing is resumed
        assert record()["num_updates"] == 4 and len(record()["trainings"]) == 2  # nothing trained
    p = run("wmt14_en_de", "train.sh", dict(ende, MAX_UPDATE="4"))
    assert "trained before to MAX_UPDATE=4 with the same settings: skipped" in p.stderr

    # evaluated (evaluate.sh, the test set)
    evaluation = json.load(open(os.path.join(save, "test", "scores.json")))
    scores = evaluation["scores"]
    assert scores["bleu"]["signature"].startswith("nrefs:1|") and "tok:13a" in scores["bleu"]["signature"]
    assert 0.0 <= scores["bleu"]["score"] <= 100.0 and scores["tokenized_bleu"]["compound_split"]
    assert evaluation["lenpen"] == 0.6 and evaluation["beam"] == 4
    assert len(read(os.path.join(save, "test", "hyp.txt"))) == len(read(os.path.join(work, "raw", "test.de")))
    # averaged: the last 2 save points, the final one included; here every save point falls on an
    # epoch end (1 update per epoch), where fairseq writes checkpointE.pt and no checkpoint_E_U.pt
    assert len(read(os.path.join(save, "averaged_last2.pt.sources"))) == 2
    test_eval = record()["evaluations"]["test"]
    assert [(a["file"], a["num_updates"]) for a in test_eval["averaged"]] == [("checkpoint4.pt", 4), ("checkpoint3.pt", 3)]
    assert test_eval["scores"] == scores  # one score shape: scores.json is the run record's
    # the score in the file is sacreBLEU's on the written files
    import sacrebleu
    expect = sacrebleu.corpus_bleu(read(os.path.join(save, "test", "hyp.txt")), [read(os.path.join(work, "raw", "test.de"))])
    assert scores["bleu"]["score"] == round(expect.score, 2)
    # chrF++ beside BLEU: sacreBLEU's chrF with word order 2, on the same files
    chrf = sacrebleu.metrics.CHRF(word_order=2).corpus_score(read(os.path.join(save, "test", "hyp.txt")),
                                                             [read(os.path.join(work, "raw", "test.de"))])
    assert scores["chrf"]["score"] == round(chrf.score, 2) and "nw:2" in scores["chrf"]["signature"]

    # the validation set: its own outputs; the test outputs are untouched
    test_hyp = read(os.path.join(save, "test", "hyp.txt"))
    p = run("wmt14_en_de", "evaluate.sh", dict(ende, EVAL_SUBSET="valid"))
    assert read(os.path.join(save, "test", "hyp.txt")) == test_hyp
    # it ends with the scores and where the whole file is, not the file's ~110 lines
    valid = json.loads(open(os.path.join(save, "valid", "scores.json"), encoding="utf-8").read())["scores"]
    *_, scored, where = p.stdout.splitlines()
    assert scored == (f"valid: BLEU {valid['bleu']['score']:.2f}, chrF++ {valid['chrf']['score']:.2f}, "
                      f"tokenised BLEU {valid['tokenized_bleu']['score']:.2f}"), p.stdout[-2000:]
    assert where.startswith("full scores: ") and os.path.samefile(where[len("full scores: "):],
                                                                  os.path.join(save, "valid", "scores.json"))
    # the hint to compare runs names the reference of the subset evaluated
    data = os.path.realpath(os.path.join(work, "data-bin"))
    assert f"compare runs: fairseq-attn-results --ref {data}/raw/valid.de RUN_DIRS" in p.stderr, p.stderr[-2000:]
    assert len(read(os.path.join(save, "valid", "hyp.txt"))) == len(read(os.path.join(work, "raw", "valid.de")))
    evals = record()["evaluations"]
    # scored against the raw reference kept in the run's own data folder (WORK/data/<id>/raw); the record
    # names that folder where the run was trained (the WORK of trained_ende, copied here since)
    data = os.path.realpath(os.path.join(work, "data-bin"))
    assert os.path.dirname(data) == os.path.join(os.path.realpath(work), "data")
    assert rec["data"]["path"] == os.path.join(os.path.realpath(made["work"]), "data", os.path.basename(data))
    assert evals["test"] == test_eval and evals["valid"]["ref"] == os.path.join(data, "raw", "valid.de")
    assert read(os.path.join(data, "raw", "valid.de")) == read(os.path.join(work, "raw", "valid.de"))
    from fairseq_attn_reports.runs import Run
    for subset in ("test", "valid"):  # the reporting side picks the subset by its reference
        hyp, ev = Run(save).hyp_for(os.path.join(work, "raw", f"{subset}.de"))
        assert hyp == os.path.join(os.path.realpath(save), subset, "hyp.txt") and ev["subset"] == subset


def test_cpu_threads_per_process():
    """CPU_THREADS: the cores this shell may use shared among the processes (at least 1), or
    OMP_NUM_THREADS when set, or CPU_THREADS itself; exported to torch as OMP_NUM_THREADS."""
    def threads(processes, **env):
        full = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "CPU_THREADS")}
        p = subprocess.run(["bash", "-c", f'. "{RECIPES}/lib/common.sh"; cpu_threads {processes}; '
                            'echo "$OMP_NUM_THREADS $MKL_NUM_THREADS"'], env=dict(full, **env),
                           capture_output=True, text=True)
        return p.returncode, p.stdout.split(), p.stderr

    cores = len(os.sched_getaffinity(0))
    for processes in (1, 2, 64):
        n = str(max(1, cores // processes))
        assert threads(processes) == (0, [n, n], "")
    assert threads(2, OMP_NUM_THREADS="3") == (0, ["3", "3"], "")
    assert threads(2, OMP_NUM_THREADS="3", CPU_THREADS="1") == (0, ["1", "1"], "")
    rc, _, err = threads(1, CPU_THREADS="all")
    assert rc == 1 and err.startswith("error: CPU_THREADS=all: give the threads per CPU process, a positive integer")


@pytest.mark.e2e  # starts from the WORK the en-de recipe prepares (prepared_ende): not the inner loop's
def test_another_recipes_work_is_named_by_its_language_pair(ende):
    p = run("wmt17_zh_en", "train.sh", {"WORK": ende["WORK"]}, check=False)
    assert p.returncode == 1 and p.stderr.count("error: ") == 1, p.stderr
    assert (f"error: {ende['WORK']}/data-bin holds en-de data, not zh-en: this WORK (or DATA) was prepared for "
            f"another language pair") in p.stderr and "no binarised data" not in p.stderr
    assert not os.path.exists(os.path.join(ende["WORK"], "runs"))


@pytest.mark.e2e
def test_gloo_two_processes(ende):
    save = os.path.join(ende["WORK"], "runs", "gloo")
    p = run("wmt14_en_de", "train.sh", dict(ende, CPU_WORKERS="2", SAVE_DIR=save, MAX_UPDATE="2",
                                            SAVE_INTERVAL_UPDATES="1000"))
    assert "workers=2" in p.stderr and "update_freq=4" in p.stderr  # 8 GPUs / 2 workers
    log0 = open(os.path.join(save, "train.log"), encoding="utf-8").read()
    log1 = open(os.path.join(save, "train.rank1.log"), encoding="utf-8").read()
    assert "training on 2 devices" in log0 and "'distributed_world_size': 2" in log0
    assert "initialized host" in log0 and "as rank 0" in log0
    assert "initialized host" in log1 and "as rank 1" in log1
    assert '"train_num_updates": "2"' in log0
    # both ranks stepped: the sentences summed over the first epoch's updates (statistics are
    # all-reduced over workers) exceed rank 0's half of the training data
    n_train = len(read(os.path.join(ende["WORK"], "bpe", "train.clean.en")))
    bsz = [int(float(json.loads(line[line.index("{"):])["bsz"])) for line in log0.splitlines()
           if "| train_inner |" in line and '"epoch": 1,' in line]
    assert bsz and sum(bsz) > (n_train + 1) // 2, (bsz, n_train)


@pytest.mark.e2e
def test_two_nodes_train_like_one_process_with_update_freq(ende, tmp_path):
    """Multi-node through the recipe's own torchrun launch, simulated: two "nodes" on
    127.0.0.1 (NNODES=2, NODE_RANK=0/1, one gloo process each) train exactly what one process
    with --update-freq 2 trains on the same data and seed (no dropout: each rank would draw
    its own masks)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    common = dict(ende, MAX_UPDATE="3", DROPOUT="0", SAVE_INTERVAL_UPDATES="1000", CPU_WORKERS="1")
    multi = os.path.join(ende["WORK"], "runs", "two_nodes")
    nodes = dict(common, NNODES="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port, UPDATE_FREQ="1", SAVE_DIR=multi)
    full = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1", NGPUS="0", BPE_MERGES="60",
                MAX_TOKENS="400", WARMUP="2", LOG_INTERVAL="1", MODEL_ARGS=TINY_MODEL)
    full["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full["PATH"]
    single = os.path.join(ende["WORK"], "runs", "update_freq2")
    train = ["bash", os.path.join(RECIPES, "wmt14_en_de", "train.sh")]
    # both nodes and the single-process reference side by side (the test's wall time); each
    # output in its own file (a pipe nobody reads would fill and stop its writer)
    envs = {"node 0": dict(nodes, NODE_RANK="0"), "node 1": dict(nodes, NODE_RANK="1"),
            "update_freq 2": dict(common, UPDATE_FREQ="2", SAVE_DIR=single)}
    outs = {name: open(tmp_path / f"{name.replace(' ', '_')}.out", "w+") for name in envs}
    procs = {name: subprocess.Popen(train, env=dict(full, **env), stdout=outs[name], stderr=subprocess.STDOUT,
                                    start_new_session=True) for name, env in envs.items()}
    failed = []
    try:
        # a node that fails leaves its peer waiting for it (torchrun's rendezvous: 15 minutes):
        # the first failure stops every process at once and is shown
        while not failed and any(p.poll() is None for p in procs.values()):
            failed = [name for name, p in procs.items() if p.poll() not in (None, 0)]
            time.sleep(0.5)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs.values():
            p.wait(timeout=60)
    text = {}
    for name, f in outs.items():
        f.seek(0)
        text[name] = f.read()
        f.close()
    failed += [name for name, p in procs.items() if p.returncode != 0 and name not in failed]  # stopped last
    assert not failed, "\n".join(f"{name} failed ({procs[name].returncode}):\n{text[name][-3000:]}" for name in failed)
    assert "workers=2 (NGPUS=0 NNODES=2)" in text["node 0"]
    log = open(os.path.join(multi, "train.log"), encoding="utf-8").read()
    assert "torch.distributed.run --nnodes 2" in log
    assert "training on 2 devices" in log and "'distributed_world_size': 2" in log
    assert "distributed init (rank 1)" in log + text["node 1"]

    def losses(save):
        lines = open(os.path.join(save, "train.log"), encoding="utf-8").read().splitlines()
        rows = [json.loads(line[line.index("{"):]) for line in lines if "| train_inner |" in line]
        return [(r["num_updates"], float(r["loss"]), float(r["nll_loss"]), r["bsz"]) for r in rows]

    two, one = losses(multi), losses(single)
    assert len(two) == len(one) == 3
    for (u2, l2, n2, b2), (u1, l1, n1, b1) in zip(two, one):
        assert u2 == u1 and b2 == b1  # same updates over the same sentences
        assert abs(l2 - l1) <= 1e-3 and abs(n2 - n1) <= 1e-3  # the log prints 3 decimals
    a = _model_state(os.path.join(multi, "checkpoint_last.pt"))
    b = _model_state(os.path.join(single, "checkpoint_last.pt"))
    assert a.keys() == b.keys()
    for k in a:  # the weights after 3 updates: equal to fp32 rounding
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)


def _model_state(path):
    from fairseq_attn_plugins.checkpoint_safety import safe_load
    return safe_load(path)["model"]


def test_sentencepiece_option_round_trips(tmp_path):
    env = recipe_data.write_pair(str(tmp_path / "data"), "en", "de", sizes=(("train", 200),))
    p = steps("bpe-learn", "--tool", "sentencepiece", "--merges", "80", env["TRAIN_SRC"], env["TRAIN_TGT"],
              "--output", str(tmp_path / "spm.model"))
    assert p.returncode == 0, p.stderr
    p = steps("bpe-apply", "--tool", "sentencepiece", "--codes", str(tmp_path / "spm.model"),
              env["TRAIN_SRC"], str(tmp_path / "o.en"))
    assert p.returncode == 0, p.stderr
    src, pieces = read(env["TRAIN_SRC"]), read(tmp_path / "o.en")
    assert any(len(p.split()) > len(s.split()) for s, p in zip(src, pieces))  # words were split
    # what fairseq's --remove-bpe=sentencepiece does gives the input back
    assert [p.replace(" ", "").replace("\u2581", " ").strip() for p in pieces] == src
