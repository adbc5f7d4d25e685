"""fairseq-attn-export --to ct2: the exported CTranslate2 model computes what fairseq
computes (per-token log-probabilities of fairseq-generate's own hypotheses, teacher-forced
through both engines, for every exportable configuration), and the rest is refused in one
line. Beam agreement is reported, not required (see docs/howto/export.md: near-tied hypotheses of an
undertrained model can flip on float rounding)."""

import os
import sys

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

sys.path.insert(0, os.path.dirname(__file__))
import trained_models  # noqa: E402
from cli_helpers import PLUGIN_DIR, generate_config, generate_with_config  # noqa: E402

from fairseq_attn_plugins.cli import export as export_cli  # noqa: E402
from fairseq_attn_plugins.export import ExportError, export_ct2  # noqa: E402
from fairseq_attn_plugins.loading import load_model_ensemble_and_task  # noqa: E402

pytestmark = pytest.mark.e2e

PRE_NORM = ["--encoder-normalize-before", "--decoder-normalize-before"]

# every exportable configuration, trained a few updates (names in trained_models.MODELS)
trained_models.MODELS.update({
    # keys only, absolute positions kept (layer 0 without relpos), learnable temperatures on
    # both sides (folded into the projections), DropAttention (identity at inference)
    "relpos_k_keep": ("transformer_attn_wmt_en_de", [
        "--attn-pieces", "relpos,temp,dropattn_e", "--relpos-mode", "k", "--relpos-abs-pos", "keep",
        "--relpos-layers", "1", "--relpos-k", "3", "--temp-sides", "both"]),
    "relpos_tied": ("transformer_relpos_wmt_en_de", ["--relpos-mode", "tied", "--relpos-k", "2"]),
    # rotary: half of each 8-dimension head rotated (two pairs: (0,1), (2,3) interleaved, which
    # halves would pair (0,2), (1,3)), a base far from the default, pre-norm
    "rope_half_prenorm": ("transformer_rope_wmt_en_de", [
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
        "--rope-fraction", "0.5", "--rope-theta", "500", *PRE_NORM]),
    # rotary on layer 1 only, sinusoidal positions kept (CTranslate2 adds them: layer 0 has none)
    "rope_keep": ("transformer_rope_wmt_en_de", ["--rope-layers", "1", "--rope-abs-pos", "keep"]),
    # T5 bias, one table per stack; few buckets and a short maximum distance so that the
    # toy sentences reach the log-spaced buckets and the last one
    "t5bias_stack": ("transformer_t5bias_wmt_en_de", ["--t5-buckets", "8", "--t5-max-distance", "7"]),
    "t5bias_layer_prenorm": ("transformer_t5bias_wmt_en_de", [
        "--t5-buckets", "6", "--t5-max-distance", "5", "--t5-sharing", "layer", *PRE_NORM]),
    "alibi": ("transformer_alibi_wmt_en_de", []),
})
EXPORTED = ["stock", "relpos", "relpos_k_keep", "relpos_tied", "rope_half_prenorm", "rope_keep",
            "t5bias_stack", "t5bias_layer_prenorm"]


def fairseq_log_probs(model, task, src_line, tgt_line):
    src = task.source_dictionary.encode_line(src_line, add_if_not_exist=False).long()[None]
    tgt = task.target_dictionary.encode_line(tgt_line, add_if_not_exist=False).long()[None]
    prev = torch.cat([tgt.new_full((1, 1), task.target_dictionary.eos()), tgt[:, :-1]], 1)
    with torch.no_grad():
        out = model(src, torch.tensor([src.size(1)]), prev)
        lp = model.get_normalized_probs(out, log_probs=True)[0]
    return lp.gather(-1, tgt[0][:, None])[:, 0].double()


@pytest.fixture(scope="module")
def generate_cfg():
    """fairseq-generate's config for every exported model, composed once; each run names its checkpoint."""
    return generate_config([trained_models.data_dir(), "--user-dir", PLUGIN_DIR, "--path", "EXPORTED_CHECKPOINT",
                            "--beam", "4", "--lenpen", "0.6", "--batch-size", "4", "--max-len-a", "0",
                            "--max-len-b", "40", "--cpu"])


def generate_hypotheses(generate_cfg, ck):
    """fairseq-generate's beam-4 (source, hypothesis) per test sentence, in id order."""
    gen = generate_with_config(generate_cfg, ck)
    src, hyp = {}, {}
    for line in gen.splitlines():
        if line.startswith("S-"):
            head, text = line.split("\t", 1)
            src[int(head[2:])] = text
        elif line.startswith("H-"):
            head, _score, text = line.split("\t", 2)
            hyp[int(head[2:])] = text
    assert sorted(src) == sorted(hyp) == list(range(12))
    return [(src[i], hyp[i]) for i in range(12)]


@pytest.mark.parametrize("name", EXPORTED)
def test_exported_model_scores_fairseq_generate_hypotheses_like_fairseq(name, generate_cfg, tmp_path):
    """fairseq-generate's hypotheses teacher-forced through fairseq and through the exported
    float32 model: per-token log-probabilities agree to 1e-4. Beam outputs are reported."""
    ck = trained_models.trained(name, updates=5)
    data = trained_models.data_dir()
    out = str(tmp_path / f"{name}.ct2")
    assert export_cli.main([data, "--path", ck, "--to", "ct2", "--output-dir", out]) == 0
    models, _, task = load_model_ensemble_and_task([ck], {"data": data})
    model = models[0].eval()
    pairs = generate_hypotheses(generate_cfg, ck)
    translator = ctranslate2.Translator(out, device="cpu", intra_threads=1)
    scored = translator.score_batch([s.split() for s, _ in pairs], [h.split() for _, h in pairs])
    worst = 0.0
    for (s, h), r in zip(pairs, scored):
        want = fairseq_log_probs(model, task, s, h)
        got = torch.tensor(r.log_probs, dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
        worst = max(worst, (got - want).abs().max().item())
    beams = translator.translate_batch([s.split() for s, _ in pairs], beam_size=4, length_penalty=0.6,
                                       max_decoding_length=40)
    same = sum(" ".join(r.hypotheses[0]) == h for r, (_, h) in zip(beams, pairs))
    print(f"{name}: max |log-prob difference| {worst:.2e}; beam-4 outputs equal on {same}/12")


def test_export_refuses_an_existing_output_and_writes_nothing_half(tmp_path):
    ck = trained_models.trained("relpos")
    data = trained_models.data_dir()
    out = tmp_path / "m.ct2"
    out.mkdir()
    with pytest.raises(ExportError, match="exists; pass --force"):
        export_ct2(data, ck, str(out))
    assert not os.path.exists(str(out) + ".tmp")


def test_inexact_models_are_refused_in_one_line(tmp_path, capsys):
    ck = trained_models.trained("csan2d", updates=2)
    with pytest.raises(SystemExit) as e:
        export_cli.main([trained_models.data_dir(), "--path", ck, "--to", "ct2",
                         "--output-dir", str(tmp_path / "x")])
    msg = str(e.value.code)
    assert "piece 'csan2d' cannot be exported to CTranslate2" in msg and "\n" not in msg
    assert not os.path.exists(tmp_path / "x") and not os.path.exists(tmp_path / "x.tmp")
    # absolute positions with relpos in layer 0: CTranslate2 would drop the absolute ones
    # (the relpos model loaded with sinusoidal positions added, no file written)
    from fairseq_attn_plugins.export.ct2 import build_spec

    models, cfg, task = load_model_ensemble_and_task(
        [trained_models.trained("relpos")], {"data": trained_models.data_dir(), "relpos_abs_pos": "keep",
                                            "no_token_positional_embeddings": False})
    with pytest.raises(ExportError, match=r"drops absolute positions when the first layer has a position"):
        build_spec(models[0], task, cfg.model)


def test_alibi_is_refused_naming_the_encoder_form(tmp_path):
    ck = trained_models.trained("alibi", updates=2)
    with pytest.raises(SystemExit) as e:
        export_cli.main([trained_models.data_dir(), "--path", ck, "--to", "ct2",
                         "--output-dir", str(tmp_path / "x")])
    msg = str(e.value.code)
    assert "piece 'alibi' cannot be exported" in msg and "symmetric ALiBi for an encoder" in msg
    assert "\n" not in msg and not os.path.exists(tmp_path / "x")
