"""The piece docs and the declarations agree: every registered piece has exactly one flag
table in docs/pieces/, equal to the one generated from its settings, and the index lists it."""

import glob
import os

from fairseq_attn_core import PIECES, catalogue
from fairseq_attn_plugins.cli.pieces import main as pieces_main, piece_names

DOCS = os.path.join(os.path.dirname(__file__), "..", "docs", "pieces")


def doc_tables():
    tables = {}
    for path in sorted(glob.glob(os.path.join(DOCS, "*.md"))):
        with open(path, encoding="utf-8") as f:
            for name, body in catalogue.doc_blocks(f.read()).items():
                assert name not in tables, f"{name}: flag tables in two docs"
                tables[name] = (os.path.basename(path), body)
    return tables


def test_every_piece_has_its_generated_flag_table_in_one_doc():
    tables = doc_tables()
    assert sorted(tables) == sorted(PIECES)
    for name, (doc, body) in tables.items():
        assert body == catalogue.markdown_table(PIECES[name]), (
            f"docs/pieces/{doc}: the flag table of {name} differs from its declarations; "
            f"run fairseq-attn-pieces --update-docs docs/pieces")


def test_the_command_reads_the_names_the_registry_holds():
    """fairseq-attn-pieces refuses an unknown name by the names it reads from the pieces' files
    (without importing torch): the same as the registered pieces'."""
    assert piece_names() == sorted(PIECES)


def test_every_flag_is_in_the_docs_with_its_default():
    text = "".join(open(p, encoding="utf-8").read() for p in glob.glob(os.path.join(DOCS, "*.md")))
    for cls in PIECES.values():
        for s in cls.all_settings():
            assert f"| `{s.flag}` | `{s.default!r}` |" in text, s.flag
    for flag in ("--rope-sides", "--rope-layers", "--rope-abs-pos", "--t5-sides", "--t5-layers",
                 "--t5-abs-pos", "--alibi-abs-pos"):
        assert f"`{flag}`" in text


def test_the_index_links_every_piece_to_its_doc():
    with open(os.path.join(DOCS, "README.md"), encoding="utf-8") as f:
        index = f.read()
    tables = doc_tables()
    for name, (doc, _) in tables.items():
        assert f"| `{name}` | [{doc}]({doc}) |" in index, name


def test_the_command_lists_pieces_flags_and_arch_layers(capsys):
    assert pieces_main(["relpos"]) == 0
    out = capsys.readouterr().out
    for s in PIECES["relpos"].all_settings():
        assert f"{s.flag} (default {s.default!r}; {catalogue.allowed(s)})" in out
    assert pieces_main(["--arch", "transformer_csan2d_wmt_en_de"]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [
        "--attn-pieces 'csan2d': encoder 0-2: csan2d; encoder 3-5: none; decoder 0-5: none",
        "csan2d: --csan-window 11, --csan-layers '0-2', --csan-heads 3, --csan-head-edge 'cut'"]
    # each active piece's flags with the architecture's values (a preset of dpi's flags here)
    assert pieces_main(["--arch", "transformer_dpi_sanp_wmt_en_de"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1].startswith("dpi: ") and "--dpi-mode 'p'" in lines[1] and "--dpi-sides 'both'" in lines[1]
    assert pieces_main(["--arch", "transformer_t5bias_wmt_en_de"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[1].startswith("t5bias: --t5-buckets 32, --t5-max-distance 128")
    # the summaries are whole sentences; allowed values name the rules check_combination adds
    assert pieces_main(["block", "cnns", "t5bias"]) == 0
    out = capsys.readouterr().out
    assert "block: Intra-block attention, source2token block summaries, inter-block attention and a gate " in out
    assert "cnns: QANet convolution sublayers" in out
    assert "--t5-buckets (default 32; integer >= 4, even)" in out
    assert "--t5-max-distance (default 128; integer >= 3, > --t5-buckets / 2)" in out
    for cls in PIECES.values():
        assert catalogue.summary(cls).endswith("."), cls.name
    assert pieces_main(["nosuchpiece"]) == 1
    assert "unknown piece" in capsys.readouterr().err
    # an unknown architecture: the nearest three names, not every one
    assert pieces_main(["--arch", "transformer_csan2_wmt_en_de"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "transformer_relpos_wmt_en_de" not in err, err
    nearest = err.split("the nearest: ", 1)[1].split(" (", 1)[0].split(", ")
    assert len(nearest) == 3 and "transformer_csan2d_wmt_en_de" in nearest and "transformer_csan1d_wmt_en_de" in nearest, err


def test_update_docs_rewrites_a_stale_table(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("# x\n\n<!-- flags: temp -->\n| stale |\n<!-- /flags -->\n", encoding="utf-8")
    assert pieces_main(["--update-docs", str(tmp_path)]) == 0
    assert catalogue.doc_blocks(doc.read_text(encoding="utf-8"))["temp"] == \
        catalogue.markdown_table(PIECES["temp"])
