"""The committed relpos checkpoint fixture (tests/data/relpos_checkpoint/): how it was made
and what it computes (not a test module).

``python tests/relpos_fixture.py`` wrote the fixture with the code of the commit that added
it, where each relpos table was registered twice (``pieces.0.rel_keys`` and
``_flex_piece.rel_keys``); ``outputs.json`` holds what that code computed from it. Tests
load the fixture with today's code and compare (tests/test_piece_relpos.py).
"""

import json
import os
import shutil
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "data", "relpos_checkpoint")
ARCH_FLAGS = ["--arch", "transformer_relpos_wmt_en_de", "--relpos-k", "3",
              "--encoder-layers", "2", "--decoder-layers", "1", "--encoder-embed-dim", "16",
              "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "16",
              "--decoder-ffn-embed-dim", "16", "--encoder-attention-heads", "4",
              "--decoder-attention-heads", "4", "--share-all-embeddings"]
N_PAIRS = 4


def test_pairs():
    with open(os.path.join(FIXTURE, "test.src"), encoding="utf-8") as f:
        src = [line.strip() for line in f]
    with open(os.path.join(FIXTURE, "test.tgt"), encoding="utf-8") as f:
        tgt = [line.strip() for line in f]
    return list(zip(src, tgt))


def load():
    from fairseq_attn_plugins.loading import load_model_ensemble_and_task

    models, _, task = load_model_ensemble_and_task([os.path.join(FIXTURE, "checkpoint.pt")],
                                                   {"data": FIXTURE, "source_lang": "src", "target_lang": "tgt"})
    return models[0].eval(), task


def outputs(model, task):
    """Teacher-forced per-token log-probabilities of the test pairs and beam-2 hypotheses."""
    from fairseq.sequence_generator import SequenceGenerator

    d = task.source_dictionary
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=2, max_len_b=30)
    log_probs, hyps = [], []
    for s, t in test_pairs():
        src = d.encode_line(s, add_if_not_exist=False).long()[None]
        tgt = task.target_dictionary.encode_line(t, add_if_not_exist=False).long()[None]
        prev = torch.cat([tgt.new_full((1, 1), d.eos()), tgt[:, :-1]], 1)
        with torch.no_grad():
            out = model(src, torch.tensor([src.size(1)]), prev)
            lp = model.get_normalized_probs(out, log_probs=True)[0]
            log_probs.append(lp.gather(-1, tgt[0][:, None])[:, 0].tolist())
            best = gen.forward({"net_input": {"src_tokens": src, "src_lengths": torch.tensor([src.size(1)])}})
        hyps.append(task.target_dictionary.string(best[0][0]["tokens"]))
    return {"log_probs": log_probs, "hypotheses": hyps}


def make():
    sys.path.insert(0, HERE)
    from cli_helpers import PLUGIN_DIR, TRAIN, make_data, train_in_process

    work = tempfile.mkdtemp()
    data = make_data(work, n_train=200)
    train_in_process([data, "--user-dir", PLUGIN_DIR, *ARCH_FLAGS, *TRAIN, "--lr", "3e-3",
                      "--max-update", "3", "--save-dir", os.path.join(work, "ck"),
                      "--no-save-optimizer-state", "--disable-validation"])
    os.makedirs(FIXTURE, exist_ok=True)
    shutil.copy(os.path.join(work, "ck", "checkpoint_last.pt"), os.path.join(FIXTURE, "checkpoint.pt"))
    for name in ("dict.src.txt", "dict.tgt.txt"):
        shutil.copy(os.path.join(data, name), os.path.join(FIXTURE, name))
    for side in ("src", "tgt"):
        with open(os.path.join(work, "raw", f"test.{side}"), encoding="utf-8") as f:
            lines = f.readlines()[:N_PAIRS]
        with open(os.path.join(FIXTURE, f"test.{side}"), "w", encoding="utf-8") as f:
            f.writelines(lines)
    model, task = load()
    with open(os.path.join(FIXTURE, "outputs.json"), "w", encoding="utf-8") as f:
        json.dump(outputs(model, task), f, indent=1)
    shutil.rmtree(work)


if __name__ == "__main__":
    make()
