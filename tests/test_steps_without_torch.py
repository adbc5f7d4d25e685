"""Recipe steps that start neither torch nor fairseq where they need no model: the average a
run's evaluation made before, reused for the next subset (the length study evaluates each run
once per k), reads the update numbers from the run record, not from the checkpoints; Table 1's
rows (``fairseq-attn-paper rows``, table1.sh's first step) are checked against the architecture
names kept while the code is unchanged. Proven in a process where torch and fairseq cannot be
imported. Subprocesses, so that other tests keep torch."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from test_recipes import steps_in_process  # noqa: E402
from test_run_records import _fairseq_save_points  # noqa: E402

from fairseq_attn_records import run_record  # noqa: E402
from fairseq_attn_recipes.recording import scan_checkpoints  # noqa: E402



def block(*names) -> str:
    return f"import sys\nfor name in {names!r}:\n    sys.modules[name] = None\n"


def steps_without_torch(*args, module="fairseq_attn_recipes.__main__", blocked=("torch", "fairseq"),
                        env=None) -> subprocess.CompletedProcess:
    """``main(ARGS)`` of ``module`` (by default ``python -m fairseq_attn_recipes ARGS``) in a process
    where ``blocked`` cannot be imported."""
    script = block(*blocked) + f"from {module} import main\n" + f"sys.exit(main({list(args)!r}))\n"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)


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
    # the changed file's update read from its plain state where torch cannot be imported (the record's
    # entry no help); averaging it needs torch: refused there
    script = block("torch", "fairseq") + ("import json\nfrom fairseq_attn_records import run_record\n"
                                          "from fairseq_attn_recipes.recording import scan_checkpoints\n"
                                          f"print(json.dumps(scan_checkpoints({run!r}, run_record.load({run!r})['checkpoints'])))\n")
    read = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert read.returncode == 0, read.stderr
    assert {n: c["num_updates"] for n, c in json.loads(read.stdout).items()} == \
        {n: c["num_updates"] for n, c in scan_checkpoints(run).items()} and "checkpoint5.pt" in read.stdout
    assert json.loads(read.stdout)["checkpoint5.pt"]["num_updates"] == 30
    blocked = steps_without_torch("average", run, "--n", "2", "--output", str(tmp_path / "avg2.pt"))
    assert blocked.returncode != 0


def test_table1_rows_are_checked_without_torch_once_the_names_are_kept(tmp_path, monkeypatch, capsys):
    from fairseq_attn_reports.cli import paper

    # a cache of its own: the first run reads the registry (its main in this process, which has torch
    # and fairseq loaded already: a new interpreter would spend seconds starting them)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    capsys.readouterr()
    assert paper.main(["rows", "--rows", "csan2d,baseline"]) == 0
    first = capsys.readouterr()
    assert first.out.splitlines() == ["baseline transformer_attn_wmt_en_de", "csan2d transformer_csan2d_wmt_en_de"]
    assert os.listdir(tmp_path / "fairseq_attn_plugins"), "the first run kept no names"
    env = dict(os.environ)
    # torch blocked (fairseq imports it, so fairseq cannot start either); fairseq itself stays findable:
    # the names are kept under a key made from its installed files
    again = steps_without_torch("rows", "--rows", "csan2d,baseline", module="fairseq_attn_reports.cli.paper",
                                blocked=("torch",), env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.out
