"""Long inputs from whole documents (``concat-test``, CONCAT of lengths.sh): the joined test sets
against a plain grouping of the document ids, and the refusals."""

import json
import random
import subprocess
import sys


def steps(*args):
    return subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", *args], capture_output=True, text=True)


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def plain_groups(docs, k):
    """Groups of k consecutive lines of one document, written as plainly as possible."""
    groups, current = [], []
    for i, d in enumerate(docs):
        if current and docs[current[0]] != d:  # a new document: a short group is dropped
            current = []
        current.append(i)
        if len(current) == k:
            groups.append(current)
            current = []
    return groups


def corpus(tmp_path, n=97, seed=0):
    rng = random.Random(seed)
    docs, d = [], 0
    while len(docs) < n:  # documents of 1..11 segments; an id that comes back later is another document
        d = rng.choice([d + 1, d + 1, d + 1, 0])
        docs += [f"doc{d}"] * rng.randint(1, 11)
    docs = docs[:n]
    src = [" ".join(f"s{i}w{j}" for j in range(rng.randint(1, 9))) for i in range(n)]
    ref = [" ".join(f"r{i}w{j}" for j in range(rng.randint(1, 9))) for i in range(n)]
    return docs, src, ref, {"src": write(tmp_path / "test.src", src), "ref": write(tmp_path / "test.tgt", ref),
                            "docs": write(tmp_path / "test.docs", docs)}


def concat(files, ks, out, docs=True):
    args = ["concat-test", "--src", files["src"], "--ref", files["ref"], "--ks", ks, "--out", str(out),
            "--src-lang", "src", "--tgt-lang", "tgt"]
    return steps(*(args + (["--docs", files["docs"]] if docs else [])))


def test_joined_inputs_are_the_plain_groups_of_each_document(tmp_path):
    docs, src, ref, files = corpus(tmp_path)
    out = tmp_path / "concat"
    p = concat(files, "1,2,4,8", out)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", "2", "4", "8"]
    info = json.loads((out / "concat.json").read_text())
    for k in (2, 4, 8):
        groups = plain_groups(docs, k)
        assert groups and all(len(g) == k for g in groups)
        assert read(out / f"k{k}.src") == [" ".join(src[i] for i in g) for g in groups]
        assert read(out / f"k{k}.tgt") == [" ".join(ref[i] for i in g) for g in groups]
        assert read(out / f"k{k}.docs") == [docs[g[0]] for g in groups]
        words = [sum(len(src[i].split()) for i in g) for g in groups]
        entry = info["k"][str(k)]
        assert entry["n"] == len(groups) and entry["max_src_words"] == max(words)
        assert abs(entry["mean_src_words"] - sum(words) / len(words)) < 1e-12
        assert entry["first_lines"] == [g[0] + 1 for g in groups]
    assert info["k"]["1"]["n"] == len(src) and not (out / "k1.src").exists()
    # the second "doc0" run is a document of its own: no group spans the two
    assert all(len({docs[i] for i in range(g[0], g[-1] + 1)}) == 1 for g in plain_groups(docs, 8))


def test_without_document_ids_the_file_is_one_document(tmp_path):
    _, src, ref, files = corpus(tmp_path, n=30)
    out = tmp_path / "concat"
    p = concat(files, "4", out, docs=False)
    assert p.returncode == 0, p.stderr
    assert read(out / "k4.src") == [" ".join(src[i:i + 4]) for i in range(0, 28, 4)]  # 2 lines left over
    info = json.loads((out / "concat.json").read_text())
    assert info["documents"].startswith("the test file in order as one document") and info["n_documents"] == 1


def test_a_k_no_document_holds_is_skipped_and_the_others_go_on(tmp_path):
    docs, _, _, files = corpus(tmp_path)
    runs, last = [], None  # the length of each document, plainly
    for d in docs:
        if d == last:
            runs[-1] += 1
        else:
            runs.append(1)
        last = d
    longest = max(runs)
    out = tmp_path / "concat"
    p = concat(files, f"2,{longest + 1}", out)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["2"]
    assert f"no document has {longest + 1} segments (the longest has {longest})" in p.stderr
    assert (out / "k2.src").exists() and not (out / f"k{longest + 1}.src").exists()
    assert list(json.loads((out / "concat.json").read_text())["k"]) == ["2"]


def test_bad_concat_and_test_docs_are_refused_in_one_line_with_nothing_written(tmp_path):
    _, _, _, files = corpus(tmp_path, n=20)
    for ks, message in (("1,2,2", "2 given twice"), ("0,2", "positive integers"), ("1,x", "positive integers"),
                        ("", "positive integers")):
        out = tmp_path / f"out{len(message)}{ks.replace(',', '_')}"
        p = concat(files, ks, out)
        errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
        assert p.returncode == 1 and len(errors) == 1 and f"CONCAT={ks}" in errors[0] and message in errors[0]
        assert not out.exists()
    files["docs"] = write(tmp_path / "short.docs", ["a"] * 19)
    out = tmp_path / "out_docs"
    p = concat(files, "1,2", out)
    assert p.returncode == 1 and f"TEST_DOCS={files['docs']}: 19 lines, but the test source" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not out.exists()


def test_aspec_test_lines_give_their_document_ids(tmp_path):
    """ASPEC-JE dev/test lines: field-document ID ||| sentence ID ||| Japanese ||| English."""
    rows = [("A-B-1", "1", "日本語 一", "one"), ("A-B-1", "2", "日本語 二", "two"), ("C-D-7", "1", "三", "three")]
    src = write(tmp_path / "test.txt", [" ||| ".join(r) for r in rows])
    p = steps("extract", src, "--src-out", str(tmp_path / "ja"), "--tgt-out", str(tmp_path / "en"),
              "--docs-field", "0", "--docs-out", str(tmp_path / "docs"))
    assert p.returncode == 0, p.stderr
    assert read(tmp_path / "docs") == [r[0] for r in rows]
    assert read(tmp_path / "ja") == [r[2] for r in rows] and read(tmp_path / "en") == [r[3] for r in rows]
    bad = steps("extract", write(tmp_path / "two.txt", ["ja ||| en"]), "--src-out", str(tmp_path / "x"),
                "--tgt-out", str(tmp_path / "y"), "--docs-out", str(tmp_path / "z"))
    assert bad.returncode == 1 and "expected a document ID and a sentence ID" in bad.stderr


def test_a_test_docs_file_without_its_final_newline_is_read_as_text_lines(tmp_path):
    """TEST_DOCS checked by lengths.sh before any work, then read by concat-test: its last line
    counts with or without the newline that ends it, as any text line."""
    import os

    docs, _, _, files = corpus(tmp_path, n=20)
    bare = tmp_path / "bare.docs"
    bare.write_text("\n".join(docs), encoding="utf-8")  # no final newline
    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "lib")
    env = dict(os.environ, PYTHON=sys.executable, TEST_SRC=files["src"], CONCAT="1,2")
    check = f'. "{lib}/common.sh"; . "{lib}/lengths.sh"; lengths_check_concat'
    for given, ok in ((str(bare), True), (files["docs"], True), (write(tmp_path / "short.docs", docs[:-1]), False)):
        p = subprocess.run(["bash", "-c", check], env=dict(env, TEST_DOCS=given), capture_output=True, text=True)
        assert (p.returncode == 0) == ok and (p.stderr == "") == ok, (given, p.stderr)
        if not ok:
            assert p.stderr == (f"error: TEST_DOCS={given}: 19 lines, but the test source {files['src']} has 20: "
                                f"give one document id per test line\n")
    out = tmp_path / "out"
    p = concat(dict(files, docs=str(bare)), "2", out)
    assert p.returncode == 0, p.stderr
    assert read(out / "k2.docs") == [docs[g[0]] for g in plain_groups(docs, 2)]


# ------------------------------------------------------------------ concatenation training (TRAIN_CONCAT)
def concat_train(files, ks, out, docs=True, seed=None):
    args = ["concat-train", "--src", files["src"], "--tgt", files["ref"], "--ks", ks,
            "--src-out", str(out / "train.src"), "--tgt-out", str(out / "train.tgt"),
            "--groups-out", str(out / "groups"), "--record", str(out / "record.json")]
    return steps(*(args + (["--docs", files["docs"]] if docs else []) + (["--seed", str(seed)] if seed else [])))


def plain_windows(docs, k):
    """Each line with its next k - 1 lines, where all k are of its document (a run of equal ids)."""
    out = []
    for i in range(len(docs) - k + 1):
        if all(docs[j] == docs[i] for j in range(i, i + k)):
            out.append(list(range(i, i + k)))
    return out


def test_training_pairs_joined_with_their_next_pairs_of_one_document(tmp_path):
    docs, src, tgt, files = corpus(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    p = concat_train(files, "2,4", out)
    assert p.returncode == 0, p.stderr
    want_groups = plain_windows(docs, 2) + plain_windows(docs, 4)
    # the original pairs first, then each window joined by one space, source with source, target with target
    assert read(out / "train.src") == src + [" ".join(src[i] for i in g) for g in want_groups]
    assert read(out / "train.tgt") == tgt + [" ".join(tgt[i] for i in g) for g in want_groups]
    assert read(out / "groups") == [" ".join(str(i + 1) for i in g) for g in want_groups]
    rec = json.loads((out / "record.json").read_text())
    assert rec["original"] == len(src) and rec["seed"] is None and rec["documents"].endswith("test.docs")
    assert rec["k"] == {"2": {"n": len(plain_windows(docs, 2))}, "4": {"n": len(plain_windows(docs, 4))}}
    assert rec["total"] == len(src) + len(want_groups)
    # no window spans two documents: the second "doc0" run is a document of its own
    assert all(len({docs[i] for i in g}) == 1 and g == list(range(g[0], g[-1] + 1)) for g in want_groups)


def test_training_pairs_without_documents_are_joined_with_seeded_random_pairs(tmp_path):
    _, src, tgt, files = corpus(tmp_path, n=40)
    outs = []
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        out = tmp_path / name
        out.mkdir()
        p = concat_train(files, "3", out, docs=False, seed=seed)
        assert p.returncode == 0, p.stderr
        groups = [[int(x) - 1 for x in line.split()] for line in read(out / "groups")]
        # every pair starts one group, with 2 other pairs (never itself, never twice)
        assert [g[0] for g in groups] == list(range(len(src)))
        assert all(len(set(g)) == 3 for g in groups)
        assert read(out / "train.src") == src + [" ".join(src[i] for i in g) for g in groups]
        assert read(out / "train.tgt") == tgt + [" ".join(tgt[i] for i in g) for g in groups]
        rec = json.loads((out / "record.json").read_text())
        assert rec["documents"] is None and rec["seed"] == seed
        outs.append(groups)
    assert outs[0] == outs[1] != outs[2]  # the seed decides the draw


def test_bad_train_concat_is_refused_in_one_line_with_nothing_written(tmp_path):
    _, _, _, files = corpus(tmp_path, n=20)
    for ks, message in (("1", "integers of at least 2"), ("2,2", "2 given twice"), ("2,x", "integers of at least 2"),
                        ("", "integers of at least 2")):
        out = tmp_path / f"out_{ks.replace(',', '_') or 'empty'}"
        out.mkdir()
        p = concat_train(files, ks, out)
        errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
        assert p.returncode == 1 and len(errors) == 1 and f"TRAIN_CONCAT={ks}" in errors[0] and message in errors[0]
        assert list(out.iterdir()) == []
