"""fairseq-attn-plot and its statistics (entropy, Div, disagreement)."""

import json
import math
import os

import pytest
import torch

from fairseq_attn_core import PIECES
from fairseq_attn_reports.cli import plot
from fairseq_attn_plugins.reporting.attention_maps import collect_attention, plot_layer
from fairseq_attn_plugins.reporting.attention_stats import head_disagreement, head_div, head_entropy, head_stats

from cli_helpers import shared_data, train_in_process
from reliability_helpers import (
    arch_test_flags,
    batch,
    build_model,
    dictionary,
    plugin_archs,
    train_cmd,
)


# ---------------------------------------------------------------------------
# statistics against plain loops (float64)
# ---------------------------------------------------------------------------
def _rows(P):
    H, T, _ = len(P), len(P[0]), len(P[0][0])
    return [i for i in range(T) if all(sum(P[h][i]) > 0 for h in range(H))]


def naive_entropy(P):
    out = []
    for h in range(len(P)):
        vals = []
        for i in _rows(P):
            vals.append(-sum(p * math.log(p) for p in P[h][i] if p > 0))
        out.append(sum(vals) / len(vals))
    return torch.tensor(out, dtype=torch.float64)


def naive_div(P):
    H = len(P)
    out = []
    for h in range(H):
        total = 0.0
        for g in range(H):
            if g == h:
                continue
            vals = []
            for i in _rows(P):
                js = 0.0
                for p, q in zip(P[h][i], P[g][i]):
                    m = (p + q) / 2
                    if p > 0:
                        js += 0.5 * p * math.log(p / m)
                    if q > 0:
                        js += 0.5 * q * math.log(q / m)
                vals.append(js)
            total += sum(vals) / len(vals)
        out.append(total / (H - 1))
    return torch.tensor(out, dtype=torch.float64)


def naive_disagreement(P):
    H = len(P)
    out = []
    for h in range(H):
        total = 0.0
        for g in range(H):
            vals = [sum(p * q for p, q in zip(P[h][i], P[g][i])) for i in _rows(P)]
            total += sum(vals) / len(vals)
        out.append(-total / H)
    return torch.tensor(out, dtype=torch.float64)


def _random_probs(H=3, T=5, S=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(H, T, S, generator=g, dtype=torch.float64) * 2
    allowed = torch.rand(H, T, S, generator=g) > 0.3
    allowed[:, :, 0] = True  # every row keeps a key ...
    allowed[:, 2, :] = False  # ... except row 2: a mask empties it
    probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
    return torch.nan_to_num(probs, nan=0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stats_match_plain_formulas_on_random_matrices(seed):
    P = _random_probs(seed=seed)
    L = P.tolist()
    torch.testing.assert_close(head_entropy(P), naive_entropy(L))
    torch.testing.assert_close(head_div(P), naive_div(L))
    torch.testing.assert_close(head_disagreement(P), naive_disagreement(L))


def test_stats_on_hand_made_matrices():
    S = 4
    uniform = torch.full((2, 3, S), 1.0 / S, dtype=torch.float64)
    st = head_stats(uniform)
    torch.testing.assert_close(st["entropy"], torch.full((2,), math.log(S), dtype=torch.float64))
    torch.testing.assert_close(st["div"], torch.zeros(2, dtype=torch.float64))  # identical heads
    torch.testing.assert_close(st["disagreement"], torch.full((2,), -1.0 / S, dtype=torch.float64))

    eye = torch.eye(3, dtype=torch.float64)
    one_hot = torch.stack([eye, eye.roll(1, dims=1)])  # two heads, one-hot, never the same key
    st = head_stats(one_hot)
    torch.testing.assert_close(st["entropy"], torch.zeros(2, dtype=torch.float64))
    torch.testing.assert_close(st["div"], torch.full((2,), math.log(2), dtype=torch.float64))  # JS maximum
    torch.testing.assert_close(st["disagreement"], torch.full((2,), -0.5, dtype=torch.float64))  # -1/H

    same = torch.stack([eye, eye])
    torch.testing.assert_close(head_disagreement(same), torch.full((2,), -1.0, dtype=torch.float64))


# ---------------------------------------------------------------------------
# collecting probabilities and masks from a model; writing a PNG
# ---------------------------------------------------------------------------
def _windowed_arch():
    for arch in plugin_archs():
        if "csan1d" in arch and "csan1d" in PIECES:
            return arch
    pytest.skip("no windowed piece registered")


def test_collected_probabilities_respect_windows_and_padding(tmp_path):
    arch = _windowed_arch()
    flags = arch_test_flags(arch)
    d = dictionary()
    torch.manual_seed(0)
    model, args, _ = build_model(arch, flags, d=d)
    model.eval()
    src, lengths, prev, _ = batch(d, lengths=(5,))
    prev = prev[:, :5]  # no padding: the decoder mask is exactly the causal one
    records = collect_attention(model, src, prev)
    assert [(r["side"], r["layer"]) for r in records] == [("encoder", 0), ("encoder", 1), ("decoder", 0),
                                                          ("decoder", 1)]
    half = args.csan_window // 2
    T = src.size(1)
    window = torch.tensor([[abs(i - j) <= half for j in range(T)] for i in range(T)])
    causal = torch.tensor([[j <= i for j in range(prev.size(1))] for i in range(prev.size(1))])
    for r in records:
        probs, allowed = r["probs"], r["allowed"]
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:2]))
        assert bool((probs[~allowed] == 0).all()), f"{r['side']} {r['layer']}: mass outside the mask"
        if r["side"] == "encoder" and r["layer"] == 0:
            assert torch.equal(allowed, window.expand_as(allowed)), "CSAN window not marked"
        elif r["side"] == "encoder":
            assert bool(allowed.all())
        else:
            assert torch.equal(allowed, causal.expand_as(allowed)), "causal mask not marked"

    path = str(tmp_path / "enc0.png")
    labels = [d[i] for i in src[0].tolist()]
    plot_layer(records[0], labels, labels, path)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert not os.path.exists(path + ".tmp.png")


# ---------------------------------------------------------------------------
# e2e: the console command on a tiny trained checkpoint
# ---------------------------------------------------------------------------
@pytest.mark.e2e
def test_plot_command_on_tiny_checkpoint(tmp_path, capsys):
    arch = _windowed_arch()
    flags = arch_test_flags(arch)
    data = shared_data(120)  # the toy corpus of the pair tests
    extra = ["--max-update", "3", "--seed", "1"]
    for k, v in flags.items():
        extra += ["--" + k.replace("_", "-"), str(v)]
    train_in_process(train_cmd(data, str(tmp_path / "ck"), arch, extra)[1:])  # fairseq-train's main, here
    out_dir, stats_json = tmp_path / "plots", tmp_path / "stats.json"
    rc = plot.main([data, "--path", str(tmp_path / "ck" / "checkpoint_last.pt"),
                    "--sentence", "rot kat_pl hund sieht", "--target", "tak hund sieht",
                    "--out-dir", str(out_dir), "--stats-json", str(stats_json)])
    assert rc == 0
    printed = capsys.readouterr().out
    names = sorted(os.listdir(out_dir))
    assert names == ["decoder_layer0.png", "decoder_layer1.png", "encoder_layer0.png", "encoder_layer1.png"]
    for n in names:
        with open(out_dir / n, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    stats = json.load(open(stats_json))
    assert len(stats) == 2 * 2 * 4  # sides x layers x heads
    assert "entropy" in printed and "disagree" in printed
    n_src = 5  # 4 words + EOS
    for r in stats:
        assert r["div"] >= 0 and -1 <= r["disagreement"] < 0
        assert 0 <= r["entropy"] <= math.log(n_src) + 1e-6
        if r["side"] == "encoder" and r["layer"] == 0:  # a window of 3 keys bounds the entropy
            assert r["entropy"] <= math.log(3) + 1e-6, r


@pytest.mark.e2e
def test_plot_command_on_stock_fairseq_transformer(tmp_path, capsys):
    """A stock ``--arch transformer`` checkpoint gets fairseq's own
    attention drawn (it used to exit 0 with an empty table), and a too-long sentence
    ends with a one-line error."""
    from fairseq import checkpoint_utils

    data = shared_data(120)  # the toy corpus of the pair tests
    train_in_process(train_cmd(data, str(tmp_path / "ck"), "transformer", ["--max-update", "2", "--seed", "1"])[1:])
    ck = str(tmp_path / "ck" / "checkpoint_last.pt")
    out_dir, stats_json = tmp_path / "plots", tmp_path / "stats.json"
    rc = plot.main([data, "--path", ck, "--sentence", "rot kat_pl hund sieht", "--target", "tak hund sieht",
                    "--out-dir", str(out_dir), "--stats-json", str(stats_json)])
    assert rc == 0
    assert sorted(os.listdir(out_dir)) == ["decoder_layer0.png", "decoder_layer1.png",
                                           "encoder_layer0.png", "encoder_layer1.png"]
    assert len(json.load(open(stats_json))) == 2 * 2 * 4
    # the drawn probabilities are fairseq's: rows sum to 1, the decoder's future is empty,
    # and their head mean equals what fairseq's MultiheadAttention itself returns
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([ck], arg_overrides={"data": data})
    model = models[0].eval()
    d = task.source_dictionary
    src = d.encode_line("rot kat_pl hund sieht", add_if_not_exist=False).long()[None]
    prev = torch.cat([torch.tensor([d.eos()]), d.encode_line("tak hund sieht", add_if_not_exist=False,
                                                             append_eos=False).long()])[None]
    records = collect_attention(model, src, prev)
    assert len(records) == 4
    for rec in records:
        torch.testing.assert_close(rec["probs"].sum(-1), torch.ones(rec["probs"].shape[:2]), rtol=0, atol=1e-5)
        if rec["side"] == "decoder":
            T = rec["probs"].size(1)
            assert float(rec["probs"].triu(1).abs().max()) == 0.0
            assert torch.equal(rec["allowed"][0], torch.ones(T, T).tril().bool())
    x = model.encoder.embed_scale * model.encoder.embed_tokens(src) + model.encoder.embed_positions(src)
    x = x.transpose(0, 1)  # (T, B, C)
    _, w = model.encoder.layers[0].self_attn(x, x, x, need_weights=True)  # fused, head-averaged
    torch.testing.assert_close(records[0]["probs"].mean(0), w[0].detach(), rtol=1e-5, atol=1e-6)
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        plot.main([data, "--path", ck, "--sentence", " ".join(["rot"] * 1100), "--no-png"])
    msg = str(info.value.code)
    assert "1101 tokens" in msg and "1024" in msg and "\n" not in msg, msg
