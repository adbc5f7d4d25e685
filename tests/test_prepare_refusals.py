"""prepare.sh replaces only what it made, and checks TRAIN_DOCS before any step: an explicit DATA
that is not an earlier output of the same recipe (its prepare.json), or that is WORK, a run folder
or a folder holding either, is refused in one line before anything is made, and every file there
is left as it was; a TRAIN_DOCS of another line count than the local TRAIN_SRC is refused before
any step. Real recipe scripts; no step runs before the refusals (no tokeniser, no fairseq)."""

import hashlib
import json
import os
import re
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import recipe_data  # noqa: E402
from test_recipes import RECIPES, prepared_ende, run, steps  # noqa: E402

RECIPE_NAMES = ("wmt14_en_de", "wmt17_zh_en", "wat17_ja_en", "bible_grc_en")
PAIRS = {"wmt14_en_de": "en-de", "wmt17_zh_en": "zh-en", "wat17_ja_en": "ja-en", "bible_grc_en": "grc-en"}


def settable_variables():
    """The variables a user sets for the recipes: those their shell code reads from the environment
    (``${NAME:-default}``), and those it reads by a name it builds: the local corpus files
    (TRAIN_SRC ... TEST_TGT) and each language's tokeniser (TOKENIZER_<LANG>)."""
    names = {f"{split}_{side}" for split in ("TRAIN", "VALID", "TEST") for side in ("SRC", "TGT")}
    names |= {f"TOKENIZER_{lang.upper()}" for pair in PAIRS.values() for lang in pair.split("-")}
    for dirpath, _, filenames in os.walk(RECIPES):
        for name in filenames:
            if name.endswith(".sh"):
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    names |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]*):[-=]", f.read()))
    return names


def named_variables(message):
    """The NAME= a message names."""
    return set(re.findall(r"(?<![A-Za-z0-9_])([A-Z][A-Z0-9_]*)=", message))


def tree(folder):
    """Every folder and file under ``folder`` with its content's sha256 (a folder: None)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), folder)] = None
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as f:
                out[os.path.relpath(os.path.join(dirpath, name), folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def refused(recipe, env, data, says, keeps):
    """prepare.sh of ``recipe`` with DATA=``data``: one error line naming DATA, why (``says``) and
    what is allowed; nothing under ``keeps`` changed, and no leftover (DATA.tmp) that a corrected
    re-run would trip on."""
    before = tree(keeps)
    p = run(recipe, "prepare.sh", dict(env, DATA=str(data)), check=False)
    errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert p.returncode == 1 and p.stderr.splitlines() == errors and len(errors) == 1, (recipe, data, p.stderr)
    assert errors[0].startswith(f"error: DATA={data} {says}"), (errors[0], says)
    assert (f"it takes only a new folder or one an earlier prepare.sh of {recipe} wrote (its prepare.json), "
            f"or no DATA") in errors[0]
    assert tree(keeps) == before, f"{recipe} with DATA={data} changed {keeps}"
    assert not os.path.exists(f"{data}.tmp") and not os.path.exists(f"{data}.tmp.dict")
    return errors[0]


def test_prepare_refuses_a_data_folder_it_did_not_make_before_any_step(tmp_path):
    corpus = recipe_data.write_pair(str(tmp_path / "corpus"), "en", "de")
    work = tmp_path / "work"
    env = dict(corpus, WORK=str(work))
    # a folder holding a user's files: refused by every recipe (nothing made, not even WORK)
    mine = tmp_path / "mine"
    write(str(mine / "notes.txt"), "my notes\n")
    write(str(mine / "sub" / "table.csv"), "a,b\n1,2\n")
    for recipe in RECIPE_NAMES:
        refused(recipe, env, mine, "has no prepare.json: it is not a folder prepare.sh wrote", tmp_path)
        assert not work.exists(), recipe
    # a trained run (its record, checkpoints, log and outputs)
    trained = tmp_path / "runs" / "transformer_attn_wmt_en_de"
    for name, text in (("run.json", '{"arch": "transformer_attn_wmt_en_de"}\n'), ("checkpoint_last.pt", "weights"),
                       ("checkpoint_1_12.pt", "weights"), ("train.log", "log\n"), ("test/scores.json", "{}\n")):
        write(str(trained / name), text)
    refused("wmt14_en_de", env, trained, "is a run folder or a WORK (it holds run.json)", tmp_path)
    os.remove(trained / "run.json")  # its checkpoints alone say it too
    refused("wmt14_en_de", env, trained, "is a run folder or a WORK (it holds checkpoint_last.pt)", tmp_path)
    assert not work.exists()
    # WORK itself, a parent of WORK, and a folder of WORK's steps (WORK with a run and a user's file)
    write(str(work / "raw" / "train.en"), "a line\n")
    write(str(work / "runs" / "r" / "run.json"), "{}\n")
    write(str(work / "runs.index"), json.dumps({"run": str(work / "runs" / "r")}) + "\n")
    write(str(work / "my notes.txt"), "kept\n")
    refused("wmt14_en_de", env, work, "is WORK (it holds the steps, the prepared data and the runs", tmp_path)
    refused("wmt14_en_de", env, tmp_path, f"holds WORK={work}", tmp_path)
    refused("wmt14_en_de", env, work / "raw", f"is WORK's raw/ ({work}/raw), which prepare.sh manages", tmp_path)
    assert not (work / ".prepare.lock").exists() and not (work / "tok").exists()
    # a user's corpus kept in WORK's raw/, which the raw step empties before it copies the corpora there:
    # refused in one line naming the variable, the file left where it is, nothing made
    for side, lang in (("SRC", "en"), ("TGT", "de")):
        shutil.copyfile(corpus[f"TRAIN_{side}"], work / "raw" / f"mine.{lang}")
    before = tree(tmp_path)
    mine = dict(env, TRAIN_SRC=str(work / "raw" / "mine.en"), TRAIN_TGT=str(work / "raw" / "mine.de"))
    p = run("wmt14_en_de", "prepare.sh", mine, check=False)
    assert p.returncode == 1 and p.stderr.splitlines() == [
        f"error: TRAIN_SRC={work}/raw/mine.en lies in WORK's raw/ ({work}/raw), which prepare.sh empties and fills "
        f"itself, so it would be deleted: move it out of WORK's raw/, tok/, bpe/, .done/, downloads/, data/ and give "
        f"its new path; nothing was changed"], p.stderr
    assert tree(tmp_path) == before


@pytest.mark.e2e  # starts from the WORK the en-de recipe prepares (prepared_ende): not the inner loop's
def test_prepare_replaces_only_its_own_recipes_output(tmp_path):
    """A real output of the en-de recipe's prepare.sh (the shared prepared WORK's data folder, copied
    as an explicit DATA): its own recipe may replace it, another recipe may not, nor may any recipe
    when a run lies inside it or when it is a WORK's own data folder."""
    env = prepared_ende(tmp_path / "work")
    work = env["WORK"]
    keyed = os.path.realpath(os.path.join(work, "data-bin"))
    ours = str(tmp_path / "ende-data")
    shutil.copytree(keyed, ours)
    rec = json.load(open(os.path.join(ours, "prepare.json")))
    assert rec["recipe"] == "wmt14_en_de"

    def dest(recipe, data=ours):
        return steps("check-data-dest", "--data", data, "--work", str(tmp_path / "w2"), "--recipe", recipe,
                     "--pair", PAIRS[recipe])

    assert dest("wmt14_en_de").returncode == 0  # replaced as before
    refused("wmt17_zh_en", {"WORK": str(tmp_path / "w2")}, ours, "was written by the prepare.sh of wmt14_en_de "
            "(its prepare.json), not of wmt17_zh_en", tmp_path)
    assert dest("bible_grc_en").returncode == 1
    # a record of an older prepare.sh (no recipe): its language pair says whose it is
    del rec["recipe"]
    json.dump(rec, open(os.path.join(ours, "prepare.json"), "w"))
    assert dest("wmt14_en_de").returncode == 0
    p = dest("wmt17_zh_en")
    assert p.returncode == 1 and "holds en-de data (its prepare.json), not zh-en: another recipe's output" in p.stderr
    # a run trained into the data folder (SAVE_DIR inside DATA)
    write(os.path.join(ours, "runs", "r", "run.json"), "{}\n")
    refused("wmt14_en_de", env, ours, f"holds the run folder or WORK {ours}/runs/r (run.json)", tmp_path)
    # the data folder of a WORK (its data-bin and runs name it), given to another WORK
    refused("wmt14_en_de", dict(env, WORK=str(tmp_path / "w2")), keyed, f"is a data folder of WORK={os.path.realpath(work)}",
            tmp_path)
    assert not os.path.exists(tmp_path / "w2")


def test_train_docs_of_another_line_count_is_refused_before_any_step(tmp_path):
    corpus = recipe_data.write_pair(str(tmp_path / "corpus"), "en", "de")
    n = len(open(corpus["TRAIN_SRC"]).read().splitlines())
    docs = tmp_path / "train.docs"
    docs.write_text("".join(f"doc{i // 4}\n" for i in range(n - 1)))
    work = tmp_path / "work"
    # with and without TRAIN_CONCAT (lengths.sh prepares its condition without joined pairs with the same TRAIN_DOCS)
    for script, extra in (("prepare.sh", {"TRAIN_CONCAT": "2"}), ("prepare.sh", {}), ("lengths.sh", {"TRAIN_CONCAT": "2"})):
        p = run("wmt14_en_de", script, dict(corpus, WORK=str(work), TRAIN_DOCS=str(docs), **extra), check=False)
        assert p.returncode == 1 and len(p.stderr.splitlines()) == 1, (script, extra, p.stderr)
        assert p.stderr == (f"error: TRAIN_DOCS={docs}: {n - 1} lines, but the training source "
                            f"(TRAIN_SRC={corpus['TRAIN_SRC']}) has {n}: give one document id per training line\n")
        assert not work.exists()  # before any step: no tokenising, not even WORK


@pytest.mark.e2e
def test_a_users_data_tmp_is_refused_and_a_killed_binarise_leftover_removed(tmp_path):
    """prepare.sh writes an explicit DATA as DATA.tmp (and DATA.tmp.dict) first, then moves it. A
    DATA.tmp it did not make (no made-by-prepare.tmp in it) is the user's: refused in one line and
    left as it was; renamed, the same command prepares DATA. A killed binarise's marked leftover is
    removed, and the mark never reaches DATA."""
    env = prepared_ende(tmp_path / "work")
    data = tmp_path / "ende"
    for leftover in (f"{data}.tmp", f"{data}.tmp.dict"):
        write(os.path.join(leftover, "notes.txt"), "my notes\n")
        before = tree(tmp_path)
        p = run("wmt14_en_de", "prepare.sh", dict(env, DATA=str(data)), check=False)
        errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
        assert p.returncode == 1 and p.stderr.splitlines() == errors and len(errors) == 1, p.stderr
        assert errors[0].startswith(f"error: DATA={data}: {leftover} exists and prepare.sh did not make it "
                                    "(it has no made-by-prepare.tmp)"), errors[0]
        assert "rename or remove it, or give another DATA" in errors[0]
        assert tree(tmp_path) == before and not data.exists()
        shutil.move(leftover, str(tmp_path / f"kept{len(leftover)}"))
    # a file or a link named DATA.tmp is the user's too
    write(f"{data}.tmp", "a file\n")
    assert "exists and prepare.sh did not make it" in run("wmt14_en_de", "prepare.sh", dict(env, DATA=str(data)),
                                                          check=False).stderr
    os.remove(f"{data}.tmp")
    # what a binarise killed before its move leaves: marked, so removed before the new one is written
    write(f"{data}.tmp/made-by-prepare.tmp", "")
    write(f"{data}.tmp/train.en-de.en.bin", "half written")
    write(f"{data}.tmp.dict/made-by-prepare.tmp", "")
    run("wmt14_en_de", "prepare.sh", dict(env, DATA=str(data)))
    assert not os.path.lexists(f"{data}.tmp") and not os.path.lexists(f"{data}.tmp.dict")
    assert json.load(open(data / "prepare.json"))["data_id"]
    assert "made-by-prepare.tmp" not in os.listdir(data) and not (data / "train.en-de.en.bin").read_bytes() == b"half written"
    # the explicit DATA holds the same data as WORK's own data folder (the mark is in no digest)
    keyed = json.load(open(os.path.join(env["WORK"], "data-bin", "prepare.json")))
    assert json.load(open(data / "prepare.json"))["data_id"] == keyed["data_id"]
    # the user's folders are as they were
    assert (tmp_path / f"kept{len(str(data)) + 4}" / "notes.txt").read_text() == "my notes\n"
    assert (tmp_path / f"kept{len(str(data)) + 9}" / "notes.txt").read_text() == "my notes\n"

    # a run trained on DATA: other settings would replace its data, so nothing is replaced and the run
    # is named; the same settings make the same data, which is kept
    save = os.path.join(env["WORK"], "runs", "on_data")
    run("wmt14_en_de", "train.sh", dict(env, DATA=str(data), SAVE_DIR=save, MAX_UPDATE="1"))
    before = tree(data)
    p = run("wmt14_en_de", "prepare.sh", dict(env, DATA=str(data), CLEAN_MAX="18"), check=False)
    errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert p.returncode == 1 and len(errors) == 2 and errors[1].startswith("error: step 'binarise' failed"), p.stderr[-2000:]
    assert errors[0].startswith(f"error: DATA={data} holds the data 1 run(s) were trained on ({os.path.realpath(save)}), "
                                "and these settings make other data: nothing was replaced"), errors[0]
    assert tree(data) == before and not os.path.lexists(f"{data}.tmp") and not os.path.lexists(f"{data}.tmp.dict")
    # a cap above every training sentence: other settings, the same data (kept, the settings recorded beside)
    p = run("wmt14_en_de", "prepare.sh", dict(env, DATA=str(data), CLEAN_MAX="300"))
    assert f"DATA={data}: the same data was prepared there before: kept" in p.stderr
    after = tree(data)
    assert {k: v for k, v in after.items() if k != "prepare.json"} == {k: v for k, v in before.items() if k != "prepare.json"}
    rec = json.load(open(data / "prepare.json"))
    assert rec["data_id"] == keyed["data_id"] and [w["settings"]["CLEAN"] for w in rec["also_prepared_as"]] == ["1-300-1.5"]
    # the run's data as it was trained on: it evaluates on it, and so does a run given these settings
    p = run("wmt14_en_de", "evaluate.sh", dict(env, DATA=str(data), SAVE_DIR=save, CLEAN_MAX="300", N_AVG="1"))
    assert json.load(open(os.path.join(save, "run.json")))["evaluations"]["test"]["ref"] == str(data / "raw" / "test.de")
