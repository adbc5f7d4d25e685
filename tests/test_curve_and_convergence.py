"""CONVERGE's pieces (lengths.sh; fairseq's --patience): the patience counter read back from a run's log
for a resumed training, and a run stopped by it known as trained."""

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


def test_curve_and_converge_are_refused_in_one_line_naming_them():
    """lengths.sh's check of CURVE and CONVERGE (before any step; the e2e study shows one refusal there),
    against the cap MAX_UPDATE and the save interval: each bad value one line, in one shell."""
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
        f'( {case} lengths_check_curve transformer_attn_wmt_en_de; echo "ok $KEEP_INTERVAL_UPDATES_PATTERN '
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
