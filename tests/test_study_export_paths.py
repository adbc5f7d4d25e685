"""The re-check command study-export stores names the table from the root of the repository it is
committed to, wherever study-export ran; outside a repository, from the table's own folder."""

import os

from fairseq_attn_reports.study_bundle import RESCORE_COMMAND, recheck_command


def test_the_recheck_command_works_from_the_repository_root_whatever_the_current_folder(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)  # a clone (a worktree has a .git file: the same)
    (repo / "docs" / "results").mkdir(parents=True)
    for cwd in (repo, repo / "docs", tmp_path):
        monkeypatch.chdir(cwd)
        out = os.path.relpath(repo / "docs" / "results")  # as the user typed --to, from there
        assert recheck_command(out, "study") == f"{RESCORE_COMMAND} docs/results/study.json", cwd
    (repo / ".git").rmdir()
    (repo / ".git").write_text("gitdir: /elsewhere\n")
    assert recheck_command(str(repo / "docs" / "results"), "study") == f"{RESCORE_COMMAND} docs/results/study.json"
    # no repository above it: from the table's own folder, no absolute path
    plain = tmp_path / "plain" / "results"
    plain.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert recheck_command(str(plain), "study") == f"{RESCORE_COMMAND} study.json (in the folder of study.json)"


def test_a_study_step_told_so_does_not_repeat_how_to_add_comet(tmp_path, monkeypatch, capsys):
    """The reporting commands without COMET_MODEL say how to add COMET; --no-comet-hint (each of a study's
    steps: the study says it once) does not."""
    from fairseq_attn_reports.cli import significance
    monkeypatch.delenv("COMET_MODEL", raising=False)
    ref, base, good = tmp_path / "ref.txt", tmp_path / "base.txt", tmp_path / "good.txt"
    ref.write_text("a b c d\ne f g h\n")
    base.write_text("a b c x\ne f y h\n")
    good.write_text("a b c d\ne f g x\n")
    for extra, said in (([], 1), (["--no-comet-hint"], 0)):
        assert significance.main([str(ref), str(base), str(good), "--bs-samples", "10", "--ar-trials", "10", *extra]) == 0
        assert capsys.readouterr().err.count("COMET left out") == said, extra
