"""fairseq-attn-export --to ct2: the exported CTranslate2 model computes what fairseq
computes (beam translations of a trained relpos model, per-token log-probabilities of every
exportable configuration), and the rest is refused in one line."""

import os
import sys

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

sys.path.insert(0, os.path.dirname(__file__))
import trained_models  # noqa: E402
from cli_helpers import PLUGIN_DIR, generate_in_process  # noqa: E402

from fairseq_attn_plugins.cli import export as export_cli  # noqa: E402
from fairseq_attn_plugins.export import ExportError, export_ct2  # noqa: E402
from fairseq_attn_plugins.integration.loading import load_model_ensemble_and_task  # noqa: E402

pytestmark = pytest.mark.e2e

# every exportable configuration, trained a few updates (names in trained_models.MODELS)
trained_models.MODELS.update({
    # keys only, absolute positions kept (layer 0 without relpos), learnable temperatures on
    # both sides (folded into the projections), DropAttention (identity at inference)
    "relpos_k_keep": ("transformer_attn_wmt_en_de", [
        "--attn-pieces", "relpos,temp,dropattn_e", "--relpos-mode", "k", "--relpos-abs-pos", "keep",
        "--relpos-layers", "1", "--relpos-k", "3", "--temp-sides", "both"]),
    "relpos_tied": ("transformer_relpos_wmt_en_de", ["--relpos-mode", "tied", "--relpos-k", "2"]),
})


def test_float32_beam_translations_equal_fairseq_generate(tmp_path):
    ck = trained_models.trained("relpos")
    data = trained_models.data_dir()
    out = str(tmp_path / "relpos.ct2")
    assert export_cli.main([data, "--path", ck, "--to", "ct2", "--output-dir", out]) == 0
    gen = generate_in_process([data, "--user-dir", PLUGIN_DIR, "--path", ck, "--beam", "4",
                               "--lenpen", "0.6", "--batch-size", "4", "--cpu"])
    want = {}
    for line in gen.splitlines():
        if line.startswith("H-"):
            head, _score, hyp = line.split("\t", 2)
            want[int(head[2:])] = (hyp,)
    src = [line.split() for line in open(os.path.join(data, "..", "raw", "test.src"), encoding="utf-8")]
    assert len(want) == len(src) == 12
    translator = ctranslate2.Translator(out, device="cpu", intra_threads=1)
    results = translator.translate_batch(src, beam_size=4, length_penalty=0.6,
                                         max_decoding_length=200)
    for i, r in enumerate(results):
        assert " ".join(r.hypotheses[0]) == want[i][0], i


def fairseq_log_probs(model, task, src_line, tgt_line):
    src = task.source_dictionary.encode_line(src_line, add_if_not_exist=False).long()[None]
    tgt = task.target_dictionary.encode_line(tgt_line, add_if_not_exist=False).long()[None]
    prev = torch.cat([tgt.new_full((1, 1), task.target_dictionary.eos()), tgt[:, :-1]], 1)
    with torch.no_grad():
        out = model(src, torch.tensor([src.size(1)]), prev)
        lp = model.get_normalized_probs(out, log_probs=True)[0]
    return lp.gather(-1, tgt[0][:, None])[:, 0]


@pytest.mark.parametrize("name", ["stock", "relpos_k_keep", "relpos_tied"])
def test_exported_configurations_score_like_fairseq(name, tmp_path):
    """Teacher-forced per-token log-probabilities of test pairs: CTranslate2 float32 vs fairseq."""
    ck = trained_models.trained(name, updates=5)
    data = trained_models.data_dir()
    out = export_ct2(data, ck, str(tmp_path / f"{name}.ct2"))
    models, _, task = load_model_ensemble_and_task([ck], {"data": data})
    model = models[0].eval()
    raw = os.path.join(data, "..", "raw")
    src = [line.strip() for line in open(os.path.join(raw, "test.src"), encoding="utf-8")]
    tgt = [line.strip() for line in open(os.path.join(raw, "test.tgt"), encoding="utf-8")]
    scored = ctranslate2.Translator(out, device="cpu", intra_threads=1).score_batch(
        [s.split() for s in src], [t.split() for t in tgt])
    for s, t, r in zip(src, tgt, scored):
        want = fairseq_log_probs(model, task, s, t)
        torch.testing.assert_close(torch.tensor(r.log_probs), want, rtol=0, atol=2e-4)


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
    with pytest.raises(ExportError, match=r"drops absolute positions when the first layer has relative"):
        build_spec(models[0], task, cfg.model)
