"""CONVERGE's pieces (lengths.sh; fairseq's --patience): the patience counter read back from a run's log
for a resumed training, and a run stopped by it known as trained."""

import json
import logging
import types

import pytest

from fairseq_attn_recipes import patience
from fairseq_attn_records import run_record


@pytest.mark.parametrize("losses", [
    [6.9, 6.4, 6.4, 6.5, 6.2, 6.3],  # an equal loss does not improve
    [5.0, 5.1, 5.2],
    [7.0],
])
def test_patience_state_is_the_counter_fairseq_keeps(losses):
    """After each validation, (best, validations since) as fairseq's own should_stop_early counts them,
    and a training resumed there stops where fairseq's uninterrupted counter would."""
    from fairseq_cli import train as fairseq_train

    stop = fairseq_train.should_stop_early
    cfg = types.SimpleNamespace(checkpoint=types.SimpleNamespace(patience=2, maximize_best_checkpoint_metric=False))
    seen = patience.EarlyStopSeen()  # what tells the run record that the patience stopped the training
    logger = logging.getLogger("fairseq_cli.train")
    level = logger.level
    logger.setLevel(logging.INFO)  # as fairseq-train logs (pytest's default is WARNING)
    logger.addHandler(seen)
    try:
        for attr in ("best", "num_runs"):
            stop.__dict__.pop(attr, None)
        decisions, states = [], []
        for loss in losses:  # fairseq, uninterrupted
            decisions.append(stop(cfg, loss))
            states.append((stop.best, stop.num_runs))
        assert seen.seen == any(decisions)
        for i in range(1, len(losses) + 1):
            got = patience.patience_state(list(enumerate(losses[:i])))
            assert got == states[i - 1]
            # a training resumed after validation i: fairseq's counter as read back, then the later losses
            stop.best, stop.num_runs = got
            assert [stop(cfg, loss) for loss in losses[i:]] == decisions[i:]
    finally:
        logger.removeHandler(seen)
        logger.setLevel(level)
        for attr in ("best", "num_runs"):
            stop.__dict__.pop(attr, None)


def test_a_run_stopped_by_patience_is_trained_and_only_with_its_arguments(tmp_path):
    argv = ["data", "--patience", "2", "--max-update", "100"]
    rec = {"format": run_record.FORMAT, "num_updates": 36,
           "trainings": [{"max_update": 100, "finished": "t", "argv": run_record.launch_key(argv), "to_update": 36,
                          "stopped": "patience"}]}
    run_record.save(str(tmp_path), rec)
    assert run_record.finished_before(str(tmp_path), argv)
    assert not run_record.finished_before(str(tmp_path), argv[:2] + ["3"] + argv[3:])  # another patience
    rec["num_updates"] = 48  # trained on since (another start): not the stop recorded
    run_record.save(str(tmp_path), rec)
    assert not run_record.finished_before(str(tmp_path), argv)
    rec["num_updates"], rec["trainings"][-1]["stopped"] = 36, None  # stopped by something else before the cap
    run_record.save(str(tmp_path), rec)
    assert not run_record.finished_before(str(tmp_path), argv)


def test_a_finished_run_keeping_other_checkpoint_files_is_not_trained_again(tmp_path):
    """A finer learning curve of a finished study (CURVE with more points) changes only which checkpoint
    files fairseq keeps: the run stopped by its patience, or at its cap, is finished before; any flag that
    changes what is trained is not, nor is a boolean flag added."""
    from fairseq_attn_recipes.recording import stopped_early

    argv = ["data", "--lr", "0.002", "--keep-interval-updates", "20", "--keep-interval-updates-pattern", "1000",
            "--patience", "4", "--max-update", "12000"]
    stored = run_record.launch_key(argv + ["--distributed-rank", "0"])
    assert stored == argv  # the record keeps the files kept, only the launch-only flags are dropped
    rec = {"format": run_record.FORMAT, "num_updates": 3500,
           "trainings": [{"max_update": 12000, "finished": "t", "argv": stored, "to_update": 3500,
                          "stopped": "patience"}]}
    run_record.save(str(tmp_path), rec)
    finer = argv[:6] + ["--keep-interval-updates-pattern=500"] + argv[7:]
    assert finer != argv and run_record.finished_before(str(tmp_path), finer)
    assert stopped_early(rec, finer) and stopped_early(rec, argv)
    fewer = [a for a in argv if a not in ("--keep-interval-updates", "20")]
    assert run_record.finished_before(str(tmp_path), fewer)
    for changed in (argv[:2] + ["0.001"] + argv[3:],  # another lr
                    argv[:-1] + ["13000"],  # another cap
                    argv + ["--no-epoch-checkpoints"],  # a boolean flag is never taken for a value
                    argv[:3] + ["--keep-interval-updates", "20", "--lr", "0.001"] + argv[5:]):
        assert not run_record.finished_before(str(tmp_path), changed), changed
        assert not stopped_early(rec, changed), changed
    # stopped at the cap: the same
    rec.update(num_updates=12000)
    rec["trainings"][-1].update(to_update=12000, stopped=None)
    run_record.save(str(tmp_path), rec)
    assert run_record.finished_before(str(tmp_path), finer)
    assert not run_record.finished_before(str(tmp_path), argv[:2] + ["0.001"] + argv[3:])


def test_curve_and_converge_are_refused_in_one_line_naming_them():
    """The one check of CURVE and CONVERGE (converge.sh: lengths.sh, table1.sh and figure2.sh; before any
    step), against the cap MAX_UPDATE and the save interval: each bad value one line, in one shell."""
    import os
    import subprocess
    import sys

    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "lib")
    env = dict(os.environ, PYTHON=sys.executable, MAX_UPDATE="100", SAVE_INTERVAL_UPDATES="10")
    cases = {"CURVE=20,10": "CURVE=20,10: give the updates in increasing order, each once (10 after 20)",
             "CURVE=10,x": "CURVE=10,x: give the updates of the learning curve, positive integers",
             "CURVE=15": "CURVE=15: 15 is not a multiple of SAVE_INTERVAL_UPDATES=10",
             "CURVE=110": "CURVE=110: 110 is beyond the cap of MAX_UPDATE=100 updates",
             "CONVERGE=0": "CONVERGE=0: give the patience",
             "CONVERGE=2 CURVE=50,100": ""}
    script = f'. "{lib}/common.sh"; . "{lib}/lengths.sh"\n' + "".join(
        f'( {case} check_converge_curve transformer_attn_wmt_en_de; echo "ok $KEEP_INTERVAL_UPDATES_PATTERN '
        f'${{PATIENCE:-}} ${{VALIDATE_INTERVAL_UPDATES:-}}" ) 2>&1 || true; echo "--"\n' for case in cases)
    p = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    got = p.stdout.split("--\n")[:-1]
    assert len(got) == len(cases), p.stdout + p.stderr
    for (case, message), out in zip(cases.items(), got):
        lines = out.splitlines()
        if message:
            assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), (case, out)
        else:  # the flags given to fairseq: patience 2, validations every 10 updates, checkpoints of 50, 100 kept
            assert lines == ["ok 50 2 10"], (case, out)


# ------------------------------------------------------------------ the order of the systems along the curve
def _curve(bleu):
    """A curve table of ``bleu``: {(condition, system, update): mean BLEU on k = 1}, None where no value."""
    points = sorted({u for _, _, u in bleu})
    rows = [{"condition": c, "system": s, "updates": u,
             "k": {"1": {"bleu": None if v is None else {"mean": v, "std": 0.0, "per_seed": [v]}}}}
            for (c, s, u), v in bleu.items()]
    return {"points": points, "k": ["1"], "rows": rows, "missing": []}


def _changes_after(bleu, cond, start):
    """Plainly: True when two systems of ``cond`` are in another order (or tie) at two updates >= start."""
    have = {(s, u): v for (c, s, u), v in bleu.items() if c == cond and v is not None and u >= start}
    systems = sorted({s for s, _ in have})
    for a in systems:
        for b in systems:
            seen = set()
            for (s, u), v in have.items():
                if s == a and (b, u) in have:
                    w = have[(b, u)]
                    seen.add("a" if v > w else "b" if w > v else "=")
            if len(seen) > 1:
                return True
    return False


def test_the_order_of_the_systems_and_the_update_it_settles():
    from fairseq_attn_reports.learning_curve import ranking_markdown, ranking_table

    bleu = {}
    for u, (base, rel, ali) in zip((1000, 2000, 4000, 8000), ((5.0, 6.0, 4.0), (7.0, 6.5, 6.9), (8.0, 7.0, 7.5), (9.0, 8.0, None))):
        bleu.update({("pairs", "baseline", u): base, ("pairs", "relpos", u): rel, ("pairs", "alibi", u): ali})
    # with the joined pairs: relpos and baseline tie at 1,000, then baseline ahead; alibi stops after 2,000
    for u, (base, rel, ali) in zip((1000, 2000, 4000, 8000), ((3.0, 3.0, 1.0), (4.0, 3.5, 5.0), (5.0, 4.0, None), (6.0, 4.5, None))):
        bleu.update({("joined", "baseline", u): base, ("joined", "relpos", u): rel, ("joined", "alibi", u): ali})
    rows = {r["condition"]: r for r in ranking_table(_curve(bleu))}
    assert [o["order"] for o in rows["pairs"]["orders"]] == [["relpos", "baseline", "alibi"], ["baseline", "alibi", "relpos"],
                                                           ["baseline", "alibi", "relpos"], ["baseline", "relpos"]]
    assert [o["order"] for o in rows["joined"]["orders"]][:2] == [["baseline", "relpos", "alibi"], ["alibi", "baseline", "relpos"]]
    for cond in ("pairs", "joined"):  # the first update from which nothing changes, by the plain reading
        want = next(u for u in (1000, 2000, 4000, 8000) if not _changes_after(bleu, cond, u))
        assert rows[cond]["stable_from"] == want
    assert rows["pairs"]["stable_from"] == 2000 and rows["joined"]["stable_from"] == 2000
    # an order that changes at the last update: said so
    bleu[("pairs", "relpos", 8000)] = 9.5
    rows = {r["condition"]: r for r in ranking_table(_curve(bleu))}
    assert rows["pairs"]["stable_from"] == 8000 == next(u for u in (1000, 2000, 4000, 8000) if not _changes_after(bleu, "pairs", u))
    md = ranking_markdown(list(rows.values()))
    assert "| pairs | 1 | relpos > baseline > alibi | baseline > alibi > relpos | baseline > alibi > relpos | " \
           "relpos > baseline | the last point |" in md
    assert "| joined | 1 | baseline > relpos > alibi | alibi > baseline > relpos | baseline > relpos | baseline > relpos | 2,000 |" in md


# ------------------------------------------------------------------ an epoch's updates from train.log's epoch ends
@pytest.mark.parametrize("ends, per", [
    ([(e, 66 * e) for e in range(1, 54)] + [(54, 3500)], 66),  # stopped by the patience 2 updates into epoch 54
    ([(1, 8), (2, 16), (3, 24)], 8),  # stopped at the cap, at an epoch's end
    ([(1, 66), (2, 132), (2, 132), (3, 150)], 66),  # resumed (epoch 2 logged again), then stopped in epoch 3
    ([(1, 40)], 40),
    ([], None),
    ([(1, 66), (2, 132), (3, 180), (4, 200)], "error"),  # epochs of 66, 48 and 20 updates before the last
    ([(1, 66), (2, 132), (3, 200)], "error"),  # a last epoch longer than the others
    ([(1, 66), (2, 133)], "error"),
])
def test_updates_per_epoch_allows_only_the_last_epoch_cut_short(ends, per):
    from fairseq_attn_records.training_seen import updates_per_epoch

    if per == "error":
        with pytest.raises(ValueError, match="epochs of different lengths"):
            updates_per_epoch(ends)
        return
    assert updates_per_epoch(ends) == per
    if per:  # plainly: every epoch but the last ends at epoch x per, the last inside its own epoch
        last = dict(ends)
        top = max(last)
        assert all(u == e * per for e, u in last.items() if e != top) and (top - 1) * per < last[top] <= top * per


def test_training_length_tables_of_conditions_whose_label_and_folder_hold_equals_signs(tmp_path):
    """The curve CLI as lengths.sh calls it with TRAIN_CONCAT: a label "(TRAIN_CONCAT=2,4)" and a folder with '='
    in its path; each condition's lengths.md and lengths.json get the rows of its own runs' records."""
    import json

    from fairseq_attn_reports.cli import learning_curve as cli

    study = tmp_path / "a=b" / "study"
    conds = {"pairs alone": study, "with joined pairs (TRAIN_CONCAT=2,4)": study / "tc"}
    stops = {}
    for ci, d in enumerate(conds.values()):
        for si, name in enumerate(("baseline", "alibi")):
            updates, per_epoch = 3000 + 500 * ci + 500 * si, 66 + 349 * ci
            stops[(d, name)] = updates
            (d / name).mkdir(parents=True)
            run_record.save(str(d / name), {
                "format": run_record.FORMAT, "num_updates": updates,
                "trainings": [{"max_update": 12000, "finished": "t", "stopped": "patience", "to_update": updates}],
                "seen": {"updates": updates, "epochs": updates / per_epoch, "pairs": 10.0 * updates,
                         "original_pairs": 4.0 * updates, "src_tokens": 100.0 * updates, "tgt_tokens": 110.0 * updates}})
    # a run of patience 2, stopped by it at 3,000, continued with patience 3 to 3,500 (its stop): trained
    # past its patience-2 stop (the validation losses of its log), never called converged
    past = study / "alibi"
    rec = run_record.load(str(past))
    rec["trainings"] = [dict(rec["trainings"][0], argv=["data", "--patience", "2"], to_update=3000),
                        dict(rec["trainings"][0], argv=["data", "--patience", "3"])]
    run_record.save(str(past), rec)
    losses = [6.0, 5.0, 4.0, 3.9, 4.0, 4.1, 4.2]  # best at 2,000, then 1, 2, 3 validations without improvement
    (past / "train.log").write_text("".join(
        f'2026-11-29 00:00:00 | INFO | valid | {{"epoch": 1, "valid_loss": "{v}", "valid_num_updates": "{500 * (i + 1)}"}}\n'
        for i, v in enumerate(losses)))
    argv = [a for label, d in conds.items() for a in ("--condition", label, str(d))] + ["--names", "baseline", "alibi"]
    assert cli.main(argv) == 0
    for label, d in conds.items():
        md = (d / "lengths.md").read_text()
        rows = json.loads((d / "lengths.json").read_text())["training"]
        assert [(r["condition"], r["system"]) for r in rows] == [(label, "baseline"), (label, "alibi")]
        for r in rows:
            u = stops[(d, r["system"])]
            assert r["updates"]["per_seed"] == [u] and r["original_pairs"]["mean"] == 4.0 * u
            stopped = "past its stop (patience 2: 3,000)" if d / r["system"] == past else "patience"
            assert r["stopped"] == [stopped]
            assert f"| {label} | {r['system']} | {u:,} | {stopped} | 12000 |" in md
            assert f"| {4 * u:,} | {210 * u:,} |" in md


def test_a_converge_runs_epoch_checkpoints_are_shown_and_removed_only_when_asked(tmp_path, capsys):
    """Epochs of 7 updates, save points every 5, 84 updates: a file at every epoch end, the interval
    ones as fairseq left them (--keep-interval-updates 2 --keep-interval-updates-pattern 35, CURVE=35,70:
    the newest 2 and the pattern's, which fall on epoch ends here). The step without --yes lists the epoch
    files but the newest 2 not at a multiple of 35 and those at multiples of 35, with their size, and
    removes nothing; train.sh's function says it in one line with the exact command; PRUNE_CHECKPOINTS=1
    removes exactly those. The newest 1 and 2 save points (what N_AVG <= 2 averages) and the curve's
    points are the same before and after; last, best and interval files stay."""
    import os
    import shlex
    import subprocess
    import sys

    from fairseq_attn_recipes.__main__ import main
    from fairseq_attn_recipes.recording import last_save_points
    run_dir = str(tmp_path / "run dir")  # a space: the printed command quotes it
    os.makedirs(run_dir)
    listed = {}

    def write(name, u, epoch):
        with open(os.path.join(run_dir, name), "wb") as f:
            f.write(b"x" * 100_000)
        st = os.stat(os.path.join(run_dir, name))
        listed[name] = {"num_updates": u, "epoch": epoch, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    for epoch in range(1, 13):
        write(f"checkpoint{epoch}.pt", 7 * epoch, epoch)
    for u in (75, 80):
        write(f"checkpoint_{u // 7 + 1}_{u}.pt", u, u // 7 + 1)
    write("checkpoint_last.pt", 84, 12)
    with open(os.path.join(run_dir, "checkpoint_best.pt"), "wb") as f:
        f.write(b"y")
    argv = ["data", "--keep-interval-updates", "2", "--keep-interval-updates-pattern=35", "--patience", "3"]
    run_record.save(run_dir, {"format": run_record.FORMAT, "checkpoints": dict(listed), "trainings": [{"argv": argv}]})
    before = {n: last_save_points(run_dir, n, dict(listed)) for n in (1, 2)}
    curve = {u: last_save_points(run_dir, 1, dict(listed), at_update=u) for u in (35, 70)}
    everything = set(os.listdir(run_dir))
    # a plain reference: the epoch files' updates newest first; those at multiples of 35 kept, then the newest 2
    updates = [7 * e for e in range(12, 0, -1)]
    kept = {u for u in updates if u % 35 == 0} | set([u for u in updates if u % 35][:2])
    assert kept == {84, 77, 70, 35}
    doomed = sorted(f"checkpoint{u // 7}.pt" for u in updates if u not in kept)
    expected = everything - set(doomed) - {"run.json"}

    main(["prune-epoch-checkpoints", "--run-dir", run_dir])  # shown, not removed
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines[:-1]) == sorted(f"would remove {os.path.join(run_dir, n)} (0.1 MB)" for n in doomed)
    assert lines[-1].startswith(f"{run_dir}: 8 epoch checkpoints (0.8 MB) could be removed")
    assert set(os.listdir(run_dir)) == everything

    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "lib")
    script = (f'. "{lib}/common.sh"; PATIENCE=3 SAVE_DIR={shlex.quote(run_dir)}\n'
              'train_checkpoints_pruned 0; echo --; PRUNE_CHECKPOINTS=1 train_checkpoints_pruned 0\n')
    p = subprocess.run(["bash", "-c", script], env=dict(os.environ, PYTHON=sys.executable), capture_output=True,
                       text=True)
    shown, removed = p.stdout.split("--\n")
    assert len(shown.splitlines()) == 1 and "nothing was removed" in shown, p.stdout + p.stderr
    command = shlex.split(shown.split("nothing was removed; to remove them: ")[1])
    assert command == ["python", "-m", "fairseq_attn_recipes", "prune-epoch-checkpoints", "--run-dir", run_dir, "--yes"]
    assert removed.startswith(f"{run_dir}: 8 epoch checkpoints removed (0.8 MB)") and len(removed.splitlines()) == 1
    assert set(os.listdir(run_dir)) - {"run.json"} == expected
    rec = run_record.load(run_dir)
    assert set(rec["checkpoints"]) == expected - {"checkpoint_best.pt"}
    assert {n: last_save_points(run_dir, n, rec["checkpoints"]) for n in (1, 2)} == before
    assert {u: last_save_points(run_dir, 1, rec["checkpoints"], at_update=u) for u in (35, 70)} == curve
    # the printed command again: nothing more to remove, and it says so
    main(command[3:])
    assert capsys.readouterr().out == f"{run_dir}: no epoch checkpoint to remove\n"
    assert set(os.listdir(run_dir)) - {"run.json"} == expected
    # a mistyped folder, or one without a run record: refused in one line, nothing touched
    for given, message in ((run_dir + "x", f"--run-dir {run_dir}x: no such folder"),
                           (str(tmp_path), f"--run-dir {tmp_path}: no run record (run.json), so its training's "
                                           "--keep-interval-updates is unknown")):
        with pytest.raises(SystemExit) as e:
            main(["prune-epoch-checkpoints", "--run-dir", given, "--yes"])
        assert e.value.code == 1 and capsys.readouterr().err == f"error: {message}\n"
    assert set(os.listdir(run_dir)) - {"run.json"} == expected


def test_a_curve_point_a_long_run_has_no_checkpoint_of_is_said_in_a_short_line():
    """300 save points: the refusal names the count, the first and the last updates, not all 300."""
    from fairseq_attn_recipes.recording import NoSavePoint, last_save_points, updates_listed
    listed = {f"checkpoint_1_{u}.pt": {"num_updates": u, "epoch": 1} for u in range(10, 3010, 10)}
    with pytest.raises(NoSavePoint) as e:
        last_save_points("run", 1, listed, at_update=15)
    assert str(e.value).startswith("run: no checkpoint of update 15 (saved: 300 save points, updates 10, 20, 30 ... "
                                   "2980, 2990, 3000): the run stopped before it") and len(str(e.value)) < 250
    few = [{"num_updates": u} for u in (6, 10, 12)]
    assert updates_listed(few) == "updates 6, 10, 12" and updates_listed([]) == "none"


def test_a_run_is_scored_on_its_own_evaluation_not_its_curve_point(tmp_path):
    """A run evaluated on the valid set and, with CURVE, its checkpoint of one update on the same set
    (curve/u<U>/valid, recorded first when the curve point was evaluated before the run's own): every
    table (Figure 2's points, Table 1's rows) reads the run's own evaluation, the average of its last
    checkpoints, whatever the order of its record."""
    from fairseq_attn_records import run_record
    from fairseq_attn_reports.runs import Run

    ref = tmp_path / "valid.ref"
    ref.write_text("a b c\n")
    evals = {}
    for subset, text in (("curve/u8/valid", "the curve point\n"), ("valid", "the run's own\n")):
        hyp = tmp_path / "run" / subset / "hyp.txt"
        hyp.parent.mkdir(parents=True)
        hyp.write_text(text)
        evals[subset] = {"hyp": f"{subset}/hyp.txt", "hyp_sha256": run_record.file_sha256(str(hyp)),
                         "ref_sha256": run_record.file_sha256(str(ref))}
    run_record.save(str(tmp_path / "run"), {"format": run_record.FORMAT, "evaluations": evals})
    hyp, ev = Run(str(tmp_path / "run")).hyp_for(str(ref))
    assert open(hyp).read() == "the run's own\n" and ev["subset"] == "valid"


def test_a_study_folder_is_the_study_of_its_settings(tmp_path, capsys):
    """lengths.sh's LENGTHS_DIR: a folder made before it recorded its settings is the study of the patience
    its runs were first trained with (the converge2 folder whose runs a CONVERGE=3 study continued);
    CONVERGE=3 there is refused in one line naming both, CONVERGE=2 accepted and then recorded."""
    from fairseq_attn_recipes.__main__ import main

    (tmp_path / "baseline").mkdir()
    run_record.save(str(tmp_path / "baseline"), {"format": run_record.FORMAT, "trainings": [
        {"argv": ["data", "--patience", "2"]}, {"argv": ["data", "--patience", "3"]}]})
    ask = ["study-folder", "--dir", str(tmp_path), "--set", "TRAIN_MAX_LEN=20"]
    with pytest.raises(SystemExit):
        main(ask + ["--set", "CONVERGE=3", "--write"])
    err = capsys.readouterr().err.strip()
    assert err == (f"error: LENGTHS_DIR={tmp_path} is the study of CONVERGE=2 ({tmp_path / 'baseline' / 'run.json'}: its "
                   f"first training's --patience); CONVERGE=3 is another study: give it its own folder (leave "
                   f"LENGTHS_DIR unset: each setting has its own), or CONVERGE=2")
    assert not (tmp_path / "study_settings.json").exists()
    main(ask + ["--set", "CONVERGE=2", "--write"])
    assert json.loads((tmp_path / "study_settings.json").read_text()) == {"settings": {"CONVERGE": "2",
                                                                                      "TRAIN_MAX_LEN": "20"}}
    with pytest.raises(SystemExit):
        main(["study-folder", "--dir", str(tmp_path), "--set", "TRAIN_MAX_LEN=30", "--set", "CONVERGE=2"])
    assert "is the study of TRAIN_MAX_LEN=20" in capsys.readouterr().err
