"""The train-short / test-long study's parts: the Greek-English New Testament read from the
bible-alignments package, and the position limits checked against the longest sentences."""

import csv
import hashlib
import os
import subprocess
import sys
from importlib import metadata

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from cli_helpers import shared_data  # noqa: E402


def steps(*args):
    return subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", *args], capture_output=True, text=True)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


# ------------------------------------------------------------------ the bible corpus
def package_file(rel):
    return str(metadata.distribution("bible-alignments").locate_file(rel))


def plain_verses():
    """Both sides of every verse, read with plain loops over the package's TSV files."""
    greek, english = {}, {}
    with open(package_file("data/sources/SBLGNT.tsv"), encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    for row in rows[1:]:
        verse = row[0][1:9]
        greek[verse] = (greek[verse] + " " + row[2]) if verse in greek else row[2]
    with open(package_file("data/eng/targets/BSB/nt_BSB.tsv"), encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    head = rows[0]
    for row in rows[1:]:
        row = dict(zip(head, row + [""] * len(head)))
        text = english.get(row["source_verse"], "") + row["text"]
        if row["skip_space_after"] != "y":
            text += " "
        english[row["source_verse"]] = text
    return greek, {v: " ".join(t.split()) for v, t in english.items()}


def test_bible_corpus_is_the_package_verses_split_by_verse_id(tmp_path):
    p = steps("bible-corpus", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    greek, english = plain_verses()
    both = [v for v in greek if v in english]
    seen = {}
    for split in ("train", "valid", "test"):
        ids, grc, en = (read(tmp_path / f"{split}.{x}") for x in ("ids", "grc", "en"))
        assert len(ids) == len(grc) == len(en)
        for v, g, e in zip(ids, grc, en):
            assert g == greek[v] and e == english[v]
            bucket = int(hashlib.sha256(v.encode()).hexdigest(), 16) % 100
            assert split == ("test" if bucket < 12 else "valid" if bucket < 17 else "train")
            seen[v] = split
    assert sorted(seen) == sorted(both) and len(seen) == 7936  # every verse with both sides, once
    assert read(tmp_path / "train.ids") == [v for v in greek if seen.get(v) == "train"]  # canonical order
    # the script check knows Greek: the sides as given pass, swapped they are refused
    ok = steps("check-script", "grc", str(tmp_path / "test.grc"), "en", str(tmp_path / "test.en"))
    assert ok.returncode == 0, ok.stderr
    bad = steps("check-script", "en", str(tmp_path / "test.grc"))
    assert bad.returncode == 2 and "Greek, expected Latin (en)" in bad.stderr


def test_bible_recipe_refuses_another_pair(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, WORK=str(tmp_path / "w"), SRC="de", TGT="en")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run(["bash", os.path.join(root, "recipes", "bible_grc_en", "prepare.sh")], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 2 and "the bible corpus is Greek-English: SRC=grc TGT=en" in p.stderr


# ------------------------------------------------------------------ position limits
def longest_plain(root):
    """(longest source, longest target) of valid and test in tokens + EOS, from the raw text."""
    out = [0, 0]
    for split in ("valid", "test"):
        for i, lang in enumerate(("src", "tgt")):
            out[i] = max([out[i]] + [len(line.split()) + 1 for line in read(os.path.join(root, "raw", f"{split}.{lang}"))])
    return out


def check(data, arch, model_args="", a=0.0, b=200):
    return steps("check-positions", "--data", data, "--src", "src", "--tgt", "tgt", "--arch", *arch.split(),
                 "--max-len-a", str(a), "--max-len-b", str(b), f"--model-args={model_args}")


def flags(p):
    assert p.returncode == 0, p.stderr
    return {line.split("\t")[0]: line.split("\t")[1] for line in p.stdout.splitlines()}


def test_position_limits_raised_only_when_the_longest_sentence_or_output_needs_it():
    data = shared_data()
    src, tgt = longest_plain(os.path.dirname(data))
    # fairseq's limits (1024) hold the toy sentences and beam search's 200-token default
    assert flags(check(data, "transformer_attn_wmt_en_de transformer_rope_wmt_en_de")) == {
        "transformer_attn_wmt_en_de": "", "transformer_rope_wmt_en_de": ""}
    # outputs allowed to grow to 100 x source + 1000 tokens: the target limit is raised to hold them
    need_tgt = max(tgt, int(100 * src + 1000) + 1)
    assert need_tgt > 1024
    got = flags(check(data, "transformer_attn_wmt_en_de transformer_alibi_wmt_en_de", a=100, b=1000))
    want = f"--max-source-positions 1024 --max-target-positions {need_tgt}"
    assert got == {"transformer_attn_wmt_en_de": want, "transformer_alibi_wmt_en_de": want}


@pytest.mark.parametrize("model_args, a, b, message", [
    ("--max-source-positions=4 --max-target-positions=4", 0, 200,
     "MODEL_ARGS sets --max-source-positions 4; raise it to {src} or remove it"),
    ("--decoder-learned-pos", 100, 1000,
     "--decoder-learned-pos learns a table of 1024 rows, none beyond: train it with --max-target-positions {big}"),
])
def test_position_limits_refused_for_learned_tables_and_limits_the_user_set(model_args, a, b, message):
    data = shared_data()
    src, tgt = longest_plain(os.path.dirname(data))
    p = check(data, "transformer_attn_wmt_en_de", model_args, a, b)
    assert p.returncode == 2 and p.stdout == ""
    assert message.format(src=src, big=max(tgt, int(a * src + b) + 1)) in p.stderr
    assert len([line for line in p.stderr.splitlines() if line.startswith("error:")]) == 1


def test_position_limits_refused_when_a_piece_caps_them():
    """convattn1d caps --max-source-positions at --convattn-max-len: raising it does not help."""
    data = shared_data()
    src, _ = longest_plain(os.path.dirname(data))
    p = check(data, "transformer_convattn1d_wmt_en_de", f"--convattn-max-len={src - 1}")
    assert p.returncode == 2
    assert f"the model still reads only {src - 1} source" in p.stderr and "--convattn-max-len" in p.stderr
