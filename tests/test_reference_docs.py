"""The generated reference pages (docs/reference/variables.md, cli.md) equal what the code gives,
and the command list of the generator is pyproject.toml's."""

import os
import re

from fairseq_attn_recipes import reference_docs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDER = os.path.join(ROOT, "docs", "reference")


def committed(name):
    with open(os.path.join(FOLDER, name), encoding="utf-8") as f:
        return f.read()


def test_the_variables_page_is_the_table_of_the_code():
    assert committed("variables.md") == reference_docs.variables_page(), (
        "docs/reference/variables.md differs from fairseq_attn_recipes/variables.py; "
        "run python -m fairseq_attn_recipes.reference_docs docs/reference")


def test_the_command_page_is_every_commands_help():
    assert committed("cli.md") == reference_docs.cli_page(), (
        "docs/reference/cli.md differs from the commands' parsers; "
        "run python -m fairseq_attn_recipes.reference_docs docs/reference")


def test_every_console_command_is_documented():
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        scripts = f.read().split("[project.scripts]\n", 1)[1].split("\n\n", 1)[0]
    declared = dict(re.findall(r'^([\w-]+) = "([\w.:]+)"$', scripts, re.M))
    assert declared == dict(reference_docs.COMMANDS)


def test_check_names_a_page_that_differs(tmp_path, capsys):
    for name, make in reference_docs.PAGES.items():
        (tmp_path / name).write_text(make(), encoding="utf-8")
    assert reference_docs.main(["--check", str(tmp_path)]) == 0
    (tmp_path / "variables.md").write_text("old\n", encoding="utf-8")
    assert reference_docs.main(["--check", str(tmp_path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: {tmp_path / 'variables.md'} differs from the code; run python -m "
        f"fairseq_attn_recipes.reference_docs {tmp_path}"]
