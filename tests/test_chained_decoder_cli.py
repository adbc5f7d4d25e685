"""Chained self-attention in the decoder through fairseq-train and
fairseq-generate --user-dir: beam search decodes incrementally with the cache of the
earlier orders, and every hypothesis' per-token scores equal the full (non-incremental)
forward pass of the same checkpoint on that hypothesis."""

import math
import os
import re

import pytest
import torch

from cli_helpers import PLUGIN_DIR, TINY, TRAIN, generate_in_process, shared_data, train_in_process

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def data_dir():
    return shared_data(120)


def parse_generate(out):
    """{id: (source string, hypothesis string, positional scores in base 2)} of the best hypotheses."""
    src = dict(re.findall(r"^S-(\d+)\t(.*)$", out, flags=re.M))
    hyp = {i: h for i, _, h in re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", out, flags=re.M)}
    pos = dict(re.findall(r"^P-(\d+)\t(.*)$", out, flags=re.M))
    return {i: (src[i], hyp[i], [float(s) for s in pos[i].split()]) for i in hyp}


@pytest.mark.parametrize("form", ["shared", "dense"])
def test_beam_search_scores_equal_full_forward(form, data_dir, tmp_path):
    from fairseq import checkpoint_utils

    save = str(tmp_path / "ck")
    train_in_process([data_dir, "--user-dir", PLUGIN_DIR, "--arch", "transformer_chained_wmt_en_de",
                      "--chained-sides", "both", "--chained-k", "3", "--chained-w-attn", form,
                      *TINY, *TRAIN, "--max-update", "4", "--save-dir", save, "--disable-validation"])
    ckpt = os.path.join(save, "checkpoint_last.pt")
    out = generate_in_process([data_dir, "--user-dir", PLUGIN_DIR, "--path", ckpt, "--beam", "4",
                               "--cpu", "--max-tokens", "2000", "--max-len-b", "10"])
    results = parse_generate(out)
    assert len(results) == 12  # every test sentence translated

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([ckpt])
    model = models[0].eval()
    assert [p.name for p in model.decoder.layers[1].self_attn.pieces] == ["chained"]
    assert model.decoder.layers[0].self_attn.pieces[0].form == form
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    for i, (src, hyp, scores) in results.items():
        src_tokens = src_dict.encode_line(src, add_if_not_exist=False).long()[None]
        tokens = tgt_dict.encode_line(hyp, add_if_not_exist=False).long()  # ends with </s>
        prev = torch.cat([tokens.new_tensor([tgt_dict.eos()]), tokens[:-1]])[None]
        with torch.no_grad():  # full teacher-forced pass: no incremental state
            logits, _ = model(src_tokens, torch.tensor([src_tokens.size(1)]), prev)
            lprobs = model.get_normalized_probs((logits, None), log_probs=True)[0]
        full = lprobs.gather(-1, tokens[:, None])[:, 0] / math.log(2)
        assert len(scores) == tokens.numel(), i
        torch.testing.assert_close(full.double(), torch.tensor(scores, dtype=torch.float64),
                                   rtol=0, atol=2e-4, msg=f"sentence {i}")
