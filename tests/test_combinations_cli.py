"""Every pair of compatible pieces, combined in one tiny model, trains for a
few updates through fairseq-train --user-dir, and fairseq-generate works from
its checkpoint (in-process runs of fairseq's own main functions).

Each run combines up to four pieces that are compatible pair by pair, chosen so that every
compatible pair is in at least one run (:func:`pair_cover`: 33 runs instead of 158). A pair then
trains beside other pieces, which also tests the larger combinations. Each pair alone, in one
module, is tested in tests/test_piece_registry.py and against a float64 reference in
tests/test_empty_rows.py."""

import itertools
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


def pair_cover(names, pairs, size=4):
    """Groups of at most ``size`` names, every two of a group a pair of ``pairs``, together holding
    every pair of ``pairs``: greedy, deterministic (the first pair not yet held, then the name that
    adds most pairs not yet held, the first of ``names`` on a tie)."""
    allowed = {frozenset(p) for p in pairs}
    left = {frozenset(p) for p in pairs}
    groups = []
    while left:
        group = list(min(left, key=lambda p: sorted(names.index(n) for n in p)))
        while len(group) < size:
            gains = {c: sum(frozenset((c, g)) in left for g in group) for c in names
                     if c not in group and all(frozenset((c, g)) in allowed for g in group)}
            best = max(gains, key=lambda c: (gains[c], -names.index(c)), default=None)
            if best is None or gains[best] == 0:
                break
            group.append(best)
        left -= {frozenset(p) for p in itertools.combinations(group, 2)}
        groups.append(tuple(sorted(group, key=names.index)))
    return groups


GROUPS = pair_cover(sorted(PIECES), COMPATIBLE_PAIRS)


def test_the_runs_hold_every_compatible_pair_and_no_conflicting_one():
    held = {frozenset(p) for g in GROUPS for p in itertools.combinations(g, 2)}
    for a, b in COMPATIBLE_PAIRS:
        assert frozenset((a, b)) in held, (a, b)
    for a in PIECES:
        for b in PIECES[a].conflicts:
            assert frozenset((a, b)) not in held, (a, b)
    assert all(len(g) <= 4 for g in GROUPS) and len(GROUPS) < len(COMPATIBLE_PAIRS)


@pytest.fixture(scope="module")
def data_dir():
    return shared_data(120)


@pytest.fixture(scope="module")
def generate_cfg(data_dir):
    """fairseq-generate's config for every pair's run, composed once; each run names its checkpoint."""
    return generate_config([data_dir, "--user-dir", PLUGIN_DIR, "--path", "PAIR_CHECKPOINT", "--beam", "2",
                            "--cpu", "--max-len-b", "5"])


@pytest.mark.parametrize("group", GROUPS or [None], ids=lambda g: "+".join(g) if g else "none")
def test_pieces_train_and_generate_together(group, data_dir, generate_cfg, tmp_path):
    if group is None:
        pytest.skip("no compatible pair registered yet")
    flags = {}
    for name in group:
        flags.update(PIECES[name].test_flags)
    save = str(tmp_path / "ck")
    train_in_process([data_dir, "--user-dir", PLUGIN_DIR, "--arch", "transformer_attn_wmt_en_de",
                      "--attn-pieces", ",".join(group), *flags_to_cli(flags), *TINY, *TRAIN,
                      "--max-update", "2", "--save-dir", save, "--disable-validation"])
    out = generate_with_config(generate_cfg, os.path.join(save, "checkpoint_last.pt"))
    assert len(re.findall(r"^H-\d+\t", out, flags=re.M)) == 12
