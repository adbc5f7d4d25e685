"""fairseq-attn-demo and fairseq-attn-results."""

import datetime
import json
import os
import shutil
import subprocess
import sys

import pytest
import sacrebleu
import torch

import fairseq_attn_plugins  # noqa: F401  registers the architectures
from fairseq.models import ARCH_MODEL_NAME_REGISTRY
from fairseq_attn_reports.cli import results
from fairseq_attn_recipes import demo
from fairseq_attn_reports.results import parse_train_log
from fairseq_attn_records.toy_corpus import make_corpus

TRAIN_LOG = """\
2026-01-01 | INFO | fairseq_cli.train | num. shared model params: 208,576 (num. trained: 208,576)
2026-01-01 | INFO | train | {"epoch": 1, "train_loss": "7.0", "train_wps": "100", "train_ups": "1.0", "train_num_updates": "10"}
2026-01-01 | INFO | valid | {"epoch": 1, "valid_loss": "6.5", "valid_num_updates": "10"}
2026-01-01 | INFO | train | {"epoch": 2, "train_loss": "9.9", "train_wps": "999", "train_ups": "9.0", "train_num_updates": "20"}
2026-01-01 | INFO | fairseq.checkpoint_utils | Loaded checkpoint checkpoint_last.pt (epoch 2 @ 10 updates)
2026-01-01 | INFO | train | {"epoch": 2, "train_loss": "5.0", "train_wps": "300", "train_ups": "3.0", "train_num_updates": "20"}
2026-01-01 | INFO | valid | {"epoch": 2, "valid_loss": "4.5", "valid_num_updates": "20"}
"""


def test_parse_train_log_resumed_run(tmp_path):
    (tmp_path / "train.log").write_text(TRAIN_LOG)
    log = parse_train_log(str(tmp_path / "train.log"))
    assert log["params"] == 208576 and log["num_updates"] == 20
    # epoch 2 was re-run after a resume: its last statistics count
    assert [e["train_loss"] for e in log["epochs"]] == [7.0, 5.0]
    assert [e["valid_loss"] for e in log["epochs"]] == [6.5, 4.5]
    assert log["train_wps"] == pytest.approx((100 + 300) / 2) and log["train_ups"] == pytest.approx(2.0)


def test_results_table(tmp_path, capsys):
    refs = [t for _, t in make_corpus(150, seed=5)]
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(refs) + "\n")
    runs = []
    for name, keep in (("base", 0.5), ("better", 0.9)):
        d = tmp_path / name
        d.mkdir()
        (d / "train.log").write_text(TRAIN_LOG)
        hyps = [r if (i * 7919 % 100) / 100 < keep else " ".join(r.split()[::-1]) for i, r in enumerate(refs)]
        (d / "hyp.txt").write_text("\n".join(hyps) + "\n")
        runs.append(str(d))
    out_json, out_md = tmp_path / "t.json", tmp_path / "t.md"
    assert results.main(["--ref", str(ref), *runs, "--json", str(out_json), "--md", str(out_md),
                         "--ar-trials", "1000"]) == 0
    table = json.loads(out_json.read_text())
    bleu = {r["system"]: r["bleu"] for r in table["rows"]}
    for name in ("base", "better"):
        hyps = (tmp_path / name / "hyp.txt").read_text().splitlines()
        assert bleu[name] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    better = table["rows"][1]
    assert better["delta"] == pytest.approx(bleu["better"] - bleu["base"]) and better["delta"] > 0
    assert better["p_bootstrap"] < 0.01 and better["p_ar"] < 0.01 and better["mark"] == "**"
    assert table["rows"][0]["delta"] is None and better["params"] == 208576
    md = out_md.read_text()
    assert "| 2 | better | ? | 208.6K |" in md and "**" in md
    # chrF++ beside BLEU: sacreBLEU's chrF with word order 2, its delta and its own mark
    for row in table["rows"]:
        hyps = (tmp_path / row["system"] / "hyp.txt").read_text().splitlines()
        chrf = sacrebleu.metrics.CHRF(word_order=2).corpus_score(hyps, [refs]).score
        assert row["scores"]["chrf"]["score"] == pytest.approx(chrf, abs=1e-9)
    assert better["marks"] == {"bleu": "**", "chrf": "**"}
    assert better["deltas"]["chrf"] == pytest.approx(better["scores"]["chrf"]["score"]
                                                     - table["rows"][0]["scores"]["chrf"]["score"])
    head = md.splitlines()[0]
    assert "| BLEU | Δ | chrF++ | Δ |" in head
    assert f"| {better['scores']['chrf']['score']:.2f}** | {better['deltas']['chrf']:+.2f} |" in md
    assert ("paired bootstrap resampling (1000 resamples) and paired approximate randomisation "
            "(1000 trials)") in md and "chrF++ signature (bs): `nrefs:1|bs:1000|seed:12345" in md
    # a run without translations: clear error, nothing written
    os.remove(tmp_path / "better" / "hyp.txt")
    os.remove(out_json)
    assert results.main(["--ref", str(ref), *runs, "--json", str(out_json)]) == 1
    assert "hyp.txt is missing" in capsys.readouterr().err and not out_json.exists()


def test_demo_prints_one_validation_line_per_epoch():
    """Real fairseq-train output as the demo logs it (validation at every mid-epoch checkpoint,
    several per epoch): one valid line per epoch, the epoch's last validation, before the
    epoch's train line."""
    path = os.path.join(os.path.dirname(__file__), "data", "fairseq_json_mid_epoch_valid.train.log")
    lines = open(path, encoding="utf-8").read().splitlines(keepends=True)
    printed = []
    progress = demo.EpochProgress("arch_x", 4, out=printed.append)
    for line in lines:
        progress(line)
    progress.flush()
    expected, last_valid = [], {}
    for line in lines:
        if "num. shared model params" in line:
            expected.append("  " + line.split("| ")[-1].strip())
        elif "| valid | " in line:
            st = json.loads(line.split("| valid | ")[1])
            last_valid[st["epoch"]] = st["valid_loss"]
        elif "| train | " in line:
            st = json.loads(line.split("| train | ")[1])
            expected.append(f"  arch_x epoch {st['epoch']}/4: valid loss {last_valid[st['epoch']]}")
            expected.append(f"  arch_x epoch {st['epoch']}/4: train loss {st['train_loss']}, {st['train_wps']} tok/s")
    assert sum("| valid | " in line for line in lines) > 2 * len(last_valid)  # the log validates mid-epoch
    assert printed == expected and len(printed) == 1 + 2 * 4
    # a training that ends after a validation without its epoch's record: that validation is printed
    printed.clear()
    cut = next(i for i, line in enumerate(lines) if "| train | " in line)
    progress = demo.EpochProgress("arch_x", 4, out=printed.append)
    for line in lines[:cut]:
        progress(line)
    progress.flush()
    assert printed[-1] == f"  arch_x epoch 1/4: valid loss {last_valid[1]}" and len(printed) == 2


def test_archs_come_from_fairseq_registry():
    ours = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == "transformer_attn")
    assert demo.registered_archs() == ours
    # read back from the names' cache by a new demo process, which loads neither torch nor fairseq
    code = ("import sys; from fairseq_attn_recipes import demo\n"
            "print(','.join(demo.resolve_archs(demo.DEFAULT_ARCHS)), 'torch' in sys.modules, 'fairseq' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.split() == [demo.DEFAULT_ARCHS, "False", "False"], p.stdout + p.stderr
    everything = demo.resolve_archs("all")
    assert everything[0] == "transformer_attn_wmt_en_de"
    assert set(everything) == {a for a in ours if not a.endswith("_big")}
    with pytest.raises(demo.DemoError, match="unknown architecture.*transformer_nope.*transformer_csan2d_wmt_en_de"):
        demo.resolve_archs("transformer_attn_wmt_en_de,transformer_nope")


def test_demo_bad_archs_fail_before_work(tmp_path, capsys):
    out = tmp_path / "d"
    assert demo.main(["--quick", "--out-dir", str(out), "--archs", "transformer_nope"]) == 1
    assert "transformer_nope" in capsys.readouterr().err and not out.exists()


def _load_model(path):
    from fairseq import checkpoint_utils
    return checkpoint_utils.load_checkpoint_to_cpu(str(path))["model"]


def _kill_mid_epoch(cmd, out, first, epoch_ends):
    """Start the demo into ``out`` and SIGKILL it once it saved a checkpoint inside an epoch."""
    import re
    import signal
    import time

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    log = out / "runs" / first / "train.log"
    saved = re.compile(r"Saved checkpoint \S+checkpoint_\d+_\d+\.pt \(epoch 1 @ (\d+) updates")
    deadline = time.time() + 600
    try:
        while time.time() < deadline:
            text = log.read_text() if log.exists() else ""
            if any(int(u) not in epoch_ends for u in saved.findall(text)):
                break
            assert proc.poll() is None, "the demo ended before a mid-epoch checkpoint was saved"
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _demo_in_process(argv, capsys):
    """``fairseq-attn-demo ARGV`` run by the same ``main`` in this process, which has torch and
    fairseq loaded (a new process spends seconds starting them): its exit status and output."""
    capsys.readouterr()
    rc = demo.main(argv)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["fairseq-attn-demo", *argv], rc, out, err)


@pytest.mark.e2e
def test_demo_quick_end_to_end_kill_resume_and_rerun(tmp_path, capsys):
    """One uninterrupted ``--quick`` demo is the reference for everything here: its table and
    files; a second demo killed during training (SIGKILL, mid-epoch) and run again gives exactly
    its weights, translations and table (it resumes from a mid-epoch checkpoint, fairseq's
    --save-interval-updates, at the saved iterator position; its second run, copied from the
    reference's folder with its stage records, is reused, not trained again); re-running it reuses every
    finished step and redoes a lost one alone; other settings in its folder are refused. The
    command line is run as a new process where that matters (the reference run, the killed one);
    the runs after it by the same ``main`` in this process."""
    import re

    exe = os.path.join(os.path.dirname(sys.executable), "fairseq-attn-demo")
    out = tmp_path / "demo"
    # a checkpoint (and a validation) every 4 updates, not --quick's every update: mid-epoch save
    # points for the kill below (epochs of about 10 updates) at a quarter of the saves
    quick = ["--quick", "--train-args", "--save-interval-updates 4"]
    cmd = [exe, *quick, "--out-dir", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # progress was printed while running, then the table
    assert "train.transformer_csan2d_wmt_en_de: running" in p.stdout and "epoch 2/2" in p.stdout
    assert "| 2 | transformer_csan2d_wmt_en_de |" in p.stdout
    table = json.loads((out / "results.json").read_text())
    assert [r["system"] for r in table["rows"]] == ["transformer_attn_wmt_en_de", "transformer_csan2d_wmt_en_de"]
    refs = (out / "corpus" / "test.tgt").read_text().splitlines()
    for row in table["rows"]:
        hyps = (out / "runs" / row["system"] / "hyp.txt").read_text().splitlines()
        assert len(hyps) == len(refs)
        assert row["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
        assert row["params"] > 0 and row["train_wps"] > 0 and len(row["epochs"]) == 2
    assert table["rows"][1]["p_bootstrap"] is not None and table["rows"][1]["p_ar"] is not None
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # BPE really segmented the toy corpus
    assert "@@ " in (out / "bpe" / "train.tgt").read_text()
    # each run has its run record, with the evaluation the table scored (the recipes' steps)
    for row in table["rows"]:
        rec = json.loads((out / "runs" / row["system"] / "run.json").read_text())
        scores = json.loads((out / "runs" / row["system"] / "scores.json").read_text())["scores"]
        assert rec["arch"] == row["system"] and rec["evaluations"]["test"]["scores"] == scores
        assert scores["bleu"]["score"] == round(row["bleu"], 2) and row["subset"] == "test"
        # the train time: one start, from its record's start to its finish
        (t,) = rec["trainings"]
        took = (datetime.datetime.fromisoformat(t["finished"]) - datetime.datetime.fromisoformat(t["started"]))
        assert row["train_time"] == {"seconds": took.total_seconds(), "trainings": 1, "cut": 0}

    # killed mid-epoch, then run again: the uninterrupted run's result, exactly
    first = demo.DEFAULT_ARCHS.split(",")[0]
    ref_log = (out / "runs" / first / "train.log").read_text()
    # updates at the end of each epoch of the uninterrupted run
    epoch_ends = {int(float(json.loads(line[line.index("{"):])["train_num_updates"]))
                  for line in ref_log.splitlines() if "| train |" in line}
    killed = tmp_path / "killed"
    # its folder starts with the reference's prepared data (corpus, BPE, data-bin and their stage
    # records, which name files relative to the folder) and its second run (the run folder and the
    # records of its training and evaluation, which name the folder's paths relative to it): the demo
    # reuses them, so it trains on the same files without binarising again; the killed training is its own
    second = demo.DEFAULT_ARCHS.split(",")[1]
    for folder in ("corpus", "bpe", "data-bin", f"runs/{second}"):
        shutil.copytree(out / folder, killed / folder)
    (killed / ".done").mkdir()
    for stage in ("corpus", "bpe", "binarise", f"train.{second}", f"generate.{second}"):
        shutil.copy(out / ".done" / stage, killed / ".done" / stage)
    shutil.copy(out / "settings.json", killed / "settings.json")
    killed_cmd = [exe, *quick, "--out-dir", str(killed)]
    _kill_mid_epoch(killed_cmd, killed, first, epoch_ends)
    assert not (killed / ".done" / f"train.{first}").exists()
    p = _demo_in_process(killed_cmd[1:], capsys)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert all(f"{stage}: done before, reused" in p.stdout
               for stage in ("corpus", "bpe", "binarise", f"train.{second}", f"generate.{second}")), p.stdout
    resumed = re.findall(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch (\d+) @ (\d+) updates\)",
                         (killed / "runs" / first / "train.log").read_text())
    assert resumed, "the second run did not resume from a checkpoint"
    assert int(resumed[-1][1]) not in epoch_ends  # resumed inside an epoch
    for arch in demo.DEFAULT_ARCHS.split(","):
        want = _load_model(out / "runs" / arch / "checkpoint_last.pt")
        got = _load_model(killed / "runs" / arch / "checkpoint_last.pt")
        assert want.keys() == got.keys()
        for k in want:
            torch.testing.assert_close(got[k], want[k], rtol=0, atol=0, msg=f"{arch}: {k} differs")
        assert (killed / "runs" / arch / "hyp.txt").read_text() == (out / "runs" / arch / "hyp.txt").read_text()
    got = json.loads((killed / "results.json").read_text())
    for w, g in zip(table["rows"], got["rows"]):
        assert (g["bleu"], g["p_bootstrap"], g["p_ar"]) == (w["bleu"], w["p_bootstrap"], w["p_ar"])

    # re-running reuses every finished step; a lost step is redone alone
    sizes = {a: os.path.getsize(out / "runs" / a / "train.log") for a in demo.DEFAULT_ARCHS.split(",")}
    os.remove(out / ".done" / "generate.transformer_csan2d_wmt_en_de")
    os.remove(out / "runs" / "transformer_csan2d_wmt_en_de" / "hyp.txt")
    p = _demo_in_process(cmd[1:], capsys)
    assert p.returncode == 0, p.stderr[-3000:]
    for step in ("corpus", "bpe", "binarise", "train.transformer_attn_wmt_en_de",
                 "train.transformer_csan2d_wmt_en_de", "generate.transformer_attn_wmt_en_de"):
        assert f"{step}: done before, reused" in p.stdout
    assert "generate.transformer_csan2d_wmt_en_de: running" in p.stdout
    assert sizes == {a: os.path.getsize(out / "runs" / a / "train.log") for a in sizes}
    assert json.loads((out / "results.json").read_text())["rows"] == table["rows"]

    # other settings in the same folder are refused instead of mixed
    p = _demo_in_process(["--out-dir", str(out)], capsys)
    assert p.returncode == 1 and "other settings" in p.stderr
