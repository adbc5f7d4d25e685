"""A single-valued option given twice is refused by every command of the distribution (argparse
alone keeps the last value without a word)."""

import ast
import os

import pytest

from fairseq_attn_records.command_line import Parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def refusal(parser, argv, capsys):
    with pytest.raises(SystemExit) as e:
        parser.parse_args(argv)
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def sample_parser():
    p = Parser(prog="cmd")
    p.add_argument("--speed")
    p.add_argument("--n", type=int)
    p.add_argument("--pair", nargs=2)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--quiet", action="store_true")
    p.add_argument_group("outputs").add_argument("--md")
    sub = p.add_subparsers(dest="cmd")
    claims = sub.add_parser("claims")
    claims.add_argument("--table1")
    return p


@pytest.mark.parametrize("argv, said", [
    (["--speed", "a.json", "--speed", "b.json"], "--speed given twice (--speed a.json, then --speed b.json): give it once"),
    (["--speed=a.json", "--speed", "a.json"], "--speed given twice (--speed a.json, then --speed a.json)"),
    (["--n", "1", "--n", "2"], "--n given twice (--n 1, then --n 2)"),
    (["--pair", "a", "b", "--pair", "c", "d"], "--pair given twice (--pair a b, then --pair c d)"),
    (["--md", "x.md", "--md", "y.md"], "--md given twice"),
    (["--md", "a b.md", "--md", "c.md"], "--md given twice (--md 'a b.md', then --md c.md)"),
    (["claims", "--table1", "t.json", "--table1", "u.json"], "--table1 given twice"),
])
def test_a_single_valued_option_given_twice_is_refused_naming_both_values(argv, said, capsys):
    assert said in refusal(sample_parser(), argv, capsys)


def test_options_that_collect_or_switch_and_a_parser_used_again_are_as_argparse_makes_them():
    p = sample_parser()
    args = p.parse_args(["--set", "A=1", "--set", "B=2", "--quiet", "--quiet", "--speed", "a.json"])
    assert args.set == ["A=1", "B=2"] and args.quiet and args.speed == "a.json"
    # the same parser again: the earlier command line's options are not "given before"
    assert p.parse_args(["--speed", "b.json"]).speed == "b.json"
    assert p.parse_args(["claims", "--table1", "t.json"]).table1 == "t.json"


@pytest.mark.parametrize("main, argv", [
    ("fairseq_attn_reports.cli.paper", ["claims", "--table1", "a.json", "--speed", "s.json", "--speed", "t.json"]),
    ("fairseq_attn_reports.cli.results", ["--ref", "r.txt", "--ref", "s.txt", "run"]),
    ("fairseq_attn_plugins.cli.export", ["data", "--path", "a.pt", "--path", "b.pt", "--to", "ct2",
                                         "--output-dir", "o"]),
])
def test_a_command_refuses_an_option_given_twice_before_it_reads_or_writes(main, argv, tmp_path, capsys,
                                                                            monkeypatch):
    import importlib

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        importlib.import_module(main).main(argv)
    assert e.value.code == 2
    assert "given twice" in capsys.readouterr().err.strip().splitlines()[-1]
    assert os.listdir(tmp_path) == []


#: argparse parsers that parse no user's command line (they read what a model declares)
NOT_COMMANDS = {"fairseq_attn_plugins/models/hydra_config.py"}


def test_every_command_of_the_distribution_parses_with_the_parser_that_refuses_repeats():
    plain = []
    for package in ("fairseq_attn_records", "fairseq_attn_core", "fairseq_attn_plugins", "fairseq_attn_reports",
                    "fairseq_attn_recipes"):
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, ROOT)
                if not name.endswith(".py") or rel in NOT_COMMANDS:
                    continue
                for node in ast.walk(ast.parse(open(path).read())):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                            node.func.attr == "ArgumentParser":
                        plain.append(f"{rel}:{node.lineno}")
    assert plain == []
    assert all(os.path.exists(os.path.join(ROOT, p)) for p in NOT_COMMANDS)
