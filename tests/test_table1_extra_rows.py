"""Table 1 of the CSAN paper with the position baselines as extra rows (rope, alibi, t5bias):
listed, and rendered when their runs are present."""

import json


from run_records import write_record


def test_table1_extra_rows_listed_and_rendered_when_present(tmp_path, capsys):
    from fairseq_attn_records import run_record
    from fairseq_attn_reports.cli import paper
    from fairseq_attn_reports import table1
    from fairseq_attn_records.toy_corpus import make_corpus

    assert [r.key for r in table1.resolve_rows("all")] == [r.key for r in table1.ROWS]
    rows = table1.resolve_rows("t5bias,all,rope")
    assert [r.key for r in rows] == [r.key for r in table1.ROWS] + ["rope", "t5bias"]
    assert [r.label for r in table1.EXTRA_ROWS] == [
        "+ RoPE Su et al. (2021)", "+ ALiBi Press et al. (2022)", "+ T5 bias Raffel et al. (2020)"]

    refs = [t for _, t in make_corpus(60, seed=5)]
    (tmp_path / "ref").write_text("\n".join(refs) + "\n")
    log = ("x | INFO | fairseq_cli.train | num. shared model params: {p:,} (num. trained: {p:,})\n"
           'x | INFO | train | {{"epoch": 1, "train_loss": "7.0", "train_wps": "100", "train_ups": "2.0", "train_num_updates": "10"}}\n')
    for key, params in (("baseline", 41_500), ("rel_pos", 42_000), ("alibi", 41_500)):
        d = tmp_path / "runs" / key
        write_record(d, table1.ROW_BY_KEY[key].arch)
        (d / "train.log").write_text(log.format(p=params))
        (d / "hyp.txt").write_text("\n".join(refs) + "\n")
    # alibi as the recipes keep a run: its translations in test/hyp.txt, named by the run record's evaluation
    alibi = tmp_path / "runs" / "alibi"
    (alibi / "test").mkdir()
    (alibi / "hyp.txt").rename(alibi / "test" / "hyp.txt")
    run_record.record_evaluation(str(alibi), {"subset": "test", "hyp": str(alibi / "test" / "hyp.txt"),
                                              "ref": str(tmp_path / "ref"), "scores": {}})
    out = tmp_path / "t.json"
    spec = "baseline,rel_pos"  # (--rows all would need a run of every paper row)
    assert paper.main(["table1", "--ref", str(tmp_path / "ref"), "--runs-dir", str(tmp_path / "runs"),
                       "--rows", spec + ",alibi", "--no-base-size", "--ar-trials", "100",
                       "--bs-samples", "100", "--json", str(out), "--md", str(tmp_path / "t.md")]) == 0
    got = json.loads(out.read_text())["rows"]
    assert [r["key"] for r in got] == ["baseline", "rel_pos", "alibi"]
    assert got[2]["paper"] == {"params": None, "speed": None, "bleu": None, "delta": None}
    line = (tmp_path / "t.md").read_text().splitlines()[4]
    assert line.startswith("| + ALiBi Press et al. (2022) | +0.0M |") and line.endswith("| - | - | - | - |")
    # a run trained but not evaluated on this reference is left out, said on stderr (t5bias)
    (tmp_path / "runs" / "t5bias").mkdir()
    (tmp_path / "runs" / "t5bias" / "train.log").write_text(log.format(p=41_500))
    capsys.readouterr()
    present = table1.with_present_extras(table1.resolve_rows(spec), str(tmp_path / "runs"), str(tmp_path / "ref"))
    assert [r.key for r in present] == ["baseline", "rel_pos", "alibi"]
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith("Table 1: the extra row t5bias left out: run ") and "hyp.txt is missing" in said[0]
