"""The architecture names the recipes check before any work: the registry itself, read again
whenever the code changes, a broken cache never trusted."""

import json
import os

from fairseq.models import ARCH_MODEL_REGISTRY

import fairseq_attn_plugins  # noqa: F401  registers the architectures
from fairseq_attn_reports import arch_names


def test_the_names_are_the_registry_and_the_cache_is_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = arch_names.registered_arch_names()
    assert first == sorted(ARCH_MODEL_REGISTRY) and "transformer_csan2d_wmt_en_de" in first
    path = arch_names.cache_path(arch_names.code_key())
    assert json.load(open(path))["archs"] == first
    # the cache is what is read next time: a name written into it is answered
    json.dump({"key": arch_names.code_key(), "archs": first + ["transformer_only_in_cache"]}, open(path, "w"))
    assert "transformer_only_in_cache" in arch_names.registered_arch_names()


def test_a_cache_of_other_code_or_half_written_is_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = arch_names.cache_path(arch_names.code_key())
    os.makedirs(os.path.dirname(path))
    for bad in ('{"key": "other code", "archs": ["transformer_stale"]}', '{"key": "', "[]"):
        open(path, "w").write(bad)
        assert arch_names.registered_arch_names() == sorted(ARCH_MODEL_REGISTRY)
        assert json.load(open(path))["archs"] == sorted(ARCH_MODEL_REGISTRY)  # rewritten whole


def test_a_source_change_changes_the_key(tmp_path, monkeypatch):
    plugins = tmp_path / "fairseq_attn_plugins"
    (plugins / "models").mkdir(parents=True)
    (plugins / "__init__.py").write_text("")
    (plugins / "models" / "m.py").write_text("A = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    importlib.invalidate_caches()
    monkeypatch.delitem(__import__("sys").modules, "fairseq_attn_plugins")
    a = arch_names.code_key()
    (plugins / "models" / "m.py").write_text("A = 2\n")
    b = arch_names.code_key()
    (plugins / "models" / "n.py").write_text("")
    c = arch_names.code_key()
    assert len({a, b, c}) == 3


def test_answers_kept_while_another_process_kept_its_own_are_both_in_the_cache(tmp_path, monkeypatch):
    """An answer computed while another process kept another answer (and another list) does not
    drop theirs: the file is re-read under a lock before it is written."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def slow_read():  # meanwhile, "another process" fills the cache
        assert arch_names.cached_entry("pieces", "other", lambda: ["theirs"]) == ["theirs"]
        assert arch_names.cached_names("demo", lambda: ["a", "b"]) == ["a", "b"]
        return ["ours"]

    assert arch_names.cached_entry("pieces", "mine", slow_read) == ["ours"]
    kept = json.load(open(arch_names.cache_path(arch_names.code_key())))
    assert kept["pieces"] == {"other": ["theirs"], "mine": ["ours"]} and kept["demo"] == ["a", "b"]
    # read back without calling read() again
    assert arch_names.cached_entry("pieces", "other", lambda: 1 / 0) == ["theirs"]
