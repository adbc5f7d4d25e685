"""``--attn-pieces`` never drops a setting silently.

``--attn-pieces`` replaces the pieces of ``--arch``; a flag of a piece that is then not
active, set explicitly on the command line, is refused at model build naming the flag
and the active pieces; the build logs the active pieces per layer. Loops over the
registry: every piece flag is tried with an architecture that lacks the piece.
"""

import logging

import pytest

from fairseq_attn_core import PIECES, PieceConfigError
from fairseq_attn_core.flags import piece_flags
from reliability_helpers import build_model, piece_test_flags


def _cli(dest, value):
    return ["--" + dest.replace("_", "-"), str(value)]


def test_issue_example_is_refused_naming_flag_and_active_pieces():
    with pytest.raises(PieceConfigError) as info:
        build_model("transformer_csan2d_wmt_en_de", cli_extra=["--attn-pieces", "relpos", "--csan-window", "5"])
    msg = str(info.value)
    assert "--csan-window" in msg and "['relpos']" in msg and "--attn-pieces" in msg, msg


FLAGS = sorted(piece_flags().items())


@pytest.mark.parametrize("dest,owners", FLAGS, ids=[d for d, _ in FLAGS])
def test_every_piece_flag_of_an_inactive_piece_is_refused(dest, owners):
    other = next(n for n in sorted(PIECES) if n not in owners)
    value = piece_test_flags(owners[0]).get(dest)
    if value is None:  # a valid value: the piece's default
        from reliability_helpers import plain_args

        value = getattr(plain_args(), dest)
    with pytest.raises(PieceConfigError) as info:
        build_model("transformer_attn_wmt_en_de",
                    {**piece_test_flags(other)},
                    cli_extra=["--attn-pieces", other] + _cli(dest, value))
    msg = str(info.value)
    assert "--" + dest.replace("_", "-") in msg and repr([other]) in msg, msg


def test_flag_of_an_active_piece_is_accepted_and_pieces_are_logged(caplog):
    caplog.set_level(logging.INFO, logger="fairseq_attn_plugins")
    model, args, _ = build_model("transformer_csan2d_wmt_en_de",
                                 cli_extra=["--csan-window", "5", "--csan-layers", "0"])
    assert args.csan_window == 5
    lines = [r.getMessage() for r in caplog.records if "attention pieces per layer" in r.getMessage()]
    assert lines == ["attention pieces per layer (--attn-pieces 'csan2d'): "
                     "encoder 0: csan2d; encoder 1: none; decoder 0-1: none"], lines


def test_defaults_of_inactive_pieces_and_finished_configs_are_not_refused():
    # the arch functions fill every piece's defaults: those were not set by the user
    model, args, task = build_model("transformer_relpos_wmt_en_de", cli_extra=["--relpos-k", "3"])
    assert args.attn_explicit_flags == "relpos_k"
    # a checkpoint written before the record existed holds every flag of the pieces of its
    # day, not those of pieces registered later: it still builds, through the arch function
    from fairseq.models import ARCH_CONFIG_REGISTRY

    del args.attn_explicit_flags
    args.csan_window = 5
    del args.temp_layers, args.temp_sides  # as if 'temp' had been registered after saving
    ARCH_CONFIG_REGISTRY[args.arch](args)
    assert not hasattr(args, "attn_explicit_flags")
    type(model).build_model(args, task)


@pytest.mark.parametrize("given", [lambda flags: flags, lambda flags: flags[:4],
                                   lambda flags: [f for f in flags if f.startswith("csan")]])
def test_a_command_line_is_never_taken_for_a_finished_configuration(given):
    """--attn-backend with any set of piece flags, even all of them, is what the user set: it is
    recorded (a finished configuration is told apart by what no command line holds)."""
    import argparse

    from fairseq_attn_core.flags import record_explicit_flags

    chosen = given(sorted(piece_flags()))
    args = argparse.Namespace(attn_backend="explicit", attn_pieces="relpos",
                              **{f: None for f in chosen})
    record_explicit_flags(args)
    assert args.attn_explicit_flags == ",".join(chosen)
