"""The names of the registered fairseq architectures, without importing torch and fairseq when
the installed code has not changed since they were last read.

Reading the registry imports fairseq and the plugin (seconds); every ``train.sh`` checks its
architecture before any work (``check-arch``) and ``table1.sh`` its rows (``fairseq-attn-paper
rows``), so the names are kept in a small cache file keyed by what decides them: the Python
version, fairseq's installed models (path, version, file names) and the sha256 of every source file
of ``fairseq_attn_plugins`` and ``fairseq_attn_core`` (whose pieces name architectures). Any change of code gives another key, hence a fresh read; a cache that
cannot be read, written or parsed is ignored (the registry is read instead).
Other lists of names read from the registry (the demo's architectures) are kept in the same file
(:func:`cached_names`), and answers read from the pieces' declarations per question
(:func:`cached_entry`, :mod:`.declared_pieces`).
The check is only the early refusal: fairseq-train checks the architecture again when it builds.
"""

import fcntl
import hashlib
import importlib.util
import json
import os
import sys
from typing import List, Optional

from fairseq_attn_records.output_files import write_json


def _package_dir(name: str) -> Optional[str]:
    spec = importlib.util.find_spec(name)  # finds, does not import
    return spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else None


def code_key() -> Optional[str]:
    """sha256 of what the registry is made from; None when a package cannot be found."""
    plugins, core, fairseq = (_package_dir(p) for p in ("fairseq_attn_plugins", "fairseq_attn_core", "fairseq"))
    if plugins is None or core is None or fairseq is None:
        return None
    h = hashlib.sha256(sys.version.encode())
    h.update(fairseq.encode())
    version = os.path.join(fairseq, "version.txt")
    if os.path.isfile(version):
        h.update(open(version, "rb").read())
    models = os.path.join(fairseq, "models")
    h.update("\n".join(sorted(os.listdir(models)) if os.path.isdir(models) else []).encode())
    for package in (plugins, core):
        for root, dirs, files in os.walk(package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for f in sorted(files):
                if f.endswith(".py"):
                    path = os.path.join(root, f)
                    h.update(os.path.relpath(path, os.path.dirname(package)).encode())
                    h.update(open(path, "rb").read())
    return h.hexdigest()


def cache_path(key: str) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fairseq_attn_plugins", f"arch-names-{key[:24]}.json")


def _read_registry() -> List[str]:
    from fairseq_attn_plugins import registration
    registration.register()  # the architectures
    from fairseq.models import ARCH_MODEL_REGISTRY
    return sorted(ARCH_MODEL_REGISTRY)


def _kept(path: str, key: str) -> dict:
    """The cache file of this code, or {} (absent, unreadable, of other code)."""
    try:
        with open(path, encoding="utf-8") as f:
            kept = json.load(f)
        return kept if isinstance(kept, dict) and kept.get("key") == key else {}
    except (OSError, ValueError):
        return {}


def _keep(path: Optional[str], key: str, field: str, value) -> None:
    """``field`` set to ``value`` in the cache file of this code (a table merged into the file's table),
    under a lock, the file re-read first: processes that fill it at once keep each other's answers."""
    if not path:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            kept = _kept(path, key)
            if isinstance(value, dict) and isinstance(kept.get(field), dict):
                value = {**kept[field], **value}
            write_json(path, {**kept, "key": key, field: value})
    except OSError:
        pass  # a read-only home: no cache, the same answer


def cached_names(field: str, read) -> List[str]:
    """The list ``field`` of the cache of this code; without it, ``read()`` (which reads the
    registry), then kept in the cache beside the other lists."""
    key = code_key()
    path = cache_path(key) if key else None
    kept = _kept(path, key) if path else {}
    if isinstance(kept.get(field), list) and kept[field]:
        return kept[field]
    names = read()
    _keep(path, key, field, names)
    return names


def cached_entry(field: str, entry: str, read):
    """The answer ``entry`` of the table ``field`` in the cache of this code; without it, ``read()``
    (which imports the code that answers), then kept in that table. A ``read()`` that raises keeps nothing."""
    key = code_key()
    path = cache_path(key) if key else None
    kept = _kept(path, key) if path else {}
    table = kept.get(field) if isinstance(kept.get(field), dict) else {}
    if entry in table:
        return table[entry]
    value = read()
    _keep(path, key, field, {entry: value})
    return value


def registered_arch_names() -> List[str]:
    """Every architecture fairseq-train accepts with ``--user-dir fairseq_attn_plugins``."""
    return cached_names("archs", _read_registry)
