"""Recipes whose numbers can be published, on tiny local corpora; downloads are
stubbed by local archives served through file:// addresses (curl reads them like http)."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

import fairseq_attn_plugins  # noqa: F401  allowlists fairseq's checkpoint classes for torch.load

sys.path.insert(0, os.path.dirname(__file__))
import recipe_data  # noqa: E402
from test_recipes import RECIPES, prepared_ende, read, run, steps, steps_in_process, trained_ende  # noqa: E402

LIB = os.path.join(RECIPES, "lib", "common.sh")


def bash_lib(script, work, env=None):
    """Run ``script`` after sourcing the recipes' shell library."""
    full = dict(os.environ, PYTHON=sys.executable, WORK=str(work), RECIPE_DIR=str(work), **(env or {}))
    return subprocess.run(["bash", "-c", f'. "{LIB}"\n{script}'], env=full, capture_output=True, text=True)


# ------------------------------------------------------------------ item 2: errors are not swallowed
def test_a_failing_command_inside_a_stage_stops_it_and_nothing_is_marked_done(tmp_path):
    body = 'f() { false; echo ran-on > "$WORK/after"; }\nstage s --set a=1 -- f\necho not-reached'
    p = bash_lib(body, tmp_path)
    assert p.returncode == 1 and "step 's' failed" in p.stderr and "not-reached" not in p.stdout
    # set -e was in force inside the function: the command after `false` never ran
    assert not (tmp_path / "after").exists() and not (tmp_path / ".done" / "s").exists()

    ok = 'g() { echo made > "$WORK/out"; }\nstage g --set a=$A --in "$WORK/in" -- g'
    (tmp_path / "in").write_text("x\n")
    p = bash_lib(ok, tmp_path, {"A": "1"})
    assert p.returncode == 0 and (tmp_path / ".done" / "g").exists(), p.stderr
    p = bash_lib(ok, tmp_path, {"A": "1"})
    assert "g: done before, skipped" in p.stderr
    # another setting, then another input: redone, saying why
    p = bash_lib(ok, tmp_path, {"A": "2"})
    assert p.returncode == 0 and "g: redone" in p.stderr and "a: '1' -> '2'" in p.stderr
    (tmp_path / "in").write_text("y\n")
    p = bash_lib(ok, tmp_path, {"A": "2"})
    assert "g: redone" in p.stderr and "input changed: $WORK/in" in p.stderr  # a file in WORK: relative to it


# ------------------------------------------------------------------ the CJK recipes end to end (ja-en on ASPEC, zh-en on its parts)
def check_cjk_prepared(work, src, tgt):
    """The source side of a CJK recipe's prepared WORK: the word segmenter split the unsegmented
    text into several words, and the vocabularies are separate. Returns the tokenised source."""
    tok = read(os.path.join(work, "tok", f"train.{src}"))
    raw = read(os.path.join(work, "raw", f"train.{src}"))
    assert all(" " not in r for r in raw) and all(len(t.split()) >= 3 for t in tok)
    assert [t.replace(" ", "") for t in tok] == raw
    assert read(os.path.join(work, "data-bin", f"dict.{src}.txt")) != read(os.path.join(work, "data-bin", f"dict.{tgt}.txt"))
    return tok


def check_cjk_cap(recipe, env, tok):
    """TRAIN_MAX_LEN counts the words of the tokenised source (raw Chinese has no spaces)."""
    work = env["WORK"]
    lengths = sorted(len(t.split()) for t in tok)
    cap = lengths[len(lengths) // 2] - 1
    full = os.path.realpath(os.path.join(work, "data-bin"))
    run(recipe, "prepare.sh", dict(env, TRAIN_MAX_LEN=str(cap)))
    assert os.path.realpath(os.path.join(work, "data-bin")) != full
    rec = json.load(open(os.path.join(work, "data-bin", "prepare.json")))["train_pairs"]["cap"]
    dropped = sum(1 for t in tok if len(t.split()) > cap)
    assert rec["words_of"] == "tokenised" and (rec["dropped"], rec["kept"]) == (dropped, len(tok) - dropped) and dropped


def _aspec(root, n_train=60, bad_line=None):
    """An ASPEC-JE folder (fields ' ||| ', the last two Japanese and English)."""
    for name, n, seed in (("train/train-1.txt", n_train, 1), ("train/train-2.txt", n_train, 2),
                          ("dev/dev.txt", 8, 3), ("test/test.txt", 8, 4)):
        ja, en = recipe_data.parallel_lines("ja", "en", n, seed)
        lines = [f"0.9 ||| id-{i} ||| {j} ||| {e}" for i, (j, e) in enumerate(zip(ja, en))]
        if bad_line is not None and name == "train/train-2.txt":
            lines[bad_line] = "a line without the separator"
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)


@pytest.mark.e2e
def test_failed_aspec_extraction_marks_nothing_done_and_a_rerun_recovers(tmp_path):
    """A bad ASPEC line stops the raw step with nothing marked done; fixed, the re-run prepares, and
    the ja-en recipe trains and evaluates on it (the recipe's one end-to-end run)."""
    aspec, work = tmp_path / "ASPEC-JE", tmp_path / "work"
    _aspec(str(aspec), bad_line=5)
    env = {"WORK": str(work), "ASPEC_DIR": str(aspec), "BPE_MERGES": "40"}
    p = run("wat17_ja_en", "prepare.sh", env, check=False)
    assert p.returncode == 1 and "train-2.txt:6" in p.stderr and "step 'raw' failed" in p.stderr
    assert not (work / ".done" / "raw").exists() and not (work / ".done" / "tok.ja").exists()
    assert not (work / "raw" / "train.ja").exists() and not (work / "raw" / "valid.ja").exists()
    _aspec(str(aspec))  # fixed: the fingerprint of the ASPEC files changed, raw is made again
    p = run("wat17_ja_en", "prepare.sh", env)
    assert len(read(work / "raw" / "train.ja")) == 120 == len(read(work / "raw" / "train.en"))
    rec = json.load(open(work / "data-bin" / "prepare.json"))
    assert rec["train_pairs"]["raw"] == 120 and rec["train_pairs"]["parts"] == {"aspec-train-1+2": 120}
    # the ja-en recipe on it, end to end: the segmented source, separate vocabularies, trained and evaluated
    check_cjk_prepared(str(work), "ja", "en")
    run("wat17_ja_en", "train.sh", dict(env, MAX_UPDATE="2"))
    run("wat17_ja_en", "evaluate.sh", dict(env, N_AVG="1"))
    scores = json.load(open(work / "runs" / "transformer_attn_wmt_en_de" / "test" / "scores.json"))
    assert "bleu" in scores["scores"] and scores["lenpen"] == 1.0


# ------------------------------------------------------------------ downloads stubbed by local archives
def _wmt14_mirror(root, n=(40, 30, 20), truncate=False, misalign=False):
    """statmt.org's three WMT14 En-De archives, tiny."""
    specs = [("wmt13/training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en"),
             ("wmt13/training-parallel-commoncrawl.tgz", "commoncrawl.de-en"),
             ("wmt14/training-parallel-nc-v9.tgz", "training/news-commentary-v9.de-en")]
    for i, ((archive, prefix), k) in enumerate(zip(specs, n)):
        en, de = recipe_data.parallel_lines("en", "de", k, seed=10 + i)
        if misalign and i == 1:
            de = de[: k // 4]
        path = recipe_data.write_archive(os.path.join(root, archive), {f"{prefix}.en": en, f"{prefix}.de": de})
        if truncate and i == 1:
            blob = open(path, "rb").read()
            open(path, "wb").write(blob[: len(blob) // 2])
    return "file://" + str(root)


def _local_devtest(d, src, tgt):
    env = recipe_data.write_pair(str(d), src, tgt, sizes=(("valid", 8), ("test", 8)))
    return {k: v for k, v in env.items() if not k.startswith("TRAIN")}


@pytest.mark.e2e
def test_downloaded_corpora_are_checked_truncated_or_misaligned_archives_stop_raw(tmp_path):
    env = _local_devtest(tmp_path / "devtest", "en", "de")
    work = tmp_path / "work"
    env.update(WORK=str(work), STATMT_URL=_wmt14_mirror(tmp_path / "bad", truncate=True))
    p = run("wmt14_en_de", "prepare.sh", env, check=False)
    assert p.returncode == 1 and "training-parallel-commoncrawl.tgz" in p.stderr and "cannot unpack" in p.stderr
    assert not (work / ".done" / "raw").exists() and not (work / "raw" / "train.en").exists()
    assert not (work / "downloads" / "training-parallel-commoncrawl.tgz").exists()  # moved aside: fetched again
    kept = work / "downloads" / "training-parallel-commoncrawl.tgz.bad"  # never deleted: it may be the user's
    assert kept.read_bytes() == (tmp_path / "bad" / "wmt13" / "training-parallel-commoncrawl.tgz").read_bytes()

    shutil.rmtree(work)
    env["STATMT_URL"] = _wmt14_mirror(tmp_path / "misaligned", misalign=True)
    p = run("wmt14_en_de", "prepare.sh", env, check=False)
    assert p.returncode == 1 and "commoncrawl.de-en.en has 30 lines but" in p.stderr and "has 7" in p.stderr
    assert not (work / ".done" / "raw").exists() and not (work / "raw" / "train.en").exists()
    assert not (work / "tok").exists() or os.listdir(work / "tok") == []

    shutil.rmtree(work)
    env["STATMT_URL"] = _wmt14_mirror(tmp_path / "good")
    run("wmt14_en_de", "prepare.sh", env)
    assert len(read(work / "raw" / "train.en")) == 90 == len(read(work / "raw" / "train.de"))
    parts = json.load(open(work / "data-bin" / "prepare.json"))["train_pairs"]["parts"]
    assert parts == {"europarl-v7": 40, "commoncrawl": 30, "news-commentary-v9": 20}


ZHEN_PARTS = ["nc12", "un", "casia2015", "casict2011", "casict2015", "datum2015", "datum2017", "neu2017"]


def _zhen_mirror(root):
    """News Commentary v12 (statmt layout), UN v1.0 and the six CWMT corpora (the layout of the
    mirrors tensorflow_datasets / Hugging Face `wmt17` zh-en download), tiny; returns pairs per part."""
    counts = {}
    for i, part in enumerate(ZHEN_PARTS):
        k = 6 + i
        zh, en = recipe_data.parallel_lines("zh", "en", k, seed=30 + i)
        if part == "nc12":
            path, members = "statmt/wmt17/translation-task/training-parallel-nc-v12.tgz", {
                "training/news-commentary-v12.zh-en.zh": zh, "training/news-commentary-v12.zh-en.en": en}
        elif part == "un":
            path, members = "hf/uncorpus/resolve/main-zip/UNv1.0.en-zh.zip", {
                "en-zh/UNv1.0.en-zh.zh": zh, "en-zh/UNv1.0.en-zh.en": en}
        elif part == "datum2017":  # several files, paired by sorted name (Book1_cn / Book1_en ...)
            h = k // 2
            path, members = f"hf/wmt18/resolve/main/cwmt-wmt/{part}.zip", {
                f"{part}/Book1_cn.txt": zh[:h], f"{part}/Book1_en.txt": en[:h],
                f"{part}/Book2_cn.txt": zh[h:], f"{part}/Book2_en.txt": en[h:]}
        else:
            path, members = f"hf/wmt18/resolve/main/cwmt-wmt/{part}.zip", {
                f"{part}/{part}_ch.txt": zh, f"{part}/{part}_en.txt": en}
        recipe_data.write_archive(os.path.join(root, path), members)
        counts[part] = k
    return {"STATMT_DATA_URL": f"file://{root}/statmt", "HF_WMT_URL": f"file://{root}/hf"}, counts


def test_zhen_refuses_partial_data_before_any_download(tmp_path):
    env = _local_devtest(tmp_path / "devtest", "zh", "en")
    env.update(WORK=str(tmp_path / "work"), STATMT_DATA_URL="file:///nonexistent", HF_WMT_URL="file:///nonexistent")
    for extra, part, why in (({"ZHEN_PARTS": "nc12"}, "un", "left out by ZHEN_PARTS"),
                             ({"URL_casia2015": ""}, "casia2015", "needs a licence")):
        p = run("wmt17_zh_en", "prepare.sh", dict(env, **extra), check=False)
        assert p.returncode == 1, p.stderr
        assert "incomplete" in p.stderr and f"{part} ({why}" in p.stderr and "ALLOW_PARTIAL_DATA=1" in p.stderr
        assert not (tmp_path / "work" / "downloads").exists()  # refused before downloading anything


@pytest.mark.e2e
def test_zhen_all_public_parts_pair_count_and_paper_settings_reach_scores_and_table(tmp_path):
    mirror, counts = _zhen_mirror(tmp_path / "mirror")
    env = _local_devtest(tmp_path / "devtest", "zh", "en")
    env.update(mirror, WORK=str(tmp_path / "work"), BPE_MERGES="40", MAX_UPDATE="3")
    run("wmt17_zh_en", "prepare.sh", env)
    work = tmp_path / "work"
    rec = json.load(open(work / "data-bin" / "prepare.json"))["train_pairs"]
    assert rec["parts"] == counts and rec["raw"] == sum(counts.values()) and not rec["partial"]
    zh_tok = check_cjk_prepared(str(work), "zh", "en")  # the segmented source, separate vocabularies
    run("wmt17_zh_en", "train.sh", env)
    run("wmt17_zh_en", "evaluate.sh", dict(env, N_AVG="1"))
    save = work / "runs" / "transformer_attn_wmt_en_de"
    scores = json.load(open(save / "test" / "scores.json"))
    assert "bleu" in scores["scores"] and scores["lenpen"] == 1.0
    # the training-pair count, and the settings as read from the averaged checkpoint itself
    assert scores["train_pairs"] == len(read(work / "bpe" / "train.clean.zh"))
    assert scores["train_pairs_by_part"] == counts and scores["train_data_partial"] is False
    assert scores["adam_eps"] == 1e-9 and scores["share_decoder_input_output_embed"] is True
    assert scores["share_all_embeddings"] is False and scores["n_avg"] == 1
    tok = scores["scores"]["tokenized_bleu"]
    assert tok["method"].startswith("moses tokenizer.perl (no -a)")
    assert 0 <= tok["score"] <= 100 and scores["scores"]["bleu"]["signature"].startswith("nrefs:1|")
    # the decoder's input and output embeddings are one tensor in the checkpoint
    model = torch.load(save / "checkpoint_last.pt")["model"]
    assert "decoder.output_projection.weight" not in model or torch.equal(
        model["decoder.output_projection.weight"], model["decoder.embed_tokens.weight"])

    # a part given up (licence only) without ALLOW_PARTIAL_DATA: refused; with it: recorded as partial
    env2 = dict(env, WORK=str(tmp_path / "work2"), URL_un="")
    p = run("wmt17_zh_en", "prepare.sh", env2, check=False)
    assert p.returncode == 1 and "un (needs a licence" in p.stderr
    run("wmt17_zh_en", "prepare.sh", dict(env2, ALLOW_PARTIAL_DATA="1"))
    rec2 = json.load(open(tmp_path / "work2" / "data-bin" / "prepare.json"))["train_pairs"]
    assert rec2["partial"] and "un" not in rec2["parts"] and rec2["raw"] == sum(counts.values()) - counts["un"]

    # the results table shows the tokenised BLEU and the training pairs next to sacreBLEU
    from fairseq_attn_reports import results
    other = tmp_path / "other"
    shutil.copytree(save, other)
    # a copy of a run is the same run: refused (its record says so), as the same folder twice is
    with pytest.raises(ValueError, match="one is a copy of the other"):
        results.collect([("a", str(save)), ("b", str(other))], str(work / "raw" / "test.en"))
    with pytest.raises(ValueError, match="are the same run"):
        results.collect([("a", str(save)), ("b", str(save) + "/./")], str(work / "raw" / "test.en"))
    rec = json.loads((other / "run.json").read_text())
    (other / "run.json").write_text(json.dumps(dict(rec, run_id="another-run")))
    table = results.collect([("a", str(save)), ("b", str(other))], str(work / "raw" / "test.en"),
                            bs_samples=10, ar_trials=10)
    md = results.format_markdown(table)
    assert "Tok. BLEU" in md and "Train pairs" in md
    assert f"| {scores['scores']['tokenized_bleu']['score']:.2f} | {scores['train_pairs']:,d} |" in md.splitlines()[2]
    check_cjk_cap("wmt17_zh_en", env, zh_tok)  # TRAIN_MAX_LEN on the tokenised source


# ------------------------------------------------------------------ item 6: the script of each side
def test_script_check_refuses_swapped_sides_before_long_work(tmp_path):
    ja, en = recipe_data.parallel_lines("ja", "en", 30)
    zh, _ = recipe_data.parallel_lines("zh", "en", 30)
    for name, lines in (("ja", ja), ("en", en), ("zh", zh)):
        (tmp_path / f"s.{name}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert steps("check-script", "ja", str(tmp_path / "s.ja"), "en", str(tmp_path / "s.en")).returncode == 0
    assert steps("check-script", "zh", str(tmp_path / "s.zh")).returncode == 0
    p = steps("check-script", "ja", str(tmp_path / "s.en"), "en", str(tmp_path / "s.ja"))
    assert p.returncode == 1 and "does not look like ja" in p.stderr and "swapped" in p.stderr
    p = steps("check-script", "zh", str(tmp_path / "s.ja"))  # Japanese is not Chinese (kana)
    assert p.returncode == 1 and "does not look like zh" in p.stderr

    # a swapped local ja/en corpus: refused at the start, nothing made
    env = recipe_data.write_pair(str(tmp_path / "data"), "ja", "en")
    env["TRAIN_SRC"], env["TRAIN_TGT"] = env["TRAIN_TGT"], env["TRAIN_SRC"]
    env["WORK"] = str(tmp_path / "work")
    p = run("wat17_ja_en", "prepare.sh", env, check=False)
    assert p.returncode == 1 and "TRAIN_SRC/TRAIN_TGT" in p.stderr and "does not look like ja" in p.stderr
    assert os.listdir(tmp_path / "work" / "raw") == [] and not (tmp_path / "work" / ".done" / "raw").exists()
    # a swapped en:zh extra pair for Zh-En: refused before any download
    env = _local_devtest(tmp_path / "devtest", "zh", "en")
    env.update(WORK=str(tmp_path / "work2"), EXTRA_TRAIN_PAIRS=f"{tmp_path / 's.en'}:{tmp_path / 's.zh'}",
               HF_WMT_URL="file:///nonexistent", STATMT_DATA_URL="file:///nonexistent")
    p = run("wmt17_zh_en", "prepare.sh", env, check=False)
    assert p.returncode == 1 and "EXTRA_TRAIN_PAIRS" in p.stderr and "does not look like zh" in p.stderr
    assert not (tmp_path / "work2" / "downloads").exists()


# ------------------------------------------------------------------ item 5: checkpoint averaging
def _checkpoint(path, params, num_updates):
    torch.save({"model": params, "cfg": None, "args": None, "extra_state": {"epoch": 1},
                "optimizer_history": [{"criterion_name": "x", "optimizer_name": "adam",
                                       "lr_scheduler_state": {"best": 1.0}, "num_updates": num_updates}],
                "last_optimizer_state": {}}, path)


def test_averaging_is_fairseqs_fp32_newest_first_and_refuses_too_few(tmp_path):
    g = torch.Generator().manual_seed(0)
    ckpts = {}
    for update in (2, 4, 6, 8):
        params = {"w": torch.randn(3, 4, generator=g).half(), "b": torch.randn(4, generator=g),
                  "n": torch.tensor([update + 1])}
        _checkpoint(tmp_path / f"checkpoint_1_{update}.pt", params, update)
        ckpts[update] = params
    _checkpoint(tmp_path / "checkpoint_last.pt", ckpts[8], 8)
    out = tmp_path / "avg.pt"
    p = steps_in_process("average", str(tmp_path), "--n", "3", "--output", str(out), "--record", str(tmp_path / "avg.json"))
    assert p.returncode == 0, p.stderr
    avg = torch.load(out)["model"]
    # fairseq's average_checkpoints.py: newest first, fp16 summed in fp32, result kept in fp32
    chosen = [ckpts[8], ckpts[6], ckpts[4]]
    for k in ("w", "b"):
        ref = torch.zeros_like(chosen[0][k], dtype=torch.float32)
        for c in chosen:
            flat_ref, flat = ref.view(-1), c[k].float().view(-1)
            for i in range(flat.numel()):
                flat_ref[i] = flat_ref[i] + flat[i]
        ref = ref / 3
        assert avg[k].dtype == torch.float32
        torch.testing.assert_close(avg[k], ref, rtol=0, atol=0)
    assert avg["n"].tolist() == [(9 + 7 + 5) // 3]  # integers: floor division
    rec = json.load(open(tmp_path / "avg.json"))
    assert rec["averaged_checkpoints"] == ["checkpoint_1_8.pt", "checkpoint_1_6.pt", "checkpoint_1_4.pt"]
    assert rec["num_updates"] == 8  # the other entries come from the newest checkpoint
    # fewer checkpoints than asked: refused, nothing written
    p = steps_in_process("average", str(tmp_path), "--n", "5", "--output", str(tmp_path / "avg5.pt"))
    assert p.returncode == 1 and "4 saved checkpoints (updates 2, 4, 6, 8) but N_AVG=5" in p.stderr
    assert not (tmp_path / "avg5.pt").exists()


class _Payload:  # a pickled object that is not one of fairseq's checkpoint classes
    pass


def test_averaging_loads_through_the_safe_loader(tmp_path):
    for update in (1, 2):
        _checkpoint(tmp_path / f"checkpoint_1_{update}.pt", {"w": torch.ones(2)}, update)
    torch.save({"model": {"w": torch.ones(2)}, "evil": _Payload()}, tmp_path / "checkpoint_1_3.pt")
    p = steps_in_process("average", str(tmp_path), "--n", "2", "--output", str(tmp_path / "avg.pt"))
    # the package's message, naming the file and the refused class (not torch's hint)
    assert p.returncode == 1 and "checkpoint_1_3.pt" in p.stderr and "_Payload" in p.stderr
    assert "weights_only=False" not in p.stderr.replace("do not disable weights_only", "")
    assert not (tmp_path / "avg.pt").exists()


# ------------------------------------------------------------------ item 1: no stale reuse
@pytest.mark.e2e
@pytest.mark.xdist_group("ende_trained_run")  # starts from trained_ende (test_copies, test_evaluation_reuse...)
def test_changed_inputs_or_settings_redo_steps_and_train_evaluate_refuse_other_data(tmp_path):
    # recipe_data's en-de pair, prepared once per test run (BPE_MERGES=60), with its run trained to
    # update 4 (train.sh's default SAVE_DIR): a copy of that WORK
    env = dict(trained_ende(tmp_path / "work"), MAX_UPDATE="4")
    work = tmp_path / "work"
    dict_60 = read(work / "data-bin" / "dict.en.txt")
    # leftovers of a killed run are never used
    (work / "raw" / "train.en.tmp").write_text("garbage\n")
    (work / "tok" / "train.en.tmp").write_text("garbage\n")
    os.makedirs(work / "data" / "binarise.tmp")
    p = run("wmt14_en_de", "prepare.sh", env)
    assert "binarise: done before, skipped" in p.stderr
    assert not (work / "raw" / "train.en.tmp").exists() and not (work / "data" / "binarise.tmp").exists()

    assert (work / "runs" / "transformer_attn_wmt_en_de" / "run.json").exists()  # trained_ende's run, on this data-bin
    # train/evaluate with settings the data-bin was not prepared with: refused, naming the setting
    for script in ("train.sh", "evaluate.sh"):
        p = run("wmt14_en_de", script, dict(env, BPE_MERGES="50"), check=False)
        assert p.returncode == 1 and "prepared with other settings" in p.stderr
        assert "BPE_MERGES='60' there, BPE_MERGES='50' here" in p.stderr

    # another BPE_MERGES: tokenisation reused, BPE and everything after it redone
    env50 = dict(env, BPE_MERGES="50")
    p = run("wmt14_en_de", "prepare.sh", env50)
    assert "tok.en: done before, skipped" in p.stderr and "bpe.learn: redone" in p.stderr
    # binarised for these settings (its own folder; the data of merges 60 keeps its entry)
    assert "merges: '60' -> '50'" in p.stderr and "binarise: done before" not in p.stderr
    assert read(work / "data-bin" / "dict.en.txt") != dict_60
    # the run trained on the old data-bin: train.sh refuses to continue it on the new one;
    # evaluate.sh takes the run's own data (kept in WORK/data) and refuses the settings asked for
    p = run("wmt14_en_de", "train.sh", env50, check=False)
    assert p.returncode == 1 and "holds a run trained on" in p.stderr and "to continue it, give DATA=" in p.stderr, p.stderr
    p = run("wmt14_en_de", "evaluate.sh", env50, check=False)
    assert p.returncode == 1 and "BPE_MERGES='60' there, BPE_MERGES='50' here" in p.stderr, p.stderr

    # another training corpus: raw and everything after it redone
    other = recipe_data.write_pair(str(tmp_path / "data2"), "en", "de", seed=7)
    p = run("wmt14_en_de", "prepare.sh", dict(env50, TRAIN_SRC=other["TRAIN_SRC"], TRAIN_TGT=other["TRAIN_TGT"]))
    assert "raw: redone" in p.stderr and "input changed" in p.stderr and "tok.en: redone" in p.stderr
    assert read(work / "raw" / "train.en") == read(other["TRAIN_SRC"])

    # a data-bin changed by hand after prepare: refused
    with open(work / "data-bin" / "dict.de.txt", "a", encoding="utf-8") as f:
        f.write("extra 1\n")
    p = run("wmt14_en_de", "train.sh", dict(env50, SAVE_DIR=str(tmp_path / "fresh")), check=False)
    assert p.returncode == 1 and "changed after prepare.sh wrote it (dict.de.txt)" in p.stderr


@pytest.mark.e2e
def test_big_averages_twenty_checkpoints_and_refuses_fewer(tmp_path):
    env = dict(prepared_ende(tmp_path / "work"), MAX_UPDATE="6")  # recipe_data's en-de pair, prepared
    big = dict(env, ARCH="transformer_attn_vaswani_wmt_en_de_big", N_AVG="")  # empty: the default
    run("wmt14_en_de", "train.sh", big)
    p = run("wmt14_en_de", "evaluate.sh", big, check=False)
    save = tmp_path / "work" / "runs" / "transformer_attn_vaswani_wmt_en_de_big"
    m = re.search(r"(\d+) saved checkpoints \(updates [\d, ]+\) but N_AVG=20 are to be averaged", p.stderr)
    assert p.returncode == 1 and m, p.stderr
    saved = [f for f in os.listdir(save) if re.fullmatch(r"checkpoint_\d+_\d+\.pt|checkpoint\d+\.pt", f)]
    assert int(m.group(1)) == len(saved) < 20
    assert not (save / "averaged_last20.pt").exists() and not (save / "test" / "scores.json").exists()
