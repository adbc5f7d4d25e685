"""fairseq-attn-results --align: the AER column and its paired tests, against plain loops."""

import json
import random

import pytest
import torch

from fairseq_attn_reports.cli import results as results_cli
from fairseq_attn_records import alignment as A
from fairseq_attn_records import metrics as M
from fairseq_attn_records import run_record
from fairseq_attn_records.toy_corpus import make_corpus


def _aer(pred, gold):
    hit = n_pred = n_gold = 0
    for p, g in zip(pred, gold):
        hit += sum(1 for link in p if link in g)
        n_pred += len(p)
        n_gold += len(g)
    return 100 * (1 - 2 * hit / (n_pred + n_gold))


def _noisy(gold, n_src, rate, seed):
    rng = random.Random(seed)
    return [{(i if rng.random() > rate else rng.randrange(n), j) for i, j in g} for g, n in zip(gold, n_src)]


@pytest.fixture()
def runs(tmp_path):
    pairs = make_corpus(80, seed=5)
    src, ref = tmp_path / "test.src", tmp_path / "test.tgt"
    src.write_text("\n".join(s for s, _ in pairs) + "\n")
    ref.write_text("\n".join(t for _, t in pairs) + "\n")
    n_src = [len(s.split()) for s, _ in pairs]
    gold = [{(min(j, n - 1), j) for j in range(len(t.split()))} for (_, t), n in zip(pairs, n_src)]
    gold_path = tmp_path / "test.align"
    A.write_pharaoh(str(gold_path), gold)
    preds = {"base": _noisy(gold, n_src, 0.5, 1), "better": _noisy(gold, n_src, 0.1, 2),
             "copy": _noisy(gold, n_src, 0.5, 1)}
    dirs = []
    for name, pred in preds.items():
        d = tmp_path / name
        (d / "align" / "test").mkdir(parents=True)
        (d / "train.log").write_text("")
        (d / "hyp.txt").write_text(ref.read_text())
        A.write_pharaoh(str(d / "align" / "test" / "alignments.shift.1.txt"), pred)
        (d / "align" / "aer.json").write_text(json.dumps({
            "chosen": {"attention": {"name": "shift.1"}},
            "gold_files": {"test": {"path": str(gold_path), "sha256": run_record.file_sha256(str(gold_path)),
                                    "source": str(src), "reference_sha256": run_record.file_sha256(str(ref))}}}))
        dirs.append(str(d))
    return {"ref": str(ref), "dirs": dirs, "gold": gold, "preds": preds, "tmp": tmp_path}


def test_aer_column_equals_plain_loops(runs, tmp_path, capsys):
    out = tmp_path / "t.json"
    assert results_cli.main(["--ref", runs["ref"], *runs["dirs"], "--align", "--bs-samples", "200",
                             "--ar-trials", "200", "--json", str(out)]) == 0
    md = capsys.readouterr().out
    assert "| AER | Δ |" in md and "AER: alignment error rate" in md
    table = json.loads(out.read_text())
    gold, preds = runs["gold"], runs["preds"]
    by = {r["system"]: r for r in table["rows"]}
    for name, pred in preds.items():
        torch.testing.assert_close(by[name]["scores"]["aer"]["score"], _aer(pred, gold))
    assert by["copy"]["scores"]["aer"]["p_bootstrap"] == 1.0 and by["copy"]["marks"]["aer"] == ""
    assert by["better"]["deltas"]["aer"] < 0 and by["better"]["marks"]["aer"] == "**"
    # the bootstrap p-value by plain loops over sacreBLEU's resampling indices
    idx = M.bootstrap_indices(len(gold), 200)
    real = abs(_aer(preds["better"], gold) - _aer(preds["base"], gold))
    diffs = [abs(_aer([preds["better"][k] for k in row], [gold[k] for k in row])
                 - _aer([preds["base"][k] for k in row], [gold[k] for k in row])) for row in idx]
    mean = sum(diffs) / len(diffs)
    want_p = (sum(1 for d in diffs if d - mean > real) + 1) / (len(diffs) + 1)
    torch.testing.assert_close(by["better"]["scores"]["aer"]["p_bootstrap"], want_p)


def test_align_refuses_runs_without_alignment_or_with_another_gold(runs, capsys):
    other = runs["tmp"] / "other.align"
    A.write_pharaoh(str(other), runs["gold"][:-1] + [set()])
    rec = json.loads((runs["tmp"] / "copy" / "align" / "aer.json").read_text())
    rec["gold_files"]["test"].update(path=str(other), sha256=run_record.file_sha256(str(other)))
    (runs["tmp"] / "copy" / "align" / "aer.json").write_text(json.dumps(rec))
    assert results_cli.main(["--ref", runs["ref"], *runs["dirs"], "--align"]) == 1
    err = capsys.readouterr().err.strip()
    assert "different gold files" in err and "\n" not in err
    (runs["tmp"] / "copy" / "align" / "aer.json").unlink()
    assert results_cli.main(["--ref", runs["ref"], *runs["dirs"], "--align"]) == 1
    err = capsys.readouterr().err.strip()
    assert "has no" in err and "run fairseq-attn-align" in err and "\n" not in err
