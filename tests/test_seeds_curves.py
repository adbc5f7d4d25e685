"""Several seeds and learning curves in fairseq-attn-results.

The logs in tests/data/ are real fairseq-train output (--log-format json, a 1-layer
model on the toy corpus): ``fairseq_json_bleu.train.log`` with --eval-bleu,
``fairseq_json_resumed.train.log`` stopped at 6 updates and resumed to 12;
``fairseq_json_mid_epoch_valid.train.log`` as the demo logs (``--log-interval 1000``: no
``train_inner``; ``--save-interval-updates 3``: validations mid-epoch and at each epoch's end;
a 3+2-layer model, 4 epochs of 5 updates; paths replaced by placeholders)."""

import json
import os
import shutil

import pytest
import sacrebleu
import torch

from fairseq_attn_reports.cli import results
from fairseq_attn_reports import curves, seeds
from fairseq_attn_reports.significance import paired_tests, significance_mark
from fairseq_attn_records.toy_corpus import make_corpus
from plain_stats import plain_mean_std

DATA = os.path.join(os.path.dirname(__file__), "data")
BLEU_LOG = os.path.join(DATA, "fairseq_json_bleu.train.log")
RESUMED_LOG = os.path.join(DATA, "fairseq_json_resumed.train.log")
MID_EPOCH_LOG = os.path.join(DATA, "fairseq_json_mid_epoch_valid.train.log")


# ------------------------------------------------------------------ plain references
def plain_records(path, kind):
    """Every json record of one kind, with the wall offset of the process that wrote it."""
    out, offset, last = [], 0.0, 0.0
    for line in open(path, encoding="utf-8"):
        if "Loaded checkpoint" in line:
            offset = last
        tag = f"| {kind} | "
        if tag in line:
            st = json.loads(line.split(tag, 1)[1])
            out.append((st, offset))
        for k, key in (("train_inner", "wall"), ("train", "train_wall")):
            if f"| {k} | " in line:
                last = offset + float(json.loads(line.split(f"| {k} | ", 1)[1])[key])
    return out


def plain_validation_times(path):
    """[(update, elapsed seconds)] of every validation, written plainly from the log: the
    training records' times by update (plus 0 s at update 0, and the time so far at a resume's
    update), knots where the latest time moves on, a validation at a knot's update at its latest
    time, between knots from the earlier's latest to the later's earliest (its latest if that is
    no later), after the last knot at the last two knots' rate."""
    times = {0: [0.0]}
    valids = []
    offset = last = 0.0
    for line in open(path, encoding="utf-8"):
        if "Loaded checkpoint" in line:
            k = int(line.split(" @ ")[1].split()[0])
            offset = last
            times = {u: t for u, t in times.items() if u <= k}
            times.setdefault(k, []).append(offset)
            valids = [v for v in valids if v <= k]
        for kind, u_key, wall_key in (("train_inner", "num_updates", "wall"), ("train", "train_num_updates", "train_wall")):
            if f"| {kind} | " in line:
                st = json.loads(line.split(f"| {kind} | ", 1)[1])
                last = offset + float(st[wall_key])
                times.setdefault(int(st[u_key]), []).append(last)
        if "| valid | " in line:
            u = int(json.loads(line.split("| valid | ", 1)[1])["valid_num_updates"])
            valids = [v for v in valids if v < u] + [u]
    knots = []
    for u in sorted(times):
        if not knots or max(times[u]) > max(times[knots[-1]]):
            knots.append(u)
    out = []
    for u in valids:
        if u in knots:
            out.append((u, max(times[u])))
        elif u > knots[-1]:
            u0, u1 = knots[-2], knots[-1]
            out.append((u, max(times[u1]) + (max(times[u1]) - max(times[u0])) * (u - u1) / (u1 - u0)))
        else:
            u0 = max(k for k in knots if k < u)
            u1 = min(k for k in knots if k > u)
            end = min(times[u1]) if min(times[u1]) > max(times[u0]) else max(times[u1])
            out.append((u, max(times[u0]) + (end - max(times[u0])) * (u - u0) / (u1 - u0)))
    return out


def check_validation_times(path):
    """The validation series' x values: the plain computation's, strictly increasing with the
    update, no two validations at one time."""
    c = curves.run_curves(path)
    expect = plain_validation_times(path)
    assert [u for u, _, _ in c["valid_loss"]] == [u for u, _ in expect]
    torch.testing.assert_close(torch.tensor([w for _, w, _ in c["valid_loss"]], dtype=torch.float64),
                               torch.tensor([w for _, w in expect], dtype=torch.float64), rtol=0, atol=1e-12)
    for (u0, w0, _), (u1, w1, _) in zip(c["valid_loss"], c["valid_loss"][1:]):
        assert u1 > u0 and w1 > w0, (u0, w0, u1, w1)
    walls = [w for _, w, _ in c["valid_loss"]]
    assert len(set(walls)) == len(walls)
    return c


# ------------------------------------------------------------------ item 2: curves
def test_curves_from_real_fairseq_log_with_bleu():
    c = curves.run_curves(BLEU_LOG)
    inner = plain_records(BLEU_LOG, "train_inner")
    assert len(inner) >= 4
    assert c["train_loss"] == [(int(st["num_updates"]), float(st["wall"]), float(st["loss"])) for st, _ in inner]
    valid = plain_records(BLEU_LOG, "valid")
    assert [(p[0], p[2]) for p in c["valid_loss"]] == [(int(st["valid_num_updates"]), float(st["valid_loss"]))
                                                       for st, _ in valid]
    assert [(p[0], p[2]) for p in c["valid_bleu"]] == [(int(st["valid_num_updates"]), float(st["valid_bleu"]))
                                                       for st, _ in valid]
    # a validation point sits at its elapsed time: on the run's clock through the training records
    # (train_inner and the epoch's train record, whole seconds), consecutive validations (mid-epoch,
    # then at the epoch's end) at different times
    check_validation_times(BLEU_LOG)


def test_validations_before_the_first_training_record_start_from_zero():
    """The demo's log: no train_inner, validations mid-epoch. Those of the first epoch ran before
    its train record: each at its own time since the training start, none at that record's time."""
    c = check_validation_times(MID_EPOCH_LOG)
    first_train = plain_records(MID_EPOCH_LOG, "train")[0][0]
    u1, w1 = int(first_train["train_num_updates"]), float(first_train["train_wall"])
    early = [(u, w) for u, w, _ in c["valid_loss"] if u < u1]
    assert len(early) >= 1 and all(0 < w < w1 for _, w in early), (early, u1, w1)
    # on the line from the training start (0 updates, 0 s) to that record
    for u, w in early:
        torch.testing.assert_close(w, w1 * u / u1, rtol=0, atol=1e-12)
    assert len(c["valid_loss"]) > len(plain_records(MID_EPOCH_LOG, "train"))  # several per epoch


def test_interpolated_validation_time_between_training_records():
    anchors = [(10, 0.0, 1.0), (20, 100.0, 1.0), (20, 130.0, 1.0), (40, 170.0, 1.0)]
    pts = curves.place_on_wall_clock([(15, 0.0, 5.0), (20, 0.0, 4.0), (30, 0.0, 3.0), (50, 0.0, 2.0)], anchors)
    # 15: from 0 s to update 20's first record (100 s, before its validation and save), 20: its
    # latest record, 50 (after the last record): 40 s per 20 updates goes on
    assert pts == [(15, 50.0, 5.0), (20, 130.0, 4.0), (30, 150.0, 3.0), (50, 190.0, 2.0)]
    assert curves.place_on_wall_clock([(5, 0.0, 1.0)], anchors) == [(5, 0.0, 1.0)]
    # records repeating a second (the log's whole seconds) are no knots: no two times alike
    ties = [(0, 0.0, 1.0), (2, 1.0, 1.0), (4, 1.0, 1.0), (6, 2.0, 1.0)]
    assert curves.place_on_wall_clock([(3, 0, 1.0), (4, 0, 1.0), (5, 0, 1.0)], ties) == [
        (3, 1.25, 1.0), (4, 1.5, 1.0), (5, 1.75, 1.0)]


def test_curves_of_a_resumed_run_add_the_earlier_wall_time():
    c = curves.run_curves(RESUMED_LOG)
    inner = plain_records(RESUMED_LOG, "train_inner")
    assert any(off > 0 for _, off in inner)  # the sample really resumed
    assert c["train_loss"] == [(int(st["num_updates"]), off + float(st["wall"]), float(st["loss"]))
                               for st, off in inner]
    assert [p[0] for p in c["train_loss"]] == [2, 4, 6, 8, 10, 12]
    assert c["valid_bleu"] == []  # not logged without --eval-bleu
    walls = [p[1] for p in c["train_loss"]]
    assert walls == sorted(walls)  # the time axis never goes back
    check_validation_times(RESUMED_LOG)  # the resumed process's validations after the earlier time


def test_resume_truncates_records_past_the_checkpoint(tmp_path):
    """An interrupted process logged updates 8 and 10 after its last checkpoint (6): the
    resumed process's records of those updates replace them."""
    lines = open(RESUMED_LOG, encoding="utf-8").read().splitlines(keepends=True)
    i = next(k for k, line in enumerate(lines) if "Loaded checkpoint" in line)
    lost = ['2026-11-23 13:04:46 | INFO | train_inner | {"epoch": 2, "update": 1.6, "loss": "99.0", '
            '"num_updates": "8", "wall": "3"}\n',
            '2026-11-23 13:04:46 | INFO | valid | {"epoch": 2, "valid_loss": "98.0", "valid_num_updates": "8"}\n',
            '2026-11-23 13:04:46 | INFO | train_inner | {"epoch": 2, "update": 2.0, "loss": "97.0", '
            '"num_updates": "10", "wall": "4"}\n']
    path = tmp_path / "train.log"
    path.write_text("".join(lines[:i] + lost + lines[i:]))
    c = curves.run_curves(str(path))
    clean = curves.run_curves(RESUMED_LOG)
    assert [(u, v) for u, _, v in c["train_loss"]] == [(u, v) for u, _, v in clean["train_loss"]]
    assert [(u, v) for u, _, v in c["valid_loss"]] == [(u, v) for u, _, v in clean["valid_loss"]]
    # the interrupted process's 4 s count in the wall-clock axis (time spent, lost or not)
    after = [w for u, w, _ in c["train_loss"] if u > 6]
    assert after == [4.0 + w - 1.0 for u, w, _ in clean["train_loss"] if u > 6]


def test_demo_style_log_without_train_inner_uses_epoch_averages(tmp_path):
    from test_demo import TRAIN_LOG
    (tmp_path / "train.log").write_text(TRAIN_LOG)
    c = curves.run_curves(str(tmp_path / "train.log"))
    assert [(u, v) for u, _, v in c["train_loss"]] == [(10, 7.0), (20, 5.0)]
    assert [(u, v) for u, _, v in c["valid_loss"]] == [(10, 6.5), (20, 4.5)]


def test_seed_band_is_mean_and_sample_std_at_common_updates():
    g = torch.Generator().manual_seed(0)
    series = []
    for n_points in (5, 5, 4):  # the third seed stopped earlier
        vals = torch.rand(n_points, generator=g, dtype=torch.float64).tolist()
        series.append([(10 * (k + 1), 3.0 * k + len(series), v) for k, v in enumerate(vals)])
    band = curves.seed_band(series)
    assert [b[0] for b in band] == [10, 20, 30, 40]
    for k, (u, wall, mean, std) in enumerate(band):
        m, s = plain_mean_std([ser[k][2] for ser in series])
        w, _ = plain_mean_std([ser[k][1] for ser in series])
        torch.testing.assert_close(torch.tensor([wall, mean, std], dtype=torch.float64),
                                   torch.tensor([w, m, s], dtype=torch.float64))


def _run_dir(root, name, log=RESUMED_LOG, hyps=None):
    d = root / name
    d.mkdir()
    shutil.copy(log, d / "train.log")
    if hyps is not None:
        (d / "hyp.txt").write_text("\n".join(hyps) + "\n")
    return str(d)


def test_results_curves_png_without_ref(tmp_path, capsys):
    dirs = [_run_dir(tmp_path, "base_seed1", RESUMED_LOG), _run_dir(tmp_path, "base_seed2", BLEU_LOG),
            _run_dir(tmp_path, "csan", BLEU_LOG)]
    png = tmp_path / "curves.png"
    assert results.main(["--curves", str(png), *dirs]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = curves.plot_curves([("base", dirs[:2]), ("csan", dirs[2:])], str(tmp_path / "again.png"))
    # the base band: both seeds at the updates they share
    a, b = curves.run_curves(RESUMED_LOG)["train_loss"], curves.run_curves(BLEU_LOG)["train_loss"]
    shared = sorted({p[0] for p in a} & {p[0] for p in b})
    assert [x[0] for x in data["base"]["train_loss"]] == shared
    for u, _, mean, std in data["base"]["train_loss"]:
        m, s = plain_mean_std([dict((p[0], p[2]) for p in a)[u], dict((p[0], p[2]) for p in b)[u]])
        assert mean == pytest.approx(m) and std == pytest.approx(s)
    assert data["csan"]["valid_bleu"]
    assert data["base"]["valid_bleu"] == []  # only one of its seeds logged BLEU: no band
    # without --ref and --curves: a clear error
    with pytest.raises(SystemExit):
        results.main(dirs)
    assert "--ref is required" in capsys.readouterr().err


# ------------------------------------------------------------------ item 1: seeds
def test_mean_std_matches_plain_reference():
    g = torch.Generator().manual_seed(1)
    for n in (1, 2, 3, 7):
        vals = (torch.rand(n, generator=g, dtype=torch.float64) * 40).tolist()
        torch.testing.assert_close(torch.tensor(curves.mean_std(vals), dtype=torch.float64),
                                   torch.tensor(plain_mean_std(vals), dtype=torch.float64))
    with pytest.raises(ValueError):
        curves.mean_std([])


def test_group_runs_by_system_and_seed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dirs = ["w/runs/transformer_attn_wmt_en_de_seed1", "w/runs/transformer_csan2d_wmt_en_de_seed1",
            "w/runs/transformer_attn_wmt_en_de_seed2/", "w/runs/transformer_csan2d_wmt_en_de_seed2",
            "w/runs/transformer_attn_wmt_en_de_seed10", "w/runs/chained_both"]
    for d in dirs + ["x/a_seed1", "y/a_seed1"]:
        os.makedirs(d)
    groups = seeds.group_runs(seeds.default_names(dirs), dirs)
    assert list(groups) == ["transformer_attn_wmt_en_de", "transformer_csan2d_wmt_en_de", "chained_both"]
    assert [s for s, _ in groups["transformer_attn_wmt_en_de"]] == [1, 2, 10]
    assert groups["chained_both"] == [(None, "w/runs/chained_both")]
    with pytest.raises(ValueError, match="seed is given twice"):
        seeds.group_runs(["a", "a"], ["x/a_seed1", "y/a_seed1"])


@pytest.mark.parametrize("pairs,mark", [
    ([(1.0, "**"), (0.5, "**"), (2.0, "**")], "**"),
    ([(1.0, "**"), (0.5, "*"), (2.0, "**")], "*"),        # the weakest pair decides
    ([(1.0, "**"), (0.1, ""), (2.0, "**")], ""),          # one pair not significant: no mark
    ([(1.0, "**"), (-1.0, "**")], ""),                    # significant, but in opposite directions
    ([(-1.0, "*"), (-2.0, "**")], ""),                    # consistently worse: never a mark
    ([], ""),
])
def test_all_pairs_mark(pairs, mark):
    assert seeds.all_pairs_mark(pairs) == mark


def _scramble(refs, keep, salt):
    return [r if ((i * 7919 + salt * 104729) % 1000) / 1000 < keep else " ".join(r.split()[::-1])
            for i, r in enumerate(refs)]


def test_seed_table_mean_std_and_all_pairs_rule(tmp_path):
    refs = [t for _, t in make_corpus(150, seed=5)]
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(refs) + "\n")
    quality = {  # (system, seed) -> share of sentences kept in order
        ("base", 1): 0.45, ("base", 2): 0.5,
        ("good", 1): 0.9, ("good", 2): 0.92, ("good", 3): 0.88,   # beats every baseline seed
        ("mixed", 1): 0.9, ("mixed", 2): 0.5,                      # seed 2 as bad as the baseline
    }
    dirs = [_run_dir(tmp_path, f"{s}_seed{n}", hyps=_scramble(refs, q, n)) for (s, n), q in quality.items()]
    # seed 2 of "mixed" translates exactly as seed 2 of the baseline: that pair cannot be significant
    shutil.copy(os.path.join(dirs[1], "hyp.txt"), os.path.join(dirs[-1], "hyp.txt"))
    out_json, out_md = tmp_path / "t.json", tmp_path / "t.md"
    assert results.main(["--ref", str(ref), *dirs, "--json", str(out_json), "--md", str(out_md),
                         "--bs-samples", "300", "--ar-trials", "300"]) == 0
    table = json.loads(out_json.read_text())
    rows = {r["system"]: r for r in table["rows"]}
    assert [r["system"] for r in table["rows"]] == ["base", "good", "mixed"]
    bleu = {d: sacrebleu.corpus_bleu(open(os.path.join(d, "hyp.txt")).read().splitlines(), [refs]).score
            for d in dirs}
    for name, row in rows.items():
        mine = [bleu[d] for d in dirs if os.path.basename(d).startswith(name + "_seed")]
        assert row["n_seeds"] == len(mine)
        m, s = plain_mean_std(mine)
        torch.testing.assert_close(torch.tensor([row["bleu_mean"], row["bleu_std"]], dtype=torch.float64),
                                   torch.tensor([m, s], dtype=torch.float64))
        if name != "base":
            assert row["delta"] == pytest.approx(m - rows["base"]["bleu_mean"])
            assert len(row["pairs"]) == 2 * row["n_seeds"]  # every (seed, baseline seed) pair
        # the length ratio per seed: sacreBLEU's sys_len / ref_len, mean ± sample std
        lengths = []
        for d in dirs:
            if os.path.basename(d).startswith(name + "_seed"):
                b = sacrebleu.corpus_bleu(open(os.path.join(d, "hyp.txt")).read().splitlines(), [refs])
                lengths.append(b.sys_len / b.ref_len)
        lm, ls = plain_mean_std(lengths)
        torch.testing.assert_close(torch.tensor([row["length_ratio_mean"], row["length_ratio_std"]],
                                                dtype=torch.float64), torch.tensor([lm, ls], dtype=torch.float64))
        # chrF++ over seeds too: sacreBLEU's chrF (word order 2) per seed, mean ± sample std
        chrf = [sacrebleu.metrics.CHRF(word_order=2).corpus_score(
            open(os.path.join(d, "hyp.txt")).read().splitlines(), [refs]).score
            for d in dirs if os.path.basename(d).startswith(name + "_seed")]
        cm, cs = plain_mean_std(chrf)
        got = row["metrics"]["chrf"]
        torch.testing.assert_close(torch.tensor([got["mean"], got["std"]], dtype=torch.float64),
                                   torch.tensor([cm, cs], dtype=torch.float64))
    # the pair marks are the significance module's, on each pair's own p-values
    p = paired_tests(refs, [("b", open(os.path.join(dirs[0], "hyp.txt")).read().splitlines()),
                            ("g", open(os.path.join(dirs[2], "hyp.txt")).read().splitlines())],
                     bs_samples=300, ar_trials=300)["systems"][1]
    pair = next(x for x in rows["good"]["pairs"] if x["seed"] == 1 and x["baseline_seed"] == 1)
    assert pair["p_bootstrap"] == p["p_bootstrap"] and pair["p_ar"] == p["p_ar"]
    assert pair["mark"] == significance_mark([p["p_bootstrap"], p["p_ar"]]) != ""
    assert rows["good"]["mark"] == "**" and rows["good"]["pairs_marked"] == 6
    assert rows["good"]["metrics"]["chrf"]["mark"] == "**" and rows["mixed"]["metrics"]["chrf"]["mark"] == ""
    # "mixed" beats the baseline on average, and its seed 1 beats both baseline seeds, but
    # its seed 2 equals baseline seed 2: one pair fails, so no mark
    same = next(x for x in rows["mixed"]["pairs"] if x["seed"] == 2 and x["baseline_seed"] == 2)
    assert same["delta"] == 0 and same["mark"] == ""
    assert all(x["mark"] == "**" for x in rows["mixed"]["pairs"] if x["seed"] == 1)
    assert rows["mixed"]["delta"] > 0 and rows["mixed"]["mark"] == ""
    assert 2 <= rows["mixed"]["pairs_marked"] < 4
    md = out_md.read_text()
    assert f"{rows['good']['bleu_mean']:.2f} ± {rows['good']['bleu_std']:.2f}**" in md
    assert "sample standard deviation (n-1)" in md and "EVERY pair" in md
    g = rows["good"]
    assert f"| {g['length_ratio_mean']:.3f} ± {g['length_ratio_std']:.3f} |" in md
    table_lines = [line for line in md.splitlines() if line.startswith("|")]
    assert len({line.count("|") for line in table_lines}) == 1  # every row has the header's columns


def test_help_states_std_and_significance_rule(capsys):
    with pytest.raises(SystemExit):
        results.main(["--help"])
    out = capsys.readouterr().out
    assert "sample standard deviation (n-1)" in out and "EVERY pair" in out and "pooled" in out
    assert "--curves" in out
