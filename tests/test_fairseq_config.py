"""tests/cli_helpers.fairseq_config, the config of the in-process fairseq runs, is fairseq's own:
``convert_namespace_to_omegaconf`` of the same arguments, node for node."""

import os
import sys
from argparse import Namespace

sys.path.insert(0, os.path.dirname(__file__))
from cli_helpers import PLUGIN_DIR, TINY, TRAIN, fairseq_config  # noqa: E402


def assert_same(ours, theirs, where="cfg"):
    """Every node of two configs: its kind, flags and value (a Namespace: every attribute, and not
    the same object)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    assert type(ours) is type(theirs), where
    assert OmegaConf.is_struct(ours) == OmegaConf.is_struct(theirs), where
    assert OmegaConf.is_readonly(ours) == OmegaConf.is_readonly(theirs), where
    keys = list(ours.keys()) if isinstance(ours, DictConfig) else list(range(len(ours)))
    assert keys == (list(theirs.keys()) if isinstance(theirs, DictConfig) else list(range(len(theirs)))), where
    for k in keys:
        a, b = ours._get_node(k), theirs._get_node(k)
        assert type(a) is type(b), f"{where}.{k}"
        if isinstance(a, (DictConfig, ListConfig)):
            assert_same(a, b, f"{where}.{k}")
            continue
        va, vb = a._value(), b._value()
        assert type(va) is type(vb) and va == vb, (f"{where}.{k}", va, vb)
        if isinstance(va, Namespace):
            assert va is not vb
            assert list(vars(va).items()) == list(vars(vb).items()), f"{where}.{k}"
            assert [type(v) for v in vars(va).values()] == [type(v) for v in vars(vb).values()], f"{where}.{k}"


def test_the_config_is_fairseqs_own_and_each_run_gets_its_own(tmp_path):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    data = str(tmp_path / "bin")  # parsing reads no data
    train = [data, "--user-dir", PLUGIN_DIR, *TINY, *TRAIN]
    runs = [  # two runs differing in values and a config group, a model with a dataclass, generation
        ("train", [*train, "--arch", "transformer_relpos_wmt_en_de", "--relpos-k", "4", "--max-update", "2",
                   "--save-dir", str(tmp_path / "a")]),
        ("train", [*train, "--arch", "transformer_relpos_wmt_en_de", "--relpos-k", "3", "--max-update", "5",
                   "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4",
                   "--save-dir", str(tmp_path / "b"), "--tensorboard-logdir", str(tmp_path / "b" / "tb")]),
        ("train", [data, "--task", "language_modeling", "--arch", "transformer_lm", "--optimizer", "adam"]),
        ("generate", [data, "--user-dir", PLUGIN_DIR, "--path", str(tmp_path / "a" / "c.pt"), "--beam", "2",
                      "--cpu", "--num-workers", "0"]),
        # the first run's config groups with other values (a list among them): only those are applied again
        ("train", [*train, "--arch", "transformer_relpos_wmt_en_de", "--relpos-k", "5", "--max-update", "7",
                   "--lr", "5e-4", "--save-dir", str(tmp_path / "c")]),
    ]

    def parsed(kind, argv):
        parser = options.get_training_parser() if kind == "train" else options.get_generation_parser()
        return options.parse_args_and_arch(parser, argv)

    configs = []
    for kind, argv in runs:
        args = parsed(kind, argv)
        ours = fairseq_config(args)
        assert_same(ours, convert_namespace_to_omegaconf(args))
        configs.append(ours)
    assert type(configs[2].model).__name__ == "DictConfig"  # composed from the model's config group
    # each call its own config: a change to one is in no other, nor in a later call's
    configs[0].optimization.max_update = 99
    configs[0].model.relpos_k = 9
    assert configs[1].optimization.max_update == 5 and configs[1].model.relpos_k == 3
    again = fairseq_config(parsed(*runs[0]))
    assert again.optimization.max_update == 2 and again.model.relpos_k == 4
    assert again.checkpoint.save_dir == str(tmp_path / "a")
