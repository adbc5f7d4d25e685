"""``fairseq-hydra-train`` for every registered architecture of the ``transformer_attn``
model: each one trains one update from a yaml (in-process, the code path of
``fairseq_cli.hydra_train``), the yaml and the command line build identical models with
identical parameters, the real command runs once and its checkpoint loads, and a yaml key
that is no flag of the model is refused naming it."""

import copy
import logging
import os
import subprocess

import pytest
import torch
import yaml
from fairseq import checkpoint_utils, options, tasks
from fairseq.dataclass.initialize import hydra_init
from fairseq.models import ARCH_MODEL_NAME_REGISTRY
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch.testing import assert_close

from fairseq_attn_core import PieceConfigError
from fairseq_attn_plugins.models.hydra_config import model_config_class
from fairseq_attn_plugins.models.transformer_attn import AttnTransformerModel
from cli_helpers import shared_data
from reliability_helpers import TINY, arch_pieces, arch_test_flags, bin_dir, cli, env, user_dir

ARCHS = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == "transformer_attn")
# training runs: every base-size architecture and one big one (a big architecture differs
# from its base only by fairseq's defaults, which the tiny yaml overrides; every big one is
# in the yaml/command-line build comparison)
TRAINED = [a for a in ARCHS if not a.endswith("_big")] + ["transformer_csan2d_vaswani_wmt_en_de_big"]


@pytest.fixture(scope="module")
def data():
    return shared_data(300)  # the corpus trained_models binarises: one fairseq-preprocess for both


def _model_flags(arch):
    return {**TINY, **arch_test_flags(arch)}


def _write_yaml(folder, name, data, arch, model_extra=None, save_dir=None):
    run = {
        "common": {"user_dir": user_dir(), "cpu": True, "seed": 3, "no_progress_bar": True,
                   "log_interval": 1},
        "task": {"_name": "translation", "data": data, "source_lang": "src", "target_lang": "tgt"},
        "dataset": {"max_tokens": 400, "num_workers": 0, "disable_validation": True},
        "optimization": {"max_update": 1, "lr": [0.001]},
        "optimizer": {"_name": "adam"},
        "lr_scheduler": {"_name": "fixed"},
        "criterion": {"_name": "cross_entropy"},
        # fairseq-train checks that it can write to save_dir even with no_save: in the test's folder
        "checkpoint": ({"save_dir": save_dir, "no_epoch_checkpoints": True} if save_dir
                       else {"no_save": True, "save_dir": os.path.join(folder, "checkpoints")}),
        "model": {"_name": arch, **_model_flags(arch), **(model_extra or {})},
    }
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{name}.yaml"), "w") as f:
        yaml.safe_dump(run, f)
    return run


def _compose(folder, name):
    hydra_init(name)
    with initialize_config_dir(config_dir=folder, version_base="1.1"):
        return compose(config_name=name)


@pytest.fixture(scope="module")
def task(data):
    parser = options.get_training_parser(default_task="translation")
    return tasks.setup_task(options.parse_args_and_arch(parser, [data, "--arch", "transformer_attn_wmt_en_de"]))


def _build(task, model_cfg, seed=11):
    torch.manual_seed(seed)
    return task.build_model(model_cfg)


def _yaml_model(folder, name):
    """The yaml's model section as fairseq_cli.hydra_train hands it to the model: a plain
    struct DictConfig (hydra's composition of it is covered by the training test)."""
    cfg = OmegaConf.load(os.path.join(folder, f"{name}.yaml"))
    OmegaConf.set_struct(cfg, True)
    return cfg.model


def _cli_args(data, arch):
    parser = options.get_training_parser(default_task="translation")
    return options.parse_args_and_arch(parser, [data, "--arch", arch, *cli(_model_flags(arch))])


@pytest.mark.parametrize("arch", ARCHS)
def test_yaml_and_command_line_build_identical_models(arch, data, task, tmp_path):
    _write_yaml(str(tmp_path), "run", data, arch)
    from_yaml = _build(task, _yaml_model(str(tmp_path), "run"))
    from_cli = _build(task, _cli_args(data, arch))
    a, b = from_yaml.state_dict(), from_cli.state_dict()
    assert list(a) == list(b)
    for key in a:
        assert_close(a[key], b[key], rtol=0, atol=0, msg=key)
    for field in model_config_class(AttnTransformerModel).__dataclass_fields__:
        if not field.startswith("_"):
            assert getattr(from_yaml.args, field, None) == getattr(from_cli.args, field, None), (arch, field)
    pieces = [p.name for m in from_yaml.modules() for p in getattr(m, "pieces", [])]
    assert bool(pieces) == ("_attn_" not in arch), (arch, pieces)


def test_every_architecture_trains_one_update_from_a_yaml(data, tmp_path, caplog):
    """fairseq_cli.hydra_train's code path, in-process: the run config is composed by hydra
    once; each architecture's yaml gives the model section (composing every yaml again
    would only repeat the same non-model sections)."""
    from fairseq_cli.hydra_train import _hydra_main

    _write_yaml(str(tmp_path), "run", data, TRAINED[0])
    composed = _compose(str(tmp_path), "run")
    caplog.set_level(logging.INFO)
    for arch in TRAINED:
        _write_yaml(str(tmp_path / arch), "run", data, arch)
        cfg = copy.deepcopy(composed)
        cfg.model = _yaml_model(str(tmp_path / arch), "run")
        caplog.clear()
        _hydra_main(cfg)  # raises on any failure
        lines = [r.getMessage() for r in caplog.records]
        assert any("num_updates 1 " in m for m in lines), (arch, lines[-5:])
        pieces = ",".join(arch_pieces(arch))
        assert any(f"pieces per layer (--attn-pieces {pieces!r})" in m for m in lines), arch


def test_unknown_or_mistyped_yaml_key_is_refused_naming_it(data, task, tmp_path):
    arch = "transformer_csan2d_wmt_en_de"
    for extra, needle in (({"csan_windw": 5}, "model.csan_windw"), ({"csan_window": "wide"}, "model.csan_window")):
        _write_yaml(str(tmp_path), "bad", data, arch, model_extra=extra)
        with pytest.raises(PieceConfigError) as info:
            _build(task, _yaml_model(str(tmp_path), "bad"))
        assert needle in str(info.value), str(info.value)
    # a flag of a piece the yaml leaves inactive is refused as on the command line
    _write_yaml(str(tmp_path), "inactive", data, arch, model_extra={"attn_pieces": "relpos", "relpos_abs_pos": "keep"})
    with pytest.raises(PieceConfigError, match="--csan-(window|layers) belongs to csan1d / csan2d"):
        _build(task, _yaml_model(str(tmp_path), "inactive"))


@pytest.mark.e2e
def test_fairseq_hydra_train_command_and_its_checkpoint(data, tmp_path):
    arch = "transformer_relpos_wmt_en_de"
    save = str(tmp_path / "ckpt")
    _write_yaml(str(tmp_path), "run", data, arch, save_dir=save)
    p = subprocess.run([os.path.join(bin_dir(), "fairseq-hydra-train"), "--config-dir", str(tmp_path),
                        "--config-name", "run", f"hydra.run.dir={tmp_path / 'hydra'}"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(), timeout=300)
    assert p.returncode == 0, p.stdout[-3000:]
    assert "num_updates 1" in p.stdout
    models, cfg, _ = checkpoint_utils.load_model_ensemble_and_task([os.path.join(save, "checkpoint_last.pt")])
    saved = cfg.model
    assert (saved.attn_pieces, saved.relpos_k, saved.relpos_layers, saved.attn_explicit_flags) == \
        ("relpos", 2, "0", "relpos_k,relpos_layers")
    assert [p.name for p in models[0].encoder.layers[0].self_attn.pieces] == ["relpos"]
    state = checkpoint_utils.load_checkpoint_to_cpu(os.path.join(save, "checkpoint_last.pt"))["model"]
    for key, value in models[0].state_dict().items():
        assert_close(value, state[key].to(value.dtype), msg=key)
