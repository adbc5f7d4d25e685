"""A clean set-up reads as one: the bible corpus's data is installed where pip does not check its
package's unneeded dependencies (so no install prints dependency-conflict ERROR lines), and the
conventional setup.py beside pyproject.toml takes every piece of metadata from pyproject.toml."""

import os
import subprocess
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

import pytest

from fairseq_attn_recipes import bible

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_pip_reports_no_conflict_of_the_bible_corpus_and_its_data_reads():
    p = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert "bible-alignments" not in p.stdout + p.stderr, p.stdout
    src, tgt, version = bible.data_files()
    assert version == "0.4.2" and os.path.getsize(src) > 1_000_000 and os.path.getsize(tgt) > 1_000_000
    assert os.path.commonpath([src, bible.DATA_HOME]) == bible.DATA_HOME


@pytest.mark.skipif(tomllib is None, reason="tomllib: Python >= 3.11")
def test_setup_py_is_a_shim_over_pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    p = subprocess.run([sys.executable, "setup.py", "--name", "--version"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [project["name"], project["version"]]
