"""evaluate.sh's generate step (``fairseq_command generate --average``) averages the checkpoints
before fairseq is imported: a run with fewer save points than N is refused in one line, with no
torch or fairseq started and its output files removed (fast; end to end: test_recipe_integrity.py's
big run)."""

import os
import subprocess
import sys

from fairseq_attn_records import run_record


def test_fewer_save_points_than_n_are_refused_before_fairseq_is_imported(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    checkpoints = {}
    for name, updates in (("checkpoint1.pt", 2), ("checkpoint2.pt", 4), ("checkpoint_last.pt", 4)):
        (run / name).write_bytes(b"x" * updates)  # listed unchanged in the record: never read
        st = os.stat(run / name)
        checkpoints[name] = {"num_updates": updates, "epoch": updates // 2, "bytes": st.st_size,
                             "mtime_ns": st.st_mtime_ns}
    run_record.save(str(run), {"format": run_record.FORMAT, "checkpoints": checkpoints})
    out, err = tmp_path / "generate.out", tmp_path / "generate.err"
    argv = ["generate", "--average", str(run), "--n", "3", "--output", str(tmp_path / "avg.pt"),
            "--stdout", str(out), "--stderr", str(err), "--", str(tmp_path / "data"), "--path", str(tmp_path / "avg.pt")]
    script = ("import sys\nfor name in ('torch', 'fairseq'):\n    sys.modules[name] = None\n"
              f"from fairseq_attn_recipes.fairseq_command import main\nsys.exit(main({argv!r}))\n")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    assert p.stderr == (f"error: {run}: 2 saved checkpoints (updates 2, 4) but N_AVG=3 are to be averaged; train "
                        "longer (or keep more with --keep-interval-updates), or set N_AVG to at most 2 and report it\n")
    assert not out.exists() and not err.exists() and not (tmp_path / "avg.pt").exists()
