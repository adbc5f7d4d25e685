"""Recipe steps that start neither torch nor fairseq where they need no model: the average a
run's evaluation made before, reused for the next subset (the length study evaluates each run
once per k), reads the update numbers from the run record, not from the checkpoints. Proven in
a process where torch and fairseq cannot be imported. Subprocesses, so that other tests keep torch."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from test_recipes import steps_in_process  # noqa: E402
from test_run_records import _fairseq_save_points  # noqa: E402

from fairseq_attn_records import run_record  # noqa: E402
from fairseq_attn_recipes.recording import scan_checkpoints  # noqa: E402

BLOCK = "import sys\nfor name in ('torch', 'fairseq'):\n    sys.modules[name] = None\n"


def steps_without_torch(*args) -> subprocess.CompletedProcess:
    """``python -m fairseq_attn_recipes ARGS`` in a process where torch and fairseq cannot be imported."""
    script = BLOCK + "from fairseq_attn_recipes.__main__ import main\n" + f"main({list(args)!r})\n"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)


def _run_with_record(tmp_path):
    """A run folder of fairseq's save points (6, 10, 12, 18, 20, 24, 30) with its run record's
    checkpoints, as the training step leaves them."""
    run = tmp_path / "run"
    run.mkdir()
    _fairseq_save_points(run, per_epoch=6, every=10, max_update=30)
    run_record.save(str(run), {"format": run_record.FORMAT, "checkpoints": scan_checkpoints(str(run))})
    return str(run)


def test_an_average_made_before_is_reused_without_torch_with_the_same_record(tmp_path):
    run = _run_with_record(tmp_path)
    out = os.path.join(run, "averaged_last3.pt")
    first = steps_in_process("average", run, "--n", "3", "--output", out, "--record", str(tmp_path / "first.json"))
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("averaged: 3 checkpoints")
    again = steps_without_torch("average", run, "--n", "3", "--output", out, "--record", str(tmp_path / "again.json"))
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("the average made before from the same files, reused: 3 checkpoints: "
                                   "checkpoint5.pt (update 30) checkpoint4.pt (update 24) checkpoint_4_20.pt (update 20)")
    assert (tmp_path / "again.json").read_text() == (tmp_path / "first.json").read_text()


def test_a_checkpoint_changed_since_the_record_is_read_from_its_file(tmp_path):
    run = _run_with_record(tmp_path)
    rec = run_record.load(run)
    # the record's entry of checkpoint5.pt no longer matches the file (another size): its own
    # update number (30) counts, not the record's
    rec["checkpoints"]["checkpoint5.pt"].update(num_updates=99, bytes=1)
    run_record.save(run, rec)
    p = steps_in_process("average", run, "--n", "2", "--output", str(tmp_path / "avg.pt"),
                         "--record", str(tmp_path / "avg.json"))
    assert p.returncode == 0, p.stderr
    averaged = json.loads((tmp_path / "avg.json").read_text())["averaged"]
    assert [(a["file"], a["num_updates"]) for a in averaged] == [("checkpoint5.pt", 30), ("checkpoint4.pt", 24)]
    # the record cannot say it without reading the changed file: refused where torch cannot be imported
    blocked = steps_without_torch("average", run, "--n", "2", "--output", str(tmp_path / "avg2.pt"))
    assert blocked.returncode != 0
