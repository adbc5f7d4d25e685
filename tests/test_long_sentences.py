"""Sentences longer than convattn1d's / dpi's position tables never crash a run
through fairseq-train / fairseq-generate --user-dir on a corpus
holding one long sentence in train, valid and test:

* training skips it with fairseq's 'invalid sizes' warning;
* validation refuses it before the first update (or skips it with
  --skip-invalid-size-inputs-valid-test), never at the first validation;
* generation refuses it up front (or skips it with the same flag).
"""

import logging
import os
import re

import pytest

from cli_helpers import PLUGIN_DIR, TINY, TRAIN, generate_in_process, preprocess_in_process, train_in_process

# one worker trains on this module's own corpus (pytest-xdist --dist loadgroup)
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("long_sentences_corpus")]

LONG = 30  # tokens (+ EOS) of the long sentence; the tables below hold 16 positions (toy <= 13)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    from fairseq_attn_records.toy_corpus import make_corpus, write_corpus

    root = str(tmp_path_factory.mktemp("long"))
    raw, dest = os.path.join(root, "raw"), os.path.join(root, "bin")
    write_corpus(raw, sizes=(("train", 120), ("valid", 12), ("test", 12)))
    words = [w for s, _ in make_corpus(40, seed=9) for w in s.split()]
    for split in ("train", "valid", "test"):
        for lang in ("src", "tgt"):
            with open(os.path.join(raw, f"{split}.{lang}"), "a", encoding="utf-8") as f:
                f.write(" ".join(words[:LONG]) + "\n")
    preprocess_in_process(["--source-lang", "src", "--target-lang", "tgt",
                           "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid",
                           "--testpref", f"{raw}/test", "--destdir", dest,
                           "--joined-dictionary", "--workers", "1"])
    return dest


CASES = {
    # no --max-source-positions: the case of the issue (crashed after 2 updates)
    "convattn1d": ["--arch", "transformer_convattn1d_wmt_en_de", "--convattn-max-len", "16"],
    "dpi": ["--arch", "transformer_dpi_wmt_en_de", "--dpi-max-len", "16", "--dpi-sides", "both",
            "--max-source-positions", "16", "--max-target-positions", "16"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_long_sentences_are_filtered_or_refused_up_front(name, data_dir, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    save = str(tmp_path / "ck")
    base = [data_dir, "--user-dir", PLUGIN_DIR, *CASES[name], *TINY, *TRAIN, "--save-dir", save,
            "--max-update", "3", "--validate-interval-updates", "2"]
    # validation holds the long pair: refused before any update, nothing saved
    with pytest.raises(ValueError, match="skip-invalid-size-inputs-valid-test") as info:
        train_in_process(base)
    assert "validation set 'valid'" in str(info.value)
    assert not any("num_updates" in r.getMessage() and "train_inner" in r.getMessage()
                   for r in caplog.records)
    assert not os.path.exists(os.path.join(save, "checkpoint_last.pt"))
    caplog.clear()
    # skipping: training and validation both skip it with fairseq's warning, and finish
    train_in_process(base + ["--skip-invalid-size-inputs-valid-test"])
    skipped = [r.getMessage() for r in caplog.records if "invalid sizes and will be skipped" in r.getMessage()]
    assert len(skipped) >= 2, skipped  # train and valid
    assert os.path.exists(os.path.join(save, "checkpoint_last.pt"))
    ck = os.path.join(save, "checkpoint_last.pt")
    gen = [data_dir, "--user-dir", PLUGIN_DIR, "--path", ck, "--beam", "2", "--cpu", "--max-len-b", "5"]
    with pytest.raises(Exception, match="skip-invalid-size-inputs-valid-test"):
        generate_in_process(gen)
    out = generate_in_process(gen + ["--skip-invalid-size-inputs-valid-test"])
    assert len(re.findall(r"^H-\d+\t", out, flags=re.M)) == 12  # 13 test pairs, the long one skipped
