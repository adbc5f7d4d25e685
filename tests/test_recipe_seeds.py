"""SEEDS="1 2" in the recipes: one run folder per seed, resumed per seed, evaluated per
seed, and their learning curves as bands."""

import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_recipes import prepared_ende, read, run  # noqa: E402

from fairseq_attn_reports import curves  # noqa: E402
from fairseq_attn_reports.cli import results  # noqa: E402


@pytest.mark.parametrize("env,message", [
    ({"SEEDS": "1 2 1"}, "seed 1 is given twice"),
    ({"SEEDS": "1 x"}, "'x' is not a non-negative integer"),
    ({"SEEDS": "1 2", "SEED": "3"}, "set one of them"),
])
def test_bad_seeds_fail_before_any_work(tmp_path, env, message):
    for script in ("train.sh", "evaluate.sh"):
        p = run("wmt14_en_de", script, dict(env, WORK=str(tmp_path / "work")), check=False)
        assert p.returncode == 1 and message in p.stderr, p.stderr
    assert not (tmp_path / "work" / "runs").exists()


@pytest.mark.e2e
def test_seeds_train_resume_evaluate_and_curves(tmp_path):
    env = dict(prepared_ende(tmp_path / "work"), SEEDS="1 2")
    runs = tmp_path / "work" / "runs"
    run("wmt14_en_de", "train.sh", dict(env, MAX_UPDATE="2"))
    assert sorted(os.listdir(runs)) == ["transformer_attn_wmt_en_de_seed1", "transformer_attn_wmt_en_de_seed2"]
    dirs = [runs / f"transformer_attn_wmt_en_de_seed{s}" for s in (1, 2)]

    # each seed resumes from its own checkpoint; a third seed whose training fails (a broken
    # checkpoint) stops the loop there, after the seeds before it
    seed3 = runs / "transformer_attn_wmt_en_de_seed3"
    seed3.mkdir()
    (seed3 / "checkpoint_last.pt").write_bytes(b"not a checkpoint")
    p = run("wmt14_en_de", "train.sh", dict(env, SEEDS="1 2 3", MAX_UPDATE="4"), check=False)
    assert p.returncode == 1 and f"{seed3}: not trained" in p.stderr
    assert f"checkpoint '{seed3 / 'checkpoint_last.pt'}' (16 bytes) is corrupt" in p.stdout
    for seed, d in zip((1, 2), dirs):
        assert f"resuming from {d}/checkpoint_last.pt" in p.stdout  # said by the training step (and in train.log)
        log = (d / "train.log").read_text()
        assert re.search(rf"Loaded checkpoint {d}/checkpoint_last\.pt \(epoch \d+ @ 2 updates\)", log)
        assert f"--seed {seed}" in log and f"'seed': {seed}," in log and '"train_num_updates": "4"' in log
    losses = [[p[2] for p in curves.run_curves(str(d / "train.log"))["train_loss"]] for d in dirs]
    assert len(losses[0]) == len(losses[1]) == 4 and losses[0] != losses[1]  # two different trainings

    # run again once the checkpoint is gone: the finished seeds are skipped (a fairseq re-run
    # would add an update to them), the third one trained
    finished = {d: ((d / "checkpoint_last.pt").read_bytes(), (d / "train.log").read_text()) for d in dirs}
    os.remove(seed3 / "checkpoint_last.pt")
    p = run("wmt14_en_de", "train.sh", dict(env, SEEDS="1 2 3", MAX_UPDATE="4"))
    assert p.stderr.count("trained before to MAX_UPDATE=4 with the same settings: skipped") == 2
    assert f"trained: {seed3}" in p.stderr
    assert '"train_num_updates": "4"' in (seed3 / "train.log").read_text()
    for d in dirs:
        assert ((d / "checkpoint_last.pt").read_bytes(), (d / "train.log").read_text()) == finished[d]

    run("wmt14_en_de", "evaluate.sh", dict(env, N_AVG="1"))
    n_test = len(read(tmp_path / "work" / "raw" / "test.de"))
    for d in dirs:
        assert json.loads((d / "test" / "scores.json").read_text())["checkpoint"].startswith(str(d))
        assert len(read(d / "test" / "hyp.txt")) == n_test

    png = tmp_path / "curves.png"
    assert results.main(["--curves", str(png), *map(str, dirs)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    band = curves.plot_curves([("base", [str(d) for d in dirs])], str(tmp_path / "b.png"))["base"]["train_loss"]
    assert [b[0] for b in band] == [1, 2, 3, 4]
    assert [b[2] for b in band] == pytest.approx([(a + b) / 2 for a, b in zip(*losses)])
