"""Fine-tuning a stock fairseq Transformer checkpoint into models with new pieces
(--attn-init-new-params): the checkpoint's weights are restored exactly, the new piece
parameters are those of a from-scratch run with the same seed, each is logged, and every
other missing or unexpected key is still refused."""

import logging
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
import trained_models  # noqa: E402
from cli_helpers import PLUGIN_DIR, TINY, TRAIN, train_in_process  # noqa: E402

from fairseq_attn_core import PieceConfigError  # noqa: E402
from fairseq_attn_plugins.checkpoint_safety import safe_load  # noqa: E402
from fairseq_attn_plugins.models.finetune import piece_keys  # noqa: E402

pytestmark = pytest.mark.e2e

PIECES = {
    "relpos": ["--relpos-k", "3"],
    "localsoft": [],
    "chained": ["--chained-w-attn", "shared"],
    "dpi": [],
}


@pytest.fixture(scope="module")
def stock():
    return trained_models.trained("stock", updates=2)


def restore(arch, save_dir, *extra):
    """What fairseq-train does up to its checkpoint restore (fairseq's own functions, in
    its order: seed, task, model, criterion, trainer, load_checkpoint); returns the model."""
    from fairseq import checkpoint_utils, options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    argv = [trained_models.data_dir(), "--user-dir", PLUGIN_DIR, "--arch", arch, *TINY, *TRAIN,
            "--share-all-embeddings", "--save-dir", save_dir, *extra]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    checkpoint_utils.load_checkpoint(cfg.checkpoint, trainer)
    return model


@pytest.mark.parametrize("piece", sorted(PIECES))
def test_stock_checkpoint_into_piece(piece, stock, tmp_path, caplog):
    arch = f"transformer_{piece}_wmt_en_de"
    with caplog.at_level(logging.INFO):
        fine = restore(arch, str(tmp_path / "fine"), *PIECES[piece], "--finetune-from-model", stock,
                       "--attn-init-new-params")
    scratch = restore(arch, str(tmp_path / "scratch"), *PIECES[piece])  # training start, no checkpoint
    saved = safe_load(stock)["model"]
    got, start = fine.state_dict(), scratch.state_dict()
    new = sorted(k for k in got if k not in saved)
    owners = piece_keys(fine)
    assert new and all(owners.get(k) == piece for k in new), new
    if piece == "chained":  # one W_attn per layer shared by the heads (D = 4, K = 4)
        assert all(k.endswith("w_attn.weight") and tuple(got[k].shape) == (4, 16) for k in new)  # D x K*D
    for k in new:  # as at training start with the same seed
        torch.testing.assert_close(got[k], start[k], rtol=0, atol=0, msg=k)
    for k, v in saved.items():  # everything else is the checkpoint's
        if k in got:
            torch.testing.assert_close(got[k], v, rtol=0, atol=0, msg=k)
        else:  # only the sinusoidal placeholder of a model without position embeddings
            assert k.endswith("embed_positions._float_tensor") and piece == "relpos", k
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("--attn-init-new-params:   ")]
    assert sorted(m.split()[1] for m in logged) == new


def test_refusals(stock, tmp_path):
    # without the option: refused, naming the missing parameters and the option
    with pytest.raises(PieceConfigError, match=r"lacks \d+ parameter\(s\) of the active piece\(s\) "
                                               r"\['relpos'\].*--attn-init-new-params"):
        restore("transformer_relpos_wmt_en_de", str(tmp_path / "a"), "--finetune-from-model", stock)
    # a key the model does not have (another piece's learned table) is never dropped
    relpos = trained_models.trained("relpos")
    with pytest.raises(PieceConfigError, match=r"holds \d+ key\(s\) this model does not have: "
                                               r"encoder\.layers\.0\.self_attn\.pieces\.0\.rel_keys"):
        restore("transformer_localsoft_wmt_en_de", str(tmp_path / "b"), "--finetune-from-model", relpos,
                "--attn-init-new-params")
    # a missing weight that no piece owns is refused by the strict load
    state = safe_load(stock)
    del state["model"]["encoder.layers.1.fc1.weight"]
    broken = str(tmp_path / "broken.pt")
    torch.save(state, broken)
    with pytest.raises(Exception, match="Cannot load model parameters") as e:  # fairseq's wrapper
        restore("transformer_relpos_wmt_en_de", str(tmp_path / "c"), "--finetune-from-model", broken,
                "--attn-init-new-params")
    assert "Missing key(s)" in str(e.value.__context__)
    assert "encoder.layers.1.fc1.weight" in str(e.value.__context__)


def test_fairseq_train_fine_tunes_and_resumes(stock, tmp_path):
    """The real fairseq-train: fine-tunes from the stock checkpoint, then resumes its own
    checkpoint (complete: nothing initialised again)."""
    save = str(tmp_path / "run")
    argv = [trained_models.data_dir(), "--user-dir", PLUGIN_DIR, "--arch", "transformer_relpos_wmt_en_de",
            *TINY, *TRAIN, "--relpos-k", "3", "--share-all-embeddings", "--save-dir", save,
            "--finetune-from-model", stock, "--attn-init-new-params", "--disable-validation",
            "--no-save-optimizer-state"]
    train_in_process([*argv, "--max-update", "1"])
    state = safe_load(os.path.join(save, "checkpoint_last.pt"))
    assert state["optimizer_history"][-1]["num_updates"] == 1
    assert any(k.endswith("rel_values") for k in state["model"])
    train_in_process([*argv, "--max-update", "2"])  # resumes checkpoint_last (the option is a no-op)
    assert safe_load(os.path.join(save, "checkpoint_last.pt"))["optimizer_history"][-1]["num_updates"] == 2
