"""End to end through ``--user-dir``: preprocess, train every registered
architecture (shrunk by flags) for a few updates, generate from the checkpoint,
and resume from checkpoint_last.pt (the architecture of every registered piece that has
weights, restoring them; the console tools with csan2d)."""

import os
import re

import pytest
import torch
from fairseq.models import ARCH_MODEL_REGISTRY

from cli_helpers import PLUGIN_DIR, TINY, TRAIN, generate_config, generate_with_config, run_cli, shared_data, train_in_process
from fairseq_attn_core import PIECES

PLUGIN_ARCHS = sorted(a for a, m in ARCH_MODEL_REGISTRY.items() if m.__name__ == "AttnTransformerModel")
PIECE_ARCHS = {f"transformer_{name}_wmt_en_de" for name in PIECES}  # one per registered piece

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def data_dir():
    return shared_data()


@pytest.fixture(scope="module")
def generate_cfg(data_dir):
    """fairseq-generate's config for every architecture's run, composed once; each run names its checkpoint."""
    return generate_config([data_dir, "--user-dir", PLUGIN_DIR, "--path", "ARCH_CHECKPOINT", "--beam", "4",
                            "--cpu", "--max-tokens", "2000", "--max-len-b", "10"])


def count_hypotheses(output):
    return len(re.findall(r"^H-\d+\t", output, flags=re.M))


def test_every_variant_has_base_and_big_architectures():
    variants = {re.sub(r"_(wmt_en_de|vaswani_wmt_en_de_big)$", "", a) for a in PLUGIN_ARCHS}
    for v in variants:
        assert f"{v}_wmt_en_de" in PLUGIN_ARCHS and f"{v}_vaswani_wmt_en_de_big" in PLUGIN_ARCHS
    assert {"transformer_attn", "transformer_csan1d", "transformer_csan2d"} <= variants


@pytest.mark.parametrize("arch", PLUGIN_ARCHS)
def test_train_and_generate_every_architecture(arch, data_dir, generate_cfg, tmp_path):
    save = str(tmp_path / "ck")
    base = [data_dir, "--user-dir", PLUGIN_DIR, "--arch", arch, *TINY, *TRAIN, "--save-dir", save]
    train_in_process(base + ["--max-update", "2"])
    assert os.path.exists(os.path.join(save, "checkpoint_last.pt"))
    out = generate_with_config(generate_cfg, os.path.join(save, "checkpoint_last.pt"))
    assert count_hypotheses(out) == 12  # every test sentence translated
    assert "BLEU" in out
    if arch in PIECE_ARCHS:
        check_resume_restores_the_pieces(arch, base, save)


def check_resume_restores_the_pieces(arch, base, save):
    """checkpoint_last.pt @ 2 updates holds every weight of the pieces that the architecture
    builds; where there are some, fairseq-train resumes from it and goes on to update 3
    (the resume of a piece without weights is the csan2d run below)."""
    from attn_helpers import build_model

    built, _, _ = build_model(arch, extra=TINY)
    pieces = {k for k in built.state_dict() if ".pieces." in k}
    first = torch.load(f"{save}/checkpoint_last.pt", weights_only=False)["model"]
    assert {k for k in first if ".pieces." in k} == pieces
    if not pieces:
        return
    train_in_process(base + ["--max-update", "3"])
    last = torch.load(f"{save}/checkpoint_last.pt", weights_only=False)
    # a run started afresh would record [3]: the history of the loaded checkpoint goes on
    assert [h["num_updates"] for h in last["optimizer_history"]] == [2, 3]
    assert {k for k in last["model"] if ".pieces." in k} == pieces


def test_cli_train_generate_resume_with_user_dir_folder(data_dir, tmp_path):
    """The real console tools, with --user-dir pointing at the package folder: fairseq-generate
    on a checkpoint, and fairseq-train resuming it (the first 3 updates are trained by the same
    main in this process: a fresh fairseq-train's start is the resumed run's)."""
    save = str(tmp_path / "ck")
    base = [data_dir, "--user-dir", PLUGIN_DIR, "--arch", "transformer_csan2d_wmt_en_de", *TINY, *TRAIN,
            "--save-dir", save]
    train_in_process(base + ["--max-update", "3"])
    first = torch.load(f"{save}/checkpoint_last.pt", weights_only=False)
    assert [h["num_updates"] for h in first["optimizer_history"]] == [3]
    _, gen = run_cli("fairseq_cli.generate", [data_dir, "--user-dir", PLUGIN_DIR, "--path",
                                              f"{save}/checkpoint_last.pt", "--beam", "4", "--cpu",
                                              "--max-len-b", "10"])
    assert count_hypotheses(gen) == 12
    # resume: the same command with a larger budget continues from update 3
    _, log2 = run_cli("fairseq_cli.train", base + ["--max-update", "5"])
    assert re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 3 updates\)", log2), log2[-3000:]
    assert re.search(r"num_updates[ =]5", log2)
    assert "weights_only" not in log2 and "UnpicklingError" not in log2
