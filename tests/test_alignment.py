"""Attention as alignment: AER, the bible gold, cross-attention links, eflomal, fairseq-attn-align."""

import contextlib
import csv
import io
import json
import os
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from recipe_data import bible_corpus  # noqa: E402
from trained_models import data_dir, trained  # noqa: E402

from fairseq_attn_plugins.alignment.attention import teacher_forced_attention, word_links, word_matrix  # noqa: E402
from fairseq_attn_plugins.alignment.words import word_of_tokens  # noqa: E402
from fairseq_attn_reports import alignment_evaluation as evaluation  # noqa: E402
from fairseq_attn_reports.cli import align as align_cli  # noqa: E402
from fairseq_attn_records import alignment as A  # noqa: E402


def hand_aer(pred, gold):
    """Och & Ney with S = P = gold, counts summed over sentences, by plain loops (percent)."""
    hit = n_pred = n_gold = 0
    for p, g in zip(pred, gold):
        for link in p:
            n_pred += 1
            if link in g:
                hit += 1
        n_gold += len(g)
    return (100 * (1 - 2 * hit / (n_pred + n_gold)), 100 * hit / n_pred, 100 * hit / n_gold)


def test_aer_by_hand_on_a_few_sentences():
    gold = [{(0, 0), (1, 1), (2, 1)}, {(0, 1)}, set(), {(3, 2), (0, 0)}]
    pred = [{(0, 0), (2, 1), (1, 2)}, {(0, 0)}, {(0, 0)}, {(3, 2), (0, 0)}]
    s = A.aer_scores(pred, gold)
    aer, p, r = hand_aer(pred, gold)
    torch.testing.assert_close((s["aer"], s["precision"], s["recall"]), (aer, p, r))
    # 4 correct of 7 predicted, 6 gold, summed over sentences (not a mean of sentence AERs)
    torch.testing.assert_close(s["aer"], 100 * (1 - 2 * 4 / (7 + 6)))


def test_grow_diag_final_and_by_hand():
    fwd = {(0, 0), (1, 1), (3, 3)}
    rev = {(0, 0), (1, 2), (2, 1), (3, 0)}
    # intersection {0-0}; grow: 1-1 (diagonal of 0-0, both words unaligned), then 1-2 and 2-1 (next to
    # 1-1, target 2 / source 2 unaligned), then 3-0 (diagonal of 2-1, source 3 unaligned although
    # target 0 is aligned); final-and: 3-3 not (source 3 aligned by now)
    assert A.grow_diag_final_and(fwd, rev) == {(0, 0), (1, 1), (1, 2), (2, 1), (3, 0)}
    # final-and alone: a directional link whose two words are both unaligned
    assert A.grow_diag_final_and({(0, 0), (2, 2)}, {(0, 0)}) == {(0, 0), (2, 2)}
    assert A.grow_diag_final_and({(0, 0), (2, 0)}, {(0, 0)}) == {(0, 0)}


def test_paired_aer_tests_identical_and_better_systems():
    gold = [{(i, i) for i in range(5)} for _ in range(30)]
    base = [{(i, (i + 1) % 5) for i in range(5)} if k % 2 else g for k, g in enumerate(gold)]
    cells = A.paired_aer_tests(gold, [("base", base), ("same", base), ("perfect", gold)], 200, 200)
    assert cells[1]["same_as_baseline"] and cells[1]["p_bootstrap"] == 1.0
    assert cells[2]["score"] == 0.0 and cells[2]["p_bootstrap"] < 0.01
    torch.testing.assert_close(cells[0]["score"], hand_aer(base, gold)[0])


# -- the bible gold --------------------------------------------------------------------------

def _plain_tsv(path):
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [dict(zip(rows[0], r + [""] * (len(rows[0]) - len(r)))) for r in rows[1:]]


#: the verses the gold is checked on (40002002: punctuation glued to words)
VERSES = ["40001001", "40001002", "43011035", "40002002"]


@pytest.fixture(scope="module")
def bible(tmp_path_factory):
    """The package's rows and records of :data:`VERSES` as files of the package's format, and the
    gold built from them: a verse's gold depends on its rows and the records of its tokens alone, so
    it is the whole package's (the bible-corpus step builds that: the test below reads its files)."""
    pytest.importorskip("fairseq_attn_recipes.bible_gold")
    from fairseq_attn_recipes import bible_gold
    folder = tmp_path_factory.mktemp("bible_gold")
    subset, ids = [], set()
    for path, column, verse_of in zip(bible_gold.package_files()[:2], ("id", "source_verse"),
                                      (lambda value: value[1:9], lambda value: value)):
        with open(path, encoding="utf-8", newline="") as f:
            lines = f.read().split("\n")
        header = lines[0].split("\t")
        rows = [line.split("\t") for line in lines[1:] if line]
        kept = [r for r in rows if verse_of(r[header.index(column)]) in VERSES]
        ids.update(r[header.index("id")] for r in kept)
        subset.append(folder / os.path.basename(path))
        subset[-1].write_text("\n".join([lines[0]] + ["\t".join(r) for r in kept]) + "\n", encoding="utf-8")
    with open(bible_gold.package_files()[2], encoding="utf-8") as f:
        records = [r for r in json.load(f)["records"] if ids & (set(r["source"]) | set(r["target"]))]
    subset.append(folder / "alignment.json")
    subset[-1].write_text(json.dumps({"records": records}), encoding="utf-8")
    return bible_gold, bible_gold.BibleGold(*map(str, subset)), tuple(map(str, subset))


def test_bible_gold_against_a_plain_reading_of_the_package(bible):
    bible_gold, gold, (src_tsv, tgt_tsv, align_json) = bible
    verses = VERSES
    # plain reading: a Greek word is a row; an English word starts after a token followed by a space
    g_word, e_word, g_text, e_text = {}, {}, {v: [] for v in verses}, {v: "" for v in verses}
    for r in _plain_tsv(src_tsv):
        v = r["id"][1:9]
        if v in verses:
            g_word[r["id"]] = (v, len(g_text[v]))
            g_text[v].append(r["text"])
    next_word = {v: 0 for v in verses}
    glued = {v: False for v in verses}
    for r in _plain_tsv(tgt_tsv):
        v = r["source_verse"]
        if v not in verses:
            continue
        e_word[r["id"]] = (v, next_word[v] - 1 if glued[v] else next_word[v])
        if not glued[v]:
            next_word[v] += 1
        glued[v] = r["skip_space_after"] == "y"
        e_text[v] += r["text"] + ("" if glued[v] else " ")
    with open(align_json, encoding="utf-8") as f:
        records = json.load(f)["records"]
    for line_verses in (["40001001"], ["43011035"], ["40002002"], ["40001001", "40001002"]):
        src = " ".join(w for v in line_verses for w in g_text[v])
        tgt = " ".join(" ".join(e_text[v].split()) for v in line_verses)
        off_s, off_t, ns, nt = {}, {}, 0, 0
        for v in line_verses:
            off_s[v], off_t[v] = ns, nt
            ns += len(g_text[v])
            nt += len(e_text[v].split())
        want = set()
        for rec in records:
            for s in rec["source"]:
                for t in rec["target"]:
                    if s in g_word and t in e_word and g_word[s][0] in line_verses and e_word[t][0] in line_verses:
                        want.add((off_s[g_word[s][0]] + g_word[s][1], off_t[e_word[t][0]] + e_word[t][1]))
        got = bible_gold.gold_lines(gold, [line_verses], [src], [tgt], "x")[0]
        assert A.parse_pharaoh(got) == want and want
    assert "," in e_text["40002002"] or "?" in e_text["40002002"]  # the glued case is exercised
    with pytest.raises(ValueError, match="line 1: the target line is not the words of verse"):
        bible_gold.gold_lines(gold, [["40001001"]], [" ".join(g_text["40001001"])], ["not it"], "x")


# -- cross-attention on a real checkpoint ----------------------------------------------------

# the stock model is the one the fine-tuning tests start from (2 updates): the maps and links are
# checked against fairseq's own path and a plain loop, whatever the training
UPDATES = {"stock": 2, "relpos": 80}


def _load(name):
    from fairseq import checkpoint_utils

    import fairseq_attn_plugins  # noqa: F401
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([trained(name, UPDATES[name])],
                                                                    arg_overrides={"data": data_dir()})
    return models[0].eval(), task


@pytest.mark.parametrize("name", ["stock", "relpos"])
def test_layer_maps_equal_fairseq_alignment_layer_and_links_equal_a_plain_loop(name):
    model, task = _load(name)
    task.load_dataset("test")
    item = task.dataset("test")[3]
    src, tgt = item["source"].long(), item["target"].long()
    eos = task.target_dictionary.eos()
    attn = teacher_forced_attention(model, src, tgt, eos)  # (L, H, T, S)
    prev = torch.cat([torch.tensor([eos]), tgt[:-1]])[None]
    with torch.no_grad():
        enc = model.encoder(src[None], src_lengths=torch.tensor([src.numel()]))
        for layer in range(len(model.decoder.layers)):  # fairseq's own path: alignment_layer, heads averaged
            _, extra = model.decoder(prev, encoder_out=enc, alignment_layer=layer)
            torch.testing.assert_close(attn[layer].mean(0), extra["attn"][0][0].double())
    # words: tokens 0+1 of each side glued into one raw word (two pieces), the rest one each
    s_tok = [task.source_dictionary[i] for i in src[:-1].tolist()]
    t_tok = [task.target_dictionary[i] for i in tgt[:-1].tolist()]
    s_line = s_tok[0] + s_tok[1] + " " + " ".join(s_tok[2:])
    t_line = t_tok[0] + t_tok[1] + " " + " ".join(t_tok[2:])
    s_words, t_words = word_of_tokens(s_tok, s_line), word_of_tokens(t_tok, t_line)
    assert s_words == [0, 0] + list(range(1, len(s_tok) - 1))
    assert t_words == [0, 0] + list(range(1, len(t_tok) - 1))
    for layer in range(attn.size(0)):
        a = attn[layer].mean(0)
        for method, shift in (("naive", 0), ("shift", 1)):
            want = set()
            for j in range(max(t_words) + 1):
                rows = [k + shift for k in range(len(t_tok)) if t_words[k] == j]
                best, best_v = None, None
                for i in range(max(s_words) + 1):
                    cols = [c for c in range(len(s_tok)) if s_words[c] == i]
                    v = sum(float(a[r, c]) for r in rows for c in cols) / (len(rows) * len(cols))
                    if best_v is None or v > best_v:
                        best, best_v = i, v
                want.add((best, j))
            m = word_matrix(a, s_words, t_words, method)
            assert word_links(m) == want
            torch.testing.assert_close(m[0, 0].item(), sum(float(a[r + shift, c]) for r in (0, 1) for c in (0, 1)) / 4)


def test_word_of_tokens_with_bpe_escapes_and_unknowns():
    pieces = ["Jes@@", "us", "&apos;", "s", "<unk>", "dog", "."]
    assert word_of_tokens(pieces, "Jesus's ĉat dog.") == [0, 0, 0, 0, 1, 2, 2]


# -- eflomal ---------------------------------------------------------------------------------

def test_eflomal_finds_a_known_alignment_on_a_small_corpus():
    pytest.importorskip("eflomal")
    import random

    from fairseq_attn_plugins.alignment.statistical import eflomal_alignments

    rng = random.Random(0)
    vocab = [f"w{k}" for k in range(40)]
    src, tgt, gold = [], [], []
    for _ in range(400):  # target: each word translated, adjacent pairs swapped
        words = rng.sample(vocab, rng.randint(3, 8))
        order = list(range(len(words)))
        for k in range(0, len(order) - 1, 2):
            order[k], order[k + 1] = order[k + 1], order[k]
        src.append(" ".join(words))
        tgt.append(" ".join("T" + words[i][1:] + "," for i in order))  # punctuation stripped for the aligner
        gold.append({(i, j) for j, i in enumerate(order)})
    out = eflomal_alignments(src[:300], tgt[:300], src[300:], tgt[300:])
    gdfa = out["grow-diag-final-and"]
    assert gdfa == [A.grow_diag_final_and(f, r) for f, r in zip(out["forward"], out["reverse"])]
    assert A.aer_scores(gdfa, gold[300:])["aer"] < 10.0


# -- the command -----------------------------------------------------------------------------

def _toy_folder(tmp_path, n_gold_lines=None, bad_index=False):
    """The toy data folder with raw/ lines whose first two tokens are one word, and a gold folder."""
    from fairseq.data import Dictionary, data_utils
    data = tmp_path / "data"
    data.mkdir()
    src_bin = data_dir()
    for name in os.listdir(src_bin):
        os.symlink(os.path.join(src_bin, name), data / name)
    (data / "raw").mkdir()
    gold_dir = tmp_path / "gold"
    gold_dir.mkdir()
    for subset in ("valid", "test"):
        lines = {}
        for lang in ("src", "tgt"):
            d = Dictionary.load(os.path.join(src_bin, f"dict.{lang}.txt"))
            ds = data_utils.load_indexed_dataset(os.path.join(src_bin, f"{subset}.src-tgt.{lang}"), d)
            toks = [d.string(ds[i][:-1]).split() for i in range(len(ds))]
            lines[lang] = [(t[0] + t[1] + " " + " ".join(t[2:])).strip() for t in toks]
            (data / "raw" / f"{subset}.{lang}").write_text("\n".join(lines[lang]) + "\n")
        gold = [" ".join(f"{i}-{i}" for i in range(min(len(s.split()), len(t.split()))))
                for s, t in zip(lines["src"], lines["tgt"])]
        if bad_index and subset == "valid":
            gold[2] = "0-0 99-0"
        gold = gold[:n_gold_lines] if n_gold_lines else gold
        (gold_dir / f"{subset}.align").write_text("\n".join(gold) + "\n")
    return data, gold_dir


@pytest.mark.e2e
def test_cli_scores_match_aer_by_hand(tmp_path, capsys):
    data, gold_dir = _toy_folder(tmp_path)
    out = tmp_path / "out"
    assert align_cli.main(["--checkpoint", trained("relpos"), "--data", str(data), "--gold", str(gold_dir),
                           "--out", str(out), "--per-head"]) == 0
    res = json.loads((out / "aer.json").read_text())
    src = (data / "raw" / "test.src").read_text().splitlines()
    tgt = (data / "raw" / "test.tgt").read_text().splitlines()
    gold = A.read_pharaoh(str(gold_dir / "test.align"), src, tgt)
    for name in ("naive.0", "shift.1", "shift.1h2"):
        pred = A.read_pharaoh(str(out / "test" / f"alignments.{name}.txt"), src, tgt)
        aer, p, r = hand_aer(pred, gold)
        s = res["scores"]["test"][name]
        torch.testing.assert_close((s["aer"], s["precision"], s["recall"]), (aer, p, r))
        assert all(len({j for _, j in links}) == len(t.split()) for links, t in zip(pred, tgt))  # every target word
    ch = res["chosen"]["attention"]
    valid = res["scores"]["valid"]
    assert valid[ch["name"]]["aer"] == min(v["aer"] for k, v in valid.items()
                                           if k.split(".")[0] in ("naive", "shift") and "h" not in k)
    diag = [{(min(len(a.split()) - 1, round(j * len(a.split()) / len(b.split()))), j) for j in range(len(b.split()))}
            for a, b in zip(src, tgt)]
    torch.testing.assert_close(res["scores"]["test"]["diagonal"]["aer"], hand_aer(diag, gold)[0])
    assert ch["test"] == res["scores"]["test"][ch["name"]]
    assert not os.path.exists(str(out) + ".tmp")
    # an existing OUT is kept without --yes
    assert "exists" in str(_refusal(["--checkpoint", trained("relpos"), "--data", str(data),
                                     "--gold", str(gold_dir), "--out", str(out)]))


def _refusal(argv):
    with pytest.raises(SystemExit) as e:
        align_cli.main(argv)
    msg = str(e.value.code)
    assert "\n" not in msg and msg.startswith("fairseq-attn-align: ")
    return msg


def test_bad_inputs_are_refused_in_one_line(tmp_path):
    data, gold_dir = _toy_folder(tmp_path, n_gold_lines=5)
    ck = trained("stock", UPDATES["stock"])
    base = ["--checkpoint", ck, "--data", str(data)]
    out = tmp_path / "out"
    msg = _refusal(base + ["--gold", "bible", "--out", str(out)])
    assert "is not the bible corpus (no prepare.json, not grc-en data" in msg
    msg = _refusal(base + ["--gold", str(gold_dir), "--out", str(out)])
    assert "valid.align: 5 lines but the sentences are 20" in msg
    (tmp_path / "b").mkdir()
    data2, gold2 = _toy_folder(tmp_path / "b", bad_index=True)
    msg = _refusal(["--checkpoint", ck, "--data", str(data2), "--gold", str(gold2), "--out", str(out)])
    assert "valid.align line 3: link 99-0 is outside the sentence pair" in msg
    msg = _refusal(["--checkpoint", ck, "--data", str(data2), "--gold", str(gold2), "--subsets", "test",
                    "--layers", "0,7", "--out", str(out)])
    assert "--layers 0,7: the model has 2 decoder layers (0-1)" in msg
    assert not out.exists() and not os.path.exists(str(out) + ".tmp")
    err = io.StringIO()  # an unknown argument is a usage error: exit 2, one line
    with pytest.raises(SystemExit) as e, contextlib.redirect_stderr(err):
        align_cli.main(base + ["--bogus"])
    assert e.value.code == 2 and err.getvalue() == "fairseq-attn-align: error: unknown argument --bogus\n", err.getvalue()


def test_a_model_without_cross_attention_is_refused(tmp_path):
    from fairseq import checkpoint_utils
    from omegaconf import OmegaConf
    state = checkpoint_utils.load_checkpoint_to_cpu(trained("stock", UPDATES["stock"]))
    state["cfg"]["model"].no_cross_attention = True
    state["cfg"] = OmegaConf.to_container(state["cfg"], resolve=True, enum_to_str=True)  # saved as fairseq saves it
    state["model"] = {k: v for k, v in state["model"].items() if ".encoder_attn" not in k}
    ck = tmp_path / "nocross.pt"
    torch.save(state, ck)
    data, gold_dir = _toy_folder(tmp_path)
    msg = _refusal(["--checkpoint", str(ck), "--data", str(data), "--gold", str(gold_dir), "--out", str(tmp_path / "o")])
    assert "no cross-attention to read" in msg and "--no-cross-attention" in msg
    assert not (tmp_path / "o").exists()


def test_bible_corpus_step_writes_gold_that_fits_its_lines():
    corpus = pathlib.Path(bible_corpus())
    for subset in ("valid", "test"):
        src = (corpus / f"{subset}.grc").read_text().splitlines()
        tgt = (corpus / f"{subset}.en").read_text().splitlines()
        gold = A.read_pharaoh(str(corpus / f"{subset}.align"), src, tgt)  # line count and indices fit
        assert sum(1 for g in gold if g) > 0.95 * len(gold)
    assert not (corpus / "train.align").exists()
    # the numbers the alignment docs (how-to and report) give of the gold are those of the gold the step writes
    import re

    verses = {s: len((corpus / f"{s}.ids").read_text().splitlines()) for s in ("valid", "test")}
    links = {s: sum(len(line.split()) for line in (corpus / f"{s}.align").read_text().splitlines())
             for s in ("valid", "test")}
    chapters = len({v[:5] for v in (corpus / "test.ids").read_text().splitlines()})
    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
    doc = "\n".join(open(os.path.join(docs, *name), encoding="utf-8").read()
                    for name in (("howto", "alignment.md"), ("results", "alignment_study.md")))
    said = [int(n.replace(",", "")) for n in re.findall(r"(\d[\d,]*)\s+(?:gold\s+)?links", doc)]
    assert said and set(said) <= set(links.values()), (said, links)
    flat = " ".join(doc.split())
    assert f"the gold has {links['test']:,} links for {verses['test']:,} verses" in flat
    assert (f"Test set: {verses['test']:,} verses of {chapters} whole chapters, {links['test']:,} gold links; "
            f"valid: {verses['valid']:,} verses, {links['valid']:,} links") in flat


def test_a_run_is_aligned_with_the_checkpoint_its_test_evaluation_translated_with(tmp_path):
    run = tmp_path / "run"
    (run / "test").mkdir(parents=True)
    avg = run / "averaged_last2.pt"
    avg.write_bytes(b"x")
    (run / "test" / "scores.json").write_text(json.dumps({"checkpoint": str(avg)}))
    rec = {"evaluations": {"test": {"dir": "test", "averaged": [{"file": "checkpoint_1_10.pt"},
                                                                 {"file": "checkpoint_2_20.pt"}]}}}
    (run / "averaged_last2.pt.sources").write_text(f"{run}/checkpoint_2_20.pt\n{run}/checkpoint_1_10.pt\n")
    assert evaluation.evaluated_checkpoint(str(run), rec) == str(avg)
    (run / "averaged_last2.pt.sources").write_text(f"{run}/checkpoint_2_20.pt\n{run}/checkpoint_3_30.pt\n")
    with pytest.raises(evaluation.AlignInputError, match="now averages other checkpoints"):
        evaluation.evaluated_checkpoint(str(run), rec)
    with pytest.raises(evaluation.AlignInputError, match="no test evaluation"):
        evaluation.evaluated_checkpoint(str(run), {"evaluations": {}})
