"""Every pair of compatible pieces, combined in one tiny model, trains for a
few updates through fairseq-train --user-dir, and fairseq-generate works from
its checkpoint (in-process runs of fairseq's own main functions)."""

import os
import re

import pytest

from cli_helpers import PLUGIN_DIR, TINY, TRAIN, generate_config, generate_with_config, shared_data, train_in_process
from test_piece_registry import COMPATIBLE_PAIRS, PIECES

pytestmark = pytest.mark.e2e


def flags_to_cli(flags):
    argv = []
    for key, value in flags.items():
        opt = "--" + key.replace("_", "-")
        if value is True:
            argv.append(opt)
        elif value is not False and value is not None:
            argv += [opt, str(value)]
    return argv


@pytest.fixture(scope="module")
def data_dir():
    return shared_data(120)


@pytest.fixture(scope="module")
def generate_cfg(data_dir):
    """fairseq-generate's config for every pair's run, composed once; each run names its checkpoint."""
    return generate_config([data_dir, "--user-dir", PLUGIN_DIR, "--path", "PAIR_CHECKPOINT", "--beam", "2",
                            "--cpu", "--max-len-b", "5"])


@pytest.mark.parametrize("pair", COMPATIBLE_PAIRS or [None])
def test_pair_trains_and_generates(pair, data_dir, generate_cfg, tmp_path):
    if pair is None:
        pytest.skip("no compatible pair registered yet")
    flags = {}
    for name in pair:
        flags.update(PIECES[name].test_flags)
    save = str(tmp_path / "ck")
    train_in_process([data_dir, "--user-dir", PLUGIN_DIR, "--arch", "transformer_attn_wmt_en_de",
                      "--attn-pieces", ",".join(pair), *flags_to_cli(flags), *TINY, *TRAIN,
                      "--max-update", "2", "--save-dir", save, "--disable-validation"])
    out = generate_with_config(generate_cfg, os.path.join(save, "checkpoint_last.pt"))
    assert len(re.findall(r"^H-\d+\t", out, flags=re.M)) == 12
