"""``fairseq-attn-paper plot-table1``: a finished Table 1 drawn from its JSON. The points are checked
against the table's own cells, read plainly here; the PNG is checked to be written and whole."""

import json

from fairseq_attn_reports import figures
from fairseq_attn_reports.cli import paper


def table(tmp_path):
    rows = [{"key": "baseline", "system": "baseline", "bleu_per_seed": [13.5, 13.9, 13.4], "mark": "",
             "pairs": None, "pairs_marked": None},
            {"key": "cnns", "system": "cnns", "bleu_per_seed": [15.2, 15.0, 15.1], "mark": "**",
             "pairs": [{}] * 9, "pairs_marked": 9},
            {"key": "csan2d", "system": "csan2d", "bleu_per_seed": [14.1, 14.4, 14.5], "mark": "",
             "pairs": [{}] * 9, "pairs_marked": 4},
            {"key": "my_row", "system": "my_row", "bleu": 12.25, "mark": ""}]  # one seed: results.py's row
    path = tmp_path / "table1.json"
    path.write_text(json.dumps({"ref": "ref.txt", "baseline": "baseline", "rows": rows[1:3] + rows[:1] + rows[3:]}))
    return path, rows  # the file lists the baseline third: the plot puts it first


def test_plot_table1_draws_each_rows_seeds_and_marks(tmp_path, capsys):
    path, rows = table(tmp_path)
    points = figures.table1_points(json.loads(path.read_text()))
    assert [p["name"] for p in points] == ["Transformer-Base", "Cnns", "2D-CSans", "my_row"]
    for p, r in zip(points, rows):
        seeds = r.get("bleu_per_seed", [r.get("bleu")])
        total = 0.0
        for b in seeds:
            total += b
        assert p["bleu_per_seed"] == seeds and abs(p["bleu"] - total / len(seeds)) < 1e-12
        assert p["mark"] == r["mark"]
    assert [(p["pairs_marked"], p["pairs"]) for p in points] == [(None, None), (9, 9), (4, 9), (None, None)]

    png = tmp_path / "plot.png"
    assert paper.main(["plot-table1", str(path), "--png", str(png)]) == 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[-8:-4] == b"IEND"
    said = capsys.readouterr().out.splitlines()
    assert said[1] == "Cnns: BLEU 15.10 (15.20, 15.00, 15.10) **" and said[3] == "my_row: BLEU 12.25 (12.25) "


def test_plot_table1_refuses_bad_input_in_one_line(tmp_path, capsys):
    """Another JSON, a missing table, a PNG in a missing folder: one line naming the file, nothing written."""
    other = tmp_path / "figure2.json"
    other.write_text(json.dumps({"ref": "ref.txt", "windows": []}))
    good, _ = table(tmp_path)
    png = tmp_path / "plot.png"
    for given, out, says in ((other, png, f"{other}: not a JSON of 'fairseq-attn-paper table1 --json' (no rows)"),
                             (tmp_path / "no such.json", png, f"{tmp_path / 'no such.json'}: no such table"),
                             (good, tmp_path / "nodir" / "p.png",
                              f"{tmp_path / 'nodir' / 'p.png'}: folder {tmp_path / 'nodir'} does not exist")):
        assert paper.main(["plot-table1", str(given), "--png", str(out)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"fairseq-attn-paper plot-table1: error: {says}") and err.count("\n") == 1
        assert not png.exists() and not (tmp_path / "nodir").exists()
