"""The plugin's changes to fairseq: one table (integration/fixes.py), one installer, each fix
installed once however often the installer runs, and the table of docs/explanation/architecture.md is
the code's (``python tests/test_fixes_once.py`` rewrites it)."""

import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import training_process  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DOC = os.path.join(ROOT, "docs", "explanation", "architecture.md")
BLOCK = re.compile(r"(<!-- fixes -->\n)(.*?)(\n<!-- /fixes -->)", re.S)


@pytest.mark.xdist_group("training_process")  # the process of test_fairseq_fixes' reader at exit: started once
def test_each_function_is_replaced_once_even_when_the_installer_runs_twice():
    """In a process named fairseq-train (every row's condition holds: the refusals are installed in
    commands only), the installer run twice more after the plugin's import."""
    done = training_process.run("fixed")
    lines = done.stdout.splitlines()  # the marks, then the reader's first batch (its exit: test_fairseq_fixes)
    assert lines and lines[0].startswith("{"), done.stderr[-3000:]
    marks = json.loads(lines[0])
    from fairseq_attn_plugins.integration import fixes

    assert len(marks) == len(fixes.FIXES) == 18  # one row per replaced function, no target twice
    for fix in fixes.FIXES:
        assert marks[fix.target] == [fix.name], fix.target


def test_a_script_keeps_pythons_error_reporting():
    """Outside fairseq's commands and ours (here: pytest) the refusal rows are not installed."""
    import argparse

    import fairseq_attn_plugins  # noqa: F401
    from fairseq_attn_plugins.integration import fixes

    fixes.install()
    assert getattr(sys.excepthook, fixes.MARK, None) is None
    assert getattr(argparse.ArgumentParser.error, fixes.MARK, None) is None


def test_the_architecture_doc_lists_the_fixes_of_the_table():
    from fairseq_attn_plugins.integration import fixes

    with open(DOC, encoding="utf-8") as f:
        block = BLOCK.search(f.read())
    assert block, f"{DOC}: no <!-- fixes --> ... <!-- /fixes --> block"
    assert block.group(2) == fixes.markdown_table(), (
        "docs/explanation/architecture.md: the table of fixes differs from integration/fixes.py; "
        "run python tests/test_fixes_once.py")


if __name__ == "__main__":  # rewrite the table of docs/explanation/architecture.md
    sys.path.insert(0, ROOT)
    from fairseq_attn_plugins.integration import fixes

    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    new = BLOCK.sub(lambda m: m.group(1) + fixes.markdown_table() + m.group(3), text)
    if new != text:
        with open(DOC, "w", encoding="utf-8") as f:
            f.write(new)
        print(f"updated {DOC}")
