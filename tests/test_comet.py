"""COMET for real, offline: a tiny checkpoint built here (tests/comet_tiny.py) scored by
our commands and by unbabel-comet's own ``comet-score`` must give the same numbers."""

import importlib.util
import json
import os
import shutil
import sys

import pytest
import torch

# found, not imported: importing comet (PyTorch Lightning, transformers, torch._dynamo: ~3 s of CPU)
# at collection would cost every pytest-xdist worker that, though one of them runs these tests
if importlib.util.find_spec("comet") is None:
    pytest.skip("the comet extra is not installed (scripts/setup_env.sh installs it)", allow_module_level=True)

from fairseq_attn_reports.cli import significance  # noqa: E402
from fairseq_attn_records import comet as comet_metric  # noqa: E402
from fairseq_attn_records.toy_corpus import make_corpus  # noqa: E402

from comet_tiny import build_tiny_comet  # noqa: E402
from test_significance import _noisy  # noqa: E402


# one worker builds the tiny COMET checkpoint for all of them (pytest-xdist --dist loadgroup)
pytestmark = pytest.mark.xdist_group("tiny_comet")


@pytest.fixture(scope="session")
def tiny_comet(tmp_path_factory):
    """The corpus files and a tiny COMET checkpoint whose tokenizer was trained on them."""
    d = tmp_path_factory.mktemp("comet")
    pairs = make_corpus(40, seed=11)
    refs = [t for _, t in pairs]
    files = {"src": [s for s, _ in pairs], "ref": refs, "base": _noisy(refs, 0.4, 1), "good": _noisy(refs, 0.1, 2)}
    paths = {}
    for name, lines in files.items():
        paths[name] = d / f"{name}.txt"
        paths[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    ckpt = build_tiny_comet(str(d / "tiny-comet"), files["src"] + refs)
    return paths, ckpt


def comet_score(argv, monkeypatch):
    """unbabel-comet's ``comet-score`` with ``argv``: the function its console script runs
    (``comet.cli.score:score_command``), in this process (a child would start torch, Lightning and
    transformers again: ~8 s of CPU). It loads its own model from the checkpoint; what it changes in
    the process is put back after it: torch's float32 matmul precision (set when its module is
    imported), the random states and environment variables ``seed_everything`` sets and the log
    levels ``--quiet`` sets."""
    import logging
    import random

    import numpy

    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(k, "1")
    monkeypatch.setattr(sys, "argv", ["comet-score", *argv])
    seed_env = {k: os.environ.get(k) for k in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS")}  # seed_everything sets them
    precision = torch.get_float32_matmul_precision()
    states = random.getstate(), numpy.random.get_state(), torch.get_rng_state()
    manager = logging.root.manager
    levels = {name: lg.level for name, lg in manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    try:
        from comet.cli.score import score_command

        score_command()
    finally:
        torch.set_float32_matmul_precision(precision)
        random.setstate(states[0])
        numpy.random.set_state(states[1])
        torch.set_rng_state(states[2])
        for k, v in seed_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for name, lg in list(manager.loggerDict.items()):
            if isinstance(lg, logging.Logger):
                lg.setLevel(levels.get(name, logging.NOTSET))


def test_scores_equal_comet_score(tiny_comet, tmp_path, monkeypatch):
    paths, ckpt = tiny_comet
    monkeypatch.setenv("COMET_MODEL", ckpt)
    monkeypatch.setenv("COMET_GPUS", "0")
    out = tmp_path / "ours.json"
    assert significance.main([str(paths["ref"]), str(paths["base"]), str(paths["good"]), "--src", str(paths["src"]),
                              "--comet-batch-size", "8", "--bs-samples", "300", "--ar-trials", "300",
                              "--json", str(out)]) == 0
    ours = json.loads(out.read_text())
    assert ours["metrics"] == ["bleu", "chrf", "comet"]
    theirs_json = tmp_path / "theirs.json"
    comet_score(["-s", str(paths["src"]), "-t", str(paths["base"]), str(paths["good"]), "-r", str(paths["ref"]),
                 "--model", ckpt, "--gpus", "0", "--batch_size", "8", "--quiet", "--only_system",
                 "--to_json", str(theirs_json)], monkeypatch)
    theirs = json.loads(theirs_json.read_text())
    for row, key in zip(ours["systems"], ("base", "good")):
        segs = [x["COMET"] for x in theirs[str(paths[key])]]
        torch.testing.assert_close(torch.tensor(row["comet_segments"], dtype=torch.float64),
                                   torch.tensor(segs, dtype=torch.float64), rtol=0, atol=0)
        mean = sum(segs) / len(segs)  # comet-score's system score
        torch.testing.assert_close(row["scores"]["comet"]["score"], mean, rtol=0, atol=1e-12)
    good = ours["systems"][1]["scores"]["comet"]
    assert 0 < good["p_bootstrap"] <= 1 and 0 < good["p_ar"] <= 1
    assert "seed:12345" in ours["signature"]["bs"]["COMET"] and ckpt in ours["signature"]["bs"]["COMET"]


def test_a_checkpoint_that_does_not_load_is_one_line(tiny_comet, tmp_path):
    _, ckpt = tiny_comet
    bad = tmp_path / "broken"
    shutil.copytree(os.path.dirname(os.path.dirname(ckpt)), bad)
    (bad / "checkpoints" / "model.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(comet_metric.CometError, match=r"COMET_MODEL=.*broken/checkpoints/model.ckpt: does not load"):
        comet_metric.load(str(bad / "checkpoints" / "model.ckpt"), gpus=0)
    # an encoder that is not available offline (here: its folder gone): named, never downloaded
    encoder = os.path.join(os.path.dirname(os.path.dirname(ckpt)), "encoder")
    os.rename(encoder, encoder + ".away")
    try:
        with pytest.raises(comet_metric.CometError, match=f"does not load .*encoder '{encoder}'.*downloads are off"):
            comet_metric.load(ckpt, gpus=0)
    finally:
        os.rename(encoder + ".away", encoder)


def test_recipe_score_step_records_chrf_and_comet(tiny_comet, tmp_path, monkeypatch, capsys):
    """evaluate.sh's score step: chrF++ (sacreBLEU, word order 2) beside BLEU, and COMET with
    its segment scores when COMET_MODEL is set; a COMET_MODEL that does not load stops the
    recipe's check-comet step with one line."""
    from sacrebleu.metrics import CHRF

    from fairseq_attn_recipes.__main__ import main as steps

    paths, ckpt = tiny_comet
    monkeypatch.setenv("COMET_MODEL", ckpt)
    monkeypatch.setenv("COMET_GPUS", "0")
    out = tmp_path / "scores.json"
    steps(["score", "--hyp", str(paths["good"]), "--ref", str(paths["ref"]), "--src", str(paths["src"]),
           "--output", str(out)])
    scores = json.loads(out.read_text())["scores"]
    refs = paths["ref"].read_text().splitlines()
    hyps = paths["good"].read_text().splitlines()
    assert scores["chrf"]["score"] == round(CHRF(word_order=2).corpus_score(hyps, [refs]).score, 2)
    assert "nw:2" in scores["chrf"]["signature"]
    segs = comet_metric.load(ckpt, gpus=0).score_systems(paths["src"].read_text().splitlines(), refs, [hyps])[0]
    assert scores["comet"]["segments"] == segs
    assert scores["comet"]["score"] == pytest.approx(sum(segs) / len(segs), abs=1e-15)
    monkeypatch.setenv("COMET_MODEL", str(tmp_path / "gone" / "model.ckpt"))
    with pytest.raises(SystemExit) as e:
        steps(["check-comet"])
    assert e.value.code == 1
    assert f"COMET_MODEL={tmp_path / 'gone' / 'model.ckpt'}: no such file" in capsys.readouterr().err


def test_comet_by_source_length(tiny_comet, tmp_path, monkeypatch):
    """--by-length with COMET: each bucket's COMET is the mean of the main table's segment
    scores of its sentences, tested with sacreBLEU's draws on that subset."""
    from fairseq_attn_records import metrics as M

    paths, ckpt = tiny_comet
    monkeypatch.setenv("COMET_MODEL", ckpt)
    monkeypatch.setenv("COMET_GPUS", "0")
    src = paths["src"].read_text(encoding="utf-8").split("\n")[:-1]
    lengths = [len(s.split()) for s in src]
    edge = sorted(lengths)[29]  # the first bucket holds >= 30 sentences: it is tested
    out = tmp_path / "ours.json"
    assert significance.main([str(paths["ref"]), str(paths["base"]), str(paths["good"]), "--src", str(paths["src"]),
                              "--comet-batch-size", "8", "--bs-samples", "200", "--ar-trials", "200",
                              "--by-length", str(edge), "--json", str(out)]) == 0
    ours = json.loads(out.read_text())
    data = ours["by_length"]
    assert data["metrics"] == ["bleu", "chrf", "comet"]
    segs = [row["comet_segments"] for row in ours["systems"]]
    for b, bucket in enumerate(data["buckets"]):
        idx = [i for i, n in enumerate(lengths) if (n <= edge) == (b == 0)]
        assert bucket["n"] == len(idx)
        if not idx:
            continue
        subset = [[seg[i] for i in idx] for seg in segs]
        expect = M.paired_mean_tests(list(zip(("base", "good"), subset)), bs_samples=200, ar_trials=200)
        for row, cell, sub in zip(bucket["systems"], expect, subset):
            torch.testing.assert_close(row["scores"]["comet"]["score"], sum(sub) / len(sub), rtol=0, atol=1e-12)
            assert (row["scores"]["comet"]["bs_mean"], row["scores"]["comet"]["bs_ci"]) == (cell["bs_mean"],
                                                                                          cell["bs_ci"])
        good = bucket["systems"][1]["scores"]["comet"]
        if bucket["tested"]:
            assert (good["p_bootstrap"], good["p_ar"]) == (expect[1]["p_bootstrap"], expect[1]["p_ar"])
        else:
            assert good["p_bootstrap"] is None and bucket["systems"][1]["marks"]["comet"] == ""
    assert data["buckets"][0]["tested"]


def test_inputs_over_comets_window_are_those_its_encoder_cuts(tiny_comet):
    """Joined inputs grow past COMET's encoder window: the count is that of the texts COMET's own
    prepare_sample truncates."""
    paths, ckpt = tiny_comet
    scorer = comet_metric.load(ckpt, gpus=0)
    refs = paths["ref"].read_text(encoding="utf-8").splitlines()
    texts = [" ".join(refs[i:i + k]) for k in (1, 4, 16) for i in range(0, len(refs) - k + 1, k)]
    encoder = scorer.model.encoder
    cut = 0
    for t in texts:
        whole = encoder.tokenizer(t)["input_ids"]
        read = encoder.prepare_sample([t])["input_ids"][0]
        cut += int(len(read) < len(whole))
    assert 0 < cut < len(texts)
    assert scorer.over_window(texts) == cut
    assert scorer.window() == max(len(encoder.prepare_sample([t])["input_ids"][0]) for t in texts)
