"""The results and seeds tables name what each run trained from its run record, never from its
folder: a relpos run in a folder called ``my_csan_run`` shows ``transformer_relpos_wmt_en_de:
relpos``; a run without a record shows ``?`` and the legend says its architecture is unknown."""

import json
import os
import shutil
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import trained_models  # noqa: E402
from test_demo import TRAIN_LOG  # noqa: E402

from fairseq_attn_core import SelfAttention  # noqa: E402
from fairseq_attn_core.flags import pieces_summary  # noqa: E402
from fairseq_attn_plugins.checkpoint_identity import identity_of_checkpoint  # noqa: E402
from fairseq_attn_reports.cli import results as results_cli  # noqa: E402
from fairseq_attn_plugins.loading import load_model_ensemble_and_task  # noqa: E402
from fairseq_attn_reports import seeds  # noqa: E402
from fairseq_attn_records.toy_corpus import make_corpus  # noqa: E402
from fairseq_attn_recipes.recording import scan_checkpoints  # noqa: E402
from fairseq_attn_records import run_record  # noqa: E402

RELPOS = "transformer_relpos_wmt_en_de"


def _run_dir(path, refs, keep, checkpoint=None):
    """A finished run: train.log and hyp.txt; with ``checkpoint``, that real checkpoint and the
    run record the recipes write for it (identity read from the checkpoint's configuration)."""
    path.mkdir()
    (path / "train.log").write_text(TRAIN_LOG)
    hyps = [r if (i * 37 % 100) / 100 < keep else " ".join(r.split()[::-1]) for i, r in enumerate(refs)]
    (path / "hyp.txt").write_text("\n".join(hyps) + "\n")
    if checkpoint:
        shutil.copy(checkpoint, path / "checkpoint_last.pt")
        rec = identity_of_checkpoint(str(path / "checkpoint_last.pt"))
        rec.pop("max_update")
        rec.update(format=run_record.FORMAT, run_id=uuid.uuid4().hex, trainings=[], evaluations={},
                   checkpoints=scan_checkpoints(str(path)), data={"path": "/data/toy", "data_id": "toy"})
        rec["num_updates"] = rec["checkpoints"]["checkpoint_last.pt"]["num_updates"]
        run_record.save(str(path), rec)
    return str(path)


@pytest.fixture(scope="module")
def relpos_checkpoint():
    return trained_models.trained("relpos")


@pytest.fixture
def refs(tmp_path):
    lines = [t for _, t in make_corpus(30, seed=3)]
    (tmp_path / "test.ref").write_text("\n".join(lines) + "\n")
    return lines


def _pieces_the_model_builds(checkpoint):
    """The active pieces per layer of the model fairseq builds from the checkpoint (the line the
    model build logs), found on the modules themselves."""
    models, _, _ = load_model_ensemble_and_task([checkpoint], {"data": trained_models.data_dir()})
    return pieces_summary([m for m in models[0].modules() if isinstance(m, SelfAttention)])


def test_a_misleading_folder_name_shows_the_recorded_architecture(tmp_path, refs, relpos_checkpoint, capsys):
    old = _run_dir(tmp_path / "old_run", refs, 0.5)
    mine = _run_dir(tmp_path / "my_csan_run", refs, 0.8, relpos_checkpoint)
    out_json = tmp_path / "t.json"
    assert results_cli.main(["--ref", str(tmp_path / "test.ref"), old, mine, "--json", str(out_json),
                             "--bs-samples", "20", "--ar-trials", "20"]) == 0
    md = capsys.readouterr().out
    head = md.splitlines()[0]
    assert head.startswith("| # | System | Architecture: pieces | #Params |"), head
    assert "| 1 | old_run | ? | 208.6K |" in md
    # † : the record's 80 updates against the older run's log's 20 (trained differently)
    assert f"| 2 | my_csan_run † | {RELPOS}: relpos | 208.6K |" in md
    assert ("Architecture: pieces: the architecture and active attention pieces each run's record (run.json) "
            "says it trained, whatever its folder is called (per layer in --json); ?: no run record (an older "
            "run folder, or a translations file), so the architecture is unknown.") in md
    rows = json.loads(out_json.read_text())["rows"]
    assert rows[0]["trained_model"] is None
    assert rows[1]["trained_model"] == {"arch": RELPOS, "pieces": ["relpos"],
                                        "pieces_per_layer": _pieces_the_model_builds(relpos_checkpoint)}
    # the model's own layers, written out: 3 encoder and 2 decoder layers (tests' TINY), relpos on all
    assert rows[1]["trained_model"]["pieces_per_layer"] == "encoder 0-2: relpos; decoder 0-1: relpos"


def test_every_row_known_has_no_unknown_legend(tmp_path, refs, relpos_checkpoint):
    from fairseq_attn_reports import results

    a = _run_dir(tmp_path / "csan_a", refs, 0.5, relpos_checkpoint)
    b = _run_dir(tmp_path / "csan_b", refs, 0.8, relpos_checkpoint)
    md = results.format_markdown(results.collect([("a", a), ("b", b)], str(tmp_path / "test.ref"),
                                                 bs_samples=20, ar_trials=20))
    assert f"| 1 | a | {RELPOS}: relpos |" in md and f"| 2 | b | {RELPOS}: relpos |" in md
    assert "Architecture: pieces: the architecture" in md and "architecture is unknown" not in md


def test_seeds_table_shows_the_recorded_architecture(tmp_path, refs, relpos_checkpoint):
    runs = [_run_dir(tmp_path / "old_seed1", refs, 0.5), _run_dir(tmp_path / "old_seed2", refs, 0.55),
            _run_dir(tmp_path / "my_csan_run_seed1", refs, 0.8, relpos_checkpoint)]
    groups = seeds.group_runs(seeds.default_names(runs), runs)
    table = seeds.collect_seeds(groups, str(tmp_path / "test.ref"), bs_samples=20, ar_trials=20)
    md = seeds.format_markdown(table)
    assert md.splitlines()[0].startswith("| # | System | Architecture: pieces | Seeds | #Params |")
    assert "| 1 | old | ? | 2 |" in md and f"| 2 | my_csan_run † | {RELPOS}: relpos | 1 |" in md
    assert "?: no run record (an older run folder, or a translations file), so the architecture is unknown." in md
    assert [r["trained_model"] and r["trained_model"]["pieces"] for r in table["rows"]] == [None, ["relpos"]]


def test_the_model_column_is_read_without_torch_once_the_declarations_are_kept(tmp_path, refs, relpos_checkpoint,
                                                                                monkeypatch):
    """The pieces a record's model flags make active and the piece flags are kept per code
    (:mod:`fairseq_attn_reports.declared_pieces`): a second results command, where torch cannot be
    imported (torch blocked: fairseq imports it; fairseq stays findable, the cache's key
    names its files), writes the same table; the kept answer is the declarations' own."""
    import subprocess

    from fairseq_attn_core import catalogue
    from fairseq_attn_core.flags import piece_flags
    from fairseq_attn_reports import declared_pieces

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # a cache of its own: read from the declarations
    old = _run_dir(tmp_path / "old_run", refs, 0.5)
    mine = _run_dir(tmp_path / "my_csan_run", refs, 0.8, relpos_checkpoint)
    args = ["--ref", str(tmp_path / "test.ref"), old, mine, "--bs-samples", "20", "--ar-trials", "20"]
    assert results_cli.main(args + ["--json", str(tmp_path / "first.json")]) == 0
    model = dict(run_record.load(mine)["model"], arch=RELPOS)
    assert declared_pieces.model_pieces(model) == catalogue.model_pieces(model)
    assert declared_pieces.piece_flag_names() == sorted(piece_flags())
    script = ("import sys\nsys.modules['torch'] = None\n"
              "from fairseq_attn_reports.cli.results import main\n"
              f"sys.exit(main({args + ['--json', str(tmp_path / 'again.json')]!r}))\n")
    again = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    first, second = (json.loads((tmp_path / f).read_text()) for f in ("first.json", "again.json"))
    assert second["rows"] == first["rows"]
    assert second["rows"][1]["trained_model"]["pieces_per_layer"] == "encoder 0-2: relpos; decoder 0-1: relpos"
