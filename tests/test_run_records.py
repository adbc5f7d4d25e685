"""Every run knows what it is: the run record read by the reporting commands, and checkpoint
averaging by the update number each checkpoint holds (fast cases; the recipes end to end are in
test_recipes.py)."""

import datetime
import hashlib
import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from run_records import write_record  # noqa: E402
from test_demo import TRAIN_LOG  # noqa: E402
from test_recipes import steps_in_process  # noqa: E402

from fairseq_attn_reports.cli import results as results_cli  # noqa: E402
from fairseq_attn_reports import results, seeds  # noqa: E402
from fairseq_attn_records.toy_corpus import make_corpus  # noqa: E402
from fairseq_attn_recipes.checkpoints import checkpoints_to_average  # noqa: E402


def _checkpoint(path, params, num_updates, epoch, iterations_in_epoch):
    """A checkpoint as fairseq 0.12 writes it (the fields the averaging and the record read)."""
    torch.save({"model": params, "args": None, "cfg": None, "extra_state": {
                    "train_iterator": {"epoch": epoch, "iterations_in_epoch": iterations_in_epoch}},
                "optimizer_history": [{"criterion_name": "x", "optimizer_name": "adam",
                                       "lr_scheduler_state": {"best": 1.0}, "num_updates": num_updates}],
                "last_optimizer_state": {}}, path)


def _fairseq_save_points(tmp_path, per_epoch, every, max_update):
    """The files fairseq 0.12 leaves: checkpoint_E_U.pt at every ``every`` updates unless the
    update ends an epoch (then checkpointE.pt instead), checkpointE.pt at each epoch end, the
    final update (checkpoint_E_U.pt only if it is a save point) and checkpoint_last.pt."""
    g = torch.Generator().manual_seed(per_epoch)
    params = {}
    for u in range(1, max_update + 1):
        epoch, end = (u - 1) // per_epoch + 1, u % per_epoch == 0
        name = f"checkpoint{epoch}.pt" if end else f"checkpoint_{epoch}_{u}.pt" if u % every == 0 else None
        if name or u == max_update:
            params[u] = {"w": torch.randn(3, 4, generator=g)}
            it, ep = (0, epoch + 1) if end else (u % per_epoch, epoch)  # at an epoch end: the next epoch
            if name:
                _checkpoint(tmp_path / name, params[u], u, ep, it)
            _checkpoint(tmp_path / "checkpoint_last.pt", params[u], u, ep, it)
    return params


def test_averaging_takes_the_last_save_points_by_the_update_they_hold(tmp_path, capsys):
    # 27 updates per epoch, saves every 9, 54 updates: 27 and 54 fall on epoch ends (checkpoint1.pt,
    # checkpoint2.pt, no checkpoint_E_U.pt): the last 3 save points are 54, 45, 36 (not 45, 36, 18)
    params = _fairseq_save_points(tmp_path, per_epoch=27, every=9, max_update=54)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint1.pt", "checkpoint2.pt", "checkpoint_1_18.pt", "checkpoint_1_9.pt",
                                            "checkpoint_2_36.pt", "checkpoint_2_45.pt", "checkpoint_last.pt"]
    out = tmp_path / "avg.pt"
    p = steps_in_process("average", str(tmp_path), "--n", "3", "--output", str(out), "--record", str(tmp_path / "avg.json"))
    assert p.returncode == 0, p.stderr
    rec = json.loads((tmp_path / "avg.json").read_text())
    assert [(a["file"], a["num_updates"], a["epoch"]) for a in rec["averaged"]] == [
        ("checkpoint2.pt", 54, 2), ("checkpoint_2_45.pt", 45, 2), ("checkpoint_2_36.pt", 36, 2)]
    expected = torch.zeros(3, 4, dtype=torch.float64)
    for r in range(3):
        for c in range(4):
            expected[r, c] = sum(params[u]["w"][r, c].double() for u in (54, 45, 36)) / 3
    torch.testing.assert_close(torch.load(out)["model"]["w"].double(), expected, rtol=1e-6, atol=1e-7)

    # 6 updates per epoch, saves every 10, 30 updates: 7 save points (6, 10, 12, 18, 20, 24, 30)
    d = tmp_path / "six"
    d.mkdir()
    _fairseq_save_points(d, per_epoch=6, every=10, max_update=30)
    assert [p["num_updates"] for p in checkpoints_to_average(str(d), 5)] == [30, 24, 20, 18, 12]
    # a learning curve's point (lengths.sh's CURVE): the save points up to that update's; none of it: refused
    assert [p["num_updates"] for p in checkpoints_to_average(str(d), 2, at_update=18)] == [18, 12]
    with pytest.raises(SystemExit) as e:
        checkpoints_to_average(str(d), 1, at_update=15)
    assert e.value.code == 1
    assert "no checkpoint of update 15 (saved: updates 6, 10, 12, 18, 20, 24, 30)" in capsys.readouterr().err
    # a run that stopped between save points: its final update lives only in checkpoint_last.pt
    d = tmp_path / "stopped"
    d.mkdir()
    _fairseq_save_points(d, per_epoch=6, every=10, max_update=28)
    chosen = checkpoints_to_average(str(d), 3)
    assert [(os.path.basename(p["file"]), p["num_updates"]) for p in chosen] == [
        ("checkpoint_last.pt", 28), ("checkpoint4.pt", 24), ("checkpoint_4_20.pt", 20)]
    with pytest.raises(SystemExit) as e:  # fewer than asked: refused, naming what exists
        checkpoints_to_average(str(d), 9)
    assert e.value.code == 1
    assert "7 saved checkpoints (updates 6, 10, 12, 18, 20, 24, 28) but N_AVG=9" in capsys.readouterr().err


# ------------------------------------------------------------------ the reporting commands
@pytest.fixture
def two_runs(tmp_path):
    refs = [t for _, t in make_corpus(30, seed=3)]
    (tmp_path / "test.ref").write_text("\n".join(refs) + "\n")
    (tmp_path / "valid.ref").write_text("\n".join(refs[::-1]) + "\n")
    runs = []
    for name, keep in (("base", 0.5), ("sys", 0.8)):
        d = tmp_path / name
        d.mkdir()
        (d / "train.log").write_text(TRAIN_LOG)
        hyps = [r if (i * 37 % 100) / 100 < keep else " ".join(r.split()[::-1]) for i, r in enumerate(refs)]
        (d / "hyp.txt").write_text("\n".join(hyps) + "\n")
        runs.append(d)
    return tmp_path, runs


def test_the_same_run_twice_is_an_error(two_runs, capsys, monkeypatch):
    tmp_path, (base, _) = two_runs
    ref = str(tmp_path / "test.ref")
    monkeypatch.chdir(tmp_path)
    for same in (str(base), "./base/", os.path.join(str(tmp_path), "x", "..", "base")):
        assert results_cli.main(["--ref", ref, "base", same, "--bs-samples", "10", "--ar-trials", "10"]) == 1
        err = capsys.readouterr().err
        assert f"base and {same} are the same run (both are the folder {os.path.realpath(base)})" in err, err
    os.symlink(base, tmp_path / "link")
    assert results_cli.main(["--ref", ref, "base", "link", "--names", "a", "b"]) == 1
    assert "are the same run" in capsys.readouterr().err


def test_a_validation_output_is_never_scored_against_the_test_reference(two_runs, capsys):
    tmp_path, (base, sysd) = two_runs
    # a run evaluated on the validation set (its scores.json records the reference)
    (sysd / "scores.json").write_text(json.dumps({"ref": str(tmp_path / "valid.ref"), "sacrebleu": 1.0}))
    assert results_cli.main(["--ref", str(tmp_path / "test.ref"), str(base), str(sysd)]) == 1
    assert (f"{sysd / 'hyp.txt'} was scored against {tmp_path / 'valid.ref'} (scores.json), not "
            f"{tmp_path / 'test.ref'}") in capsys.readouterr().err
    # with run records: each subset has its own outputs, picked by the reference's content
    for d in (base, sysd):
        rec = write_record(d, "transformer_attn_wmt_en_de")
        for subset in ("test", "valid"):
            (d / subset).mkdir()
            (d / subset / "hyp.txt").write_text((d / "hyp.txt").read_text() if subset == "test" else
                                                (tmp_path / "valid.ref").read_text())
            ref = tmp_path / f"{subset}.ref"
            rec["evaluations"][subset] = {"hyp": f"{subset}/hyp.txt", "ref": str(ref),
                                          "ref_sha256": hashlib.sha256(ref.read_bytes()).hexdigest(),
                                          "hyp_sha256": hashlib.sha256((d / subset / "hyp.txt").read_bytes()).hexdigest(),
                                          "num_updates": 10, "scores": {}}
        (d / "run.json").write_text(json.dumps(rec))
        os.remove(d / "hyp.txt")
    table = results.collect([("base", str(base)), ("sys", str(sysd))], str(tmp_path / "test.ref"),
                            bs_samples=10, ar_trials=10)
    assert [(r["subset"], r["hyp"]) for r in table["rows"]] == [("test", str(base / "test" / "hyp.txt")),
                                                                ("test", str(sysd / "test" / "hyp.txt"))]
    table = results.collect([("base", str(base)), ("sys", str(sysd))], str(tmp_path / "valid.ref"),
                            bs_samples=10, ar_trials=10)
    assert [r["subset"] for r in table["rows"]] == ["valid", "valid"] and table["rows"][0]["bleu"] == pytest.approx(100.0)
    other = tmp_path / "other.ref"
    other.write_text("x\n" * 30)
    with pytest.raises(ValueError, match=r"no evaluation against .*other.ref \(sha256 \w{12}; evaluated: test against "
                                         r".*test.ref \(sha256 \w{12}\); valid against .*valid.ref \(sha256 \w{12}\)\)"):
        results.collect([("base", str(base)), ("sys", str(sysd))], str(other))
    # the reference evaluated against, changed since (same path, other content): said so
    test_ref = tmp_path / "test.ref"
    test_ref.write_text(test_ref.read_text().replace("\n", " x\n", 1))
    with pytest.raises(ValueError, match=r"no evaluation against .*test.ref \(sha256 \w{12}; evaluated: test against "
                                         r".*test.ref as it was then \(sha256 \w{12}; its content changed since\); "
                                         r"valid against .*valid.ref \(sha256 \w{12}\)\)"):
        results.collect([("base", str(base)), ("sys", str(sysd))], str(test_ref))


def test_runs_trained_differently_are_flagged(two_runs):
    tmp_path, (base, sysd) = two_runs
    write_record(base, "transformer_attn_wmt_en_de", num_updates=60)
    write_record(sysd, "transformer_csan2d_wmt_en_de", num_updates=200, data_id="data-b")
    table = results.collect([("base", str(base)), ("sys", str(sysd))], str(tmp_path / "test.ref"),
                            bs_samples=10, ar_trials=10)
    assert table["rows"][1]["trained_differently"] == ["updates", "data-bin"]
    md = results.format_markdown(table)
    assert "| 2 | sys † |" in md and "| 1 | base |" in md
    assert "updates differ: base 60, sys 200" in md and "data-bin differ: base /data/data-a (data-a), sys /data/data-b" in md


def test_seeds_are_grouped_by_their_records(tmp_path):
    a1, a2, b2 = tmp_path / "a_seed1", tmp_path / "a_seed2", tmp_path / "b_seed2"
    write_record(a1, "transformer_attn_wmt_en_de", seed=1)
    write_record(a2, "transformer_attn_wmt_en_de", seed=2)
    write_record(b2, "transformer_attn_wmt_en_de", "--dropout", "0.3", seed=2)
    groups = seeds.group_runs(["a", "a"], [str(a1), str(a2)])
    assert groups["a"] == [(1, str(a1)), (2, str(a2))]
    # a folder named seed 1 whose record says seed 2
    os.rename(a2, tmp_path / "c_seed1")
    with pytest.raises(ValueError, match=r"c_seed1: the folder name says seed 1 but its run record says seed 2"):
        seeds.group_runs(["a", "a"], [str(a1), str(tmp_path / "c_seed1")])
    # two "seeds" of one system that are other runs: named with the difference
    with pytest.raises(ValueError, match=r"system 'a': .*a_seed1 and .*b_seed2 are not seeds of one system: "
                                         r"dropout: 0.1 in .*a_seed1, 0.3 in .*b_seed2"):
        seeds.group_runs(["a", "a"], [str(a1), str(b2)])


def test_train_time_counts_killed_starts_until_their_last_checkpoint():
    from fairseq_attn_records import run_record

    def at(h, m):
        return datetime.datetime(2026, 1, 2, h, m, tzinfo=datetime.timezone.utc)

    def ckpt(h, m):
        return {"num_updates": 1, "mtime_ns": int(at(h, m).timestamp()) * 10**9}

    rec = {"trainings": [
        {"started": at(10, 0).isoformat(), "finished": None},             # killed: its last save 10:25
        {"started": at(10, 30).isoformat(), "finished": at(11, 0).isoformat()},
        {"started": at(11, 30).isoformat(), "finished": None},            # killed before any save
    ], "checkpoints": {"a.pt": ckpt(10, 10), "b.pt": ckpt(10, 25), "c.pt": ckpt(10, 50), "d.pt": ckpt(11, 0)}}
    want = (at(10, 25) - at(10, 0)).total_seconds() + (at(11, 0) - at(10, 30)).total_seconds()
    assert run_record.training_time(rec) == {"seconds": want, "trainings": 3, "cut": 2}
    # the start running now counts until its newest checkpoint
    rec["checkpoints"]["e.pt"] = ckpt(11, 40)
    assert run_record.training_time(rec)["seconds"] == want + (at(11, 40) - at(11, 30)).total_seconds()
    assert results.fmt_train_time(run_record.training_time(rec)) == "65 min (3 starts)"
    assert run_record.training_time({"trainings": []}) == {"seconds": 0.0, "trainings": 0, "cut": 0}


def test_train_pairs_count_the_joined_pairs_a_run_trained_on(tmp_path):
    """TRAIN_CONCAT: the run trained on the originals and their joins; the table says both."""
    from fairseq_attn_records import run_record
    from fairseq_attn_reports.runs import Run

    alone, joined = tmp_path / "alone", tmp_path / "joined"
    for d, concat in ((alone, None), (joined, {"k": {"2": {"n": 40}, "4": {"n": 30}}, "original": 50, "total": 120})):
        rec = write_record(d, "transformer_attn_wmt_en_de")
        rec["data"]["train_pairs"] = {"raw": 60, "clean": 50, "partial": False, **({"concat": concat} if concat else {})}
        run_record.save(str(d), rec)
    rows = {d.name: results.paper_scores(Run(str(d)), {"scores": {}}) for d in (alone, joined)}
    assert (rows["alone"]["train_pairs"], rows["alone"]["train_pairs_original"]) == (50, None)
    assert (rows["joined"]["train_pairs"], rows["joined"]["train_pairs_original"]) == (50 + 40 + 30, 50)
    assert results.fmt_train_pairs(rows["alone"]) == "50"
    assert results.fmt_train_pairs(rows["joined"]) == "120 (50 + joined)"
    assert results.fmt_train_pairs({"train_pairs": 4361, "train_data_partial": True}) == "4,361 (partial)"
