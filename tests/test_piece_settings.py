"""Piece settings declared once, as data (``fairseq_attn_core/settings.py``): the flags, the
defaults the architectures fill in, the validation, the layers a piece covers and the
architecture presets all come from a piece's ``settings``. Loops over the registry, plus
one toy piece declared here to check the derivation itself."""

import argparse

import pytest

from attn_helpers import make_args
from fairseq import options
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq_attn_core import PIECES, AttentionSite, PieceConfigError, build_pieces
from fairseq_attn_core.flags import attention_defaults, piece_flags
from fairseq_attn_core.piece import (
    AttentionPiece,
    Choice,
    Float,
    Int,
    Layers,
    Sides,
    register_piece,
)
from fairseq_attn_plugins.models.transformer_attn import AttnTransformerModel
from reliability_helpers import build_model, piece_test_flags

NAMES = sorted(PIECES)


def _model_parser():
    parser = argparse.ArgumentParser(add_help=False)
    AttnTransformerModel.add_args(parser)
    return {a.dest: a for a in parser._actions}


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_every_declared_setting_is_a_flag_without_argparse_default_and_its_help_names_the_default():
    actions = _model_parser()
    for name, cls in PIECES.items():
        for s in cls.all_settings():
            a = actions[s.name]
            assert a.option_strings == [s.flag] and a.type is s.type, (name, s.name)
            assert a.default is None, f"{s.flag}: architectures set defaults, argparse must not"
            if s.default is not None:
                assert _shown(s.default) in s.help, f"{s.flag}: help does not state the default {s.default!r}"
            if s.choices:
                assert all(c in s.help for c in s.choices), f"{s.flag}: help misses a choice"


def test_defaults_filled_for_every_piece_are_the_declared_ones_and_explicit_values_win():
    args = argparse.Namespace(relpos_k=3)
    attention_defaults(args)
    for cls in PIECES.values():
        for s in cls.all_settings():
            expected = 3 if s.name == "relpos_k" else s.default
            assert getattr(args, s.name) == expected, s.name
    # every flag is owned by the pieces that declare (or accept) it
    owners = piece_flags()
    for dest, names in owners.items():
        for n in names:
            assert dest in {s.name for s in PIECES[n].all_settings()}


@pytest.mark.parametrize("name", NAMES)
def test_a_layer_list_leaving_a_listed_piece_nowhere_is_refused_naming_the_flag(name):
    layers = PIECES[name].layers_setting()
    for empty in ("none", "", " NONE "):
        flags = {**piece_test_flags(name), layers.name: empty}
        with pytest.raises(PieceConfigError) as info:
            make_args(name, **flags)
        msg = str(info.value)
        assert layers.flag in msg and "active on no layer" in msg and "--attn-pieces" in msg, msg


def test_sides_cover_the_declared_self_attentions():
    for name, cls in PIECES.items():
        args = make_args(name, **piece_test_flags(name))
        for side in ("encoder", "decoder"):
            site = AttentionSite(side, 0, 2, 4, 4)
            built = [p.name for p in build_pieces(args, site)]
            assert (name in built) == (side in cls.covered_sides(args)), (name, side)


def test_empty_attn_pieces_is_refused_and_none_is_the_baseline():
    parser = options.get_training_parser(default_task="translation")
    with pytest.raises(PieceConfigError) as info:
        options.parse_args_and_arch(parser, ["/x", "--arch", "transformer_csan2d_wmt_en_de", "--attn-pieces", ""])
    assert "--attn-pieces ''" in str(info.value) and "'none'" in str(info.value)
    model, args, _ = build_model("transformer_csan2d_wmt_en_de", cli_extra=["--attn-pieces", "none"])
    baseline, _, _ = build_model("transformer_attn_wmt_en_de")
    assert args.attn_pieces == "none"
    assert not any(m.pieces for m in model.modules() if hasattr(m, "pieces"))
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in baseline.parameters())
    with pytest.raises(PieceConfigError, match="'none' stands alone"):
        build_model("transformer_attn_wmt_en_de", cli_extra=["--attn-pieces", "none,relpos"])
    # a flag of a piece that 'none' leaves out is refused like any inactive piece's flag
    with pytest.raises(PieceConfigError, match="--csan-window.*not active"):
        build_model("transformer_csan2d_wmt_en_de", cli_extra=["--attn-pieces", "none", "--csan-window", "3"])


def test_presets_register_both_sizes_and_explicit_flags_win():
    presets = [(v, n, p) for n, c in PIECES.items() for v, p in c.architectures.items()]
    assert {v for v, _, _ in presets} >= {"dpi_sanp", "dpi_sanpr", "bidirect"}
    for variant, name, preset in presets:
        for size in ("wmt_en_de", "vaswani_wmt_en_de_big"):
            args = argparse.Namespace()
            ARCH_CONFIG_REGISTRY[f"transformer_{variant}_{size}"](args)
            assert args.attn_pieces == name
            assert {k: getattr(args, k) for k in preset} == preset, variant
    parser = options.get_training_parser(default_task="translation")
    args = options.parse_args_and_arch(parser, ["/x", "--arch", "transformer_dpi_sanp_wmt_en_de", "--dpi-mode", "r"])
    assert (args.dpi_mode, args.dpi_sides) == ("r", "both")


# ---- the derivation itself, on a toy piece --------------------------------------
class _Toy(AttentionPiece):
    """A toy score bias: ``toy_scale`` times the key position, on the chosen layers."""

    name = "toy_settings_piece"
    settings = (
        Int("toy_n", 3, hi="encoder_attention_heads", odd=True,
            help="toy: odd count, 1..encoder heads (default 3)"),
        Float("toy_scale", 0.5, lo=0.0, hi=1.0, hi_open=True, help="toy: scale in [0, 1) (default 0.5)"),
        Choice("toy_mode", "a", ("a", "b"), help="toy: 'a' (default) or 'b'"),
        Sides("toy_sides", "decoder", help="toy: sides (default decoder)"),
        Layers("toy_layers", "1", help="toy: layers (default 1)"),
    )

    def __init__(self, site, args):
        super().__init__(site)
        self.scale = args.toy_scale

    def score_bias(self, q, k, ctx):
        return self.scale * ctx.k_pos.to(q.dtype)[None, None, None, :]


@pytest.fixture
def toy():
    register_piece(_Toy)
    try:
        yield _Toy
    finally:
        del PIECES[_Toy.name]


def test_a_declared_piece_gets_flags_defaults_validation_and_build(toy):
    parser = argparse.ArgumentParser()
    toy.add_args(parser)
    args = parser.parse_args(["--toy-n", "1", "--toy-sides", "both"])
    assert not hasattr(args, "toy_scale") or args.toy_scale is None  # no argparse default
    args = argparse.Namespace(toy_n=1, toy_sides="both", encoder_layers=2, decoder_layers=2,
                              encoder_attention_heads=4, decoder_attention_heads=4,
                              attn_pieces=toy.name)
    attention_defaults(args)
    assert (args.toy_scale, args.toy_mode, args.toy_layers) == (0.5, "a", "1")
    toy.validate(args)
    built = {(s, i): bool(build_pieces(args, AttentionSite(s, i, 2, 4, 4)))
             for s in ("encoder", "decoder") for i in (0, 1)}
    assert built == {("encoder", 0): False, ("encoder", 1): True,
                     ("decoder", 0): False, ("decoder", 1): True}
    for attr, bad, needle in (
        ("toy_n", 2, "--toy-n must be an integer odd and in [1, 4] (got 2)"),
        ("toy_n", 5, "--toy-n must be an integer odd and in [1, 4] (got 5)"),
        ("toy_scale", 1.0, "--toy-scale must be a number in [0.0, 1.0) (got 1.0)"),
        ("toy_mode", "c", "--toy-mode must be one of ['a', 'b'] (got 'c')"),
        ("toy_sides", "middle", "--toy-sides must be 'encoder', 'decoder' or 'encoder,decoder'"),
        ("toy_layers", "7", "--toy-layers: layer index [7] out of range"),
        ("toy_layers", "none", "--toy-layers 'none' leaves toy_settings_piece active on no layer"),
    ):
        wrong = argparse.Namespace(**{**vars(args), attr: bad})
        with pytest.raises(PieceConfigError) as info:
            toy.validate(wrong)
        assert needle in str(info.value), str(info.value)
    assert piece_flags()["toy_mode"] == (toy.name,)


def test_a_malformed_declaration_is_refused_at_registration():
    def piece(settings, sides=None, name="toy_malformed"):
        return type("Bad", (AttentionPiece,), {"name": name, "settings": settings, "sides": sides})

    lay = Layers("toy_layers", "0", help="toy (default 0)")
    with pytest.raises(ValueError, match="exactly one Layers"):
        register_piece(piece((), sides=("encoder",)))
    with pytest.raises(ValueError, match="either a Sides"):
        register_piece(piece((lay,)))
    with pytest.raises(ValueError, match="either a Sides"):
        register_piece(piece((lay, Sides("toy_sides", "encoder", help="x (default encoder)")), sides=("encoder",)))
    other = Layers("csan_layers", "all", help="clashes with csan's declaration (default all)")
    with pytest.raises(ValueError, match="differs from the one of"):
        register_piece(piece((other,), sides=("encoder",)))
    with pytest.raises(ValueError, match="registered twice"):
        register_piece(piece((lay,), sides=("encoder",), name="relpos"))
    assert "toy_malformed" not in PIECES

