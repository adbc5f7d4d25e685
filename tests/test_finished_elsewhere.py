"""A run copied or moved (with or without its WORK) and asked again for the training it finished:
train.sh's finished-before answers from the run record, with no fairseq started, and the record
takes the new place as the training step's skip would (fast cases; the recipes end to end:
test_recipe_refusals.py's moved run, test_recipes.py's copy)."""

import json
import os
import shutil
import subprocess
import sys

from fairseq_attn_records import run_record

BLOCK = "import sys\nsys.modules['torch'] = None\n"


def finished_before(run, argv, blocked=False):
    """Whether finished-before says so (exit 0; in a process where torch cannot be imported with
    ``blocked``, else in this one)."""
    args = ["finished-before", "--save-dir", str(run), "--", *argv]
    if blocked:
        script = BLOCK + f"from fairseq_attn_recipes.__main__ import main\nmain({args!r})\n"
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        assert p.returncode in (0, 1), p.stderr
        return p.returncode == 0
    from fairseq_attn_recipes.__main__ import main
    try:
        main(args)
    except SystemExit as e:
        assert e.code in (0, 1)
        return e.code == 0
    raise AssertionError("finished-before exits 0 or 1")


def a_finished_run(work):
    """WORK/data/d1 (its prepare.json) and WORK/run trained to --max-update 4: two checkpoint files,
    listed in its record as the training step lists them (size, mtime, update)."""
    data, run = work / "data" / "d1", work / "run"
    data.mkdir(parents=True)
    run.mkdir()
    prep = {"data_id": "d1" * 6, "settings": {"SRC": "en"}, "train_pairs": {"clean": 3}, "inputs": None}
    (data / "prepare.json").write_text(json.dumps(prep))
    checkpoints = {}
    for name, updates in (("checkpoint2.pt", 4), ("checkpoint_last.pt", 4)):
        (run / name).write_bytes(b"x" * updates)
        st = os.stat(run / name)
        checkpoints[name] = {"num_updates": updates, "epoch": 2, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    argv = [str(data), "--arch", "transformer_attn_wmt_en_de", "--lr", "5e-4", "--max-update", "4",
            "--save-dir", str(run), "--tensorboard-logdir", str(run / "tensorboard")]
    run_record.save(str(run), {
        "format": run_record.FORMAT, "run_id": "r" * 32, "run_dir": str(run), "num_updates": 4,
        "checkpoints": checkpoints, "evaluations": {}, "data": dict(prep, path=str(data)),
        "trainings": [{"max_update": 4, "from_update": 0, "to_update": 4, "finished": "2026-11-29T00:00:00",
                       "argv": argv}]})
    return run, argv


def test_a_copied_run_is_finished_before_without_fairseq_and_takes_its_new_place(tmp_path):
    run, argv = a_finished_run(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # the WORK copied (files' times kept)
    copy = tmp_path / "b" / "run"
    moved = [a.replace(str(tmp_path / "a"), str(tmp_path / "b")) for a in argv]
    original = run_record.load(str(run))
    assert not run_record.finished_before(str(copy), moved)  # these very arguments: not at the copy
    # what it trains changed, other data, or a checkpoint file not the one listed: left to the training step
    changed = moved[:4] + ["1e-3"] + moved[5:]
    assert not finished_before(copy, changed)
    prep = tmp_path / "b" / "data" / "d1" / "prepare.json"
    kept = prep.read_text()
    prep.write_text(kept.replace("d1d1", "d2d2"))
    assert not finished_before(copy, moved)
    prep.write_text(kept)
    st = os.stat(copy / "checkpoint2.pt")
    os.utime(copy / "checkpoint2.pt", ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert not finished_before(copy, moved)
    os.utime(copy / "checkpoint2.pt", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert run_record.load(str(copy)) == original  # nothing written by any of them
    # the same training at the new place: finished, where torch cannot be imported
    assert finished_before(copy, moved, blocked=True)
    rec = run_record.load(str(copy))
    assert rec["data"]["path"] == os.path.realpath(tmp_path / "b" / "data" / "d1")
    assert rec["trainings"][-1]["argv"] == moved and rec["run_dir"] == str(run)  # trained in the original folder
    assert {k: v for k, v in rec.items() if k not in ("data", "trainings")} == \
        {k: v for k, v in original.items() if k not in ("data", "trainings")}
    assert run_record.finished_before(str(copy), moved)  # the next ask: these very arguments
    assert run_record.load(str(run)) == original  # the original run untouched
