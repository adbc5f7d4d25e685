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


def test_a_corpus_file_not_as_pip_installed_it_is_refused(tmp_path, capsys):
    """bible.installed_file: a package file is read only when its size and sha256 are those pip recorded
    (RECORD), so that a file a killed install left half-copied is never taken for the corpus."""
    import base64
    import hashlib
    from importlib import metadata

    text = "".join(f"n4000100{i}\tword{i}\n" for i in range(1, 200)).encode()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.tsv").write_bytes(text)
    info = tmp_path / "fake_corpus-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-corpus\nVersion: 1.0\n")
    b64 = base64.urlsafe_b64encode(hashlib.sha256(text).digest()).rstrip(b"=").decode()
    (info / "RECORD").write_text(f"data/x.tsv,sha256={b64},{len(text)}\nfake_corpus-1.0.dist-info/RECORD,,\n")
    dist = next(iter(metadata.distributions(name="fake-corpus", path=[str(tmp_path)])))
    assert bible.installed_file(dist, "data/x.tsv") == str(tmp_path / "data" / "x.tsv")

    def refused(rel, says):
        with pytest.raises(SystemExit) as e:
            bible.installed_file(dist, rel)
        err = capsys.readouterr().err
        assert e.value.code == 1 and err.count("\n") == 1 and says in err and "--force-reinstall" in err, err

    (tmp_path / "data" / "x.tsv").write_bytes(text[: len(text) // 2])  # a copy cut short
    refused("data/x.tsv", "is not the file pip installed")
    (tmp_path / "data" / "x.tsv").write_bytes(text.replace(b"word7", b"wordX"))  # the same size, changed
    refused("data/x.tsv", "is not the file pip installed")
    (tmp_path / "data" / "y.tsv").write_bytes(text)
    refused("data/y.tsv", "RECORD holds no sha256 of data/y.tsv")
    refused("data/z.tsv", "is missing")


def test_compile_packages_writes_what_compileall_writes_and_skips_test_folders(tmp_path):
    """scripts/compile_packages.py (set-up's byte-compilation of site-packages) against the
    standard library's compileall with the same exclusion, file by file."""
    import compileall
    import re
    import shutil
    site = tmp_path / "site"
    for rel, text in {"pkg/__init__.py": "X = 1\n", "pkg/sub/mod.py": "def f():\n    return 2\n",
                      "pkg/tests/test_a.py": "A = 1\n", "other/test/b.py": "B = 1\n", "top.py": "T = 1\n",
                      "pkg/py2.py": "print 'python 2'\n", "data.txt": "not python\n"}.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    reference = tmp_path / "reference"
    shutil.copytree(site, reference)

    def compiled(root):
        return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files
                      if f.endswith(".pyc"))

    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "compile_packages.py"), str(site)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    compileall.compile_dir(str(reference), quiet=2, rx=re.compile(r"/tests?/"))
    compileall.compile_file(str(reference / "top.py"), quiet=2)
    names = compiled(site)
    assert names == compiled(reference)
    assert any(n.startswith(os.path.join("pkg", "sub", "__pycache__", "mod.")) for n in names), names
    assert not any("test" in n or "py2" in n for n in names), names
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "compile_packages.py"), str(tmp_path / "nope")],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.startswith("usage: "), bad.stderr
