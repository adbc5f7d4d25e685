"""The names of the registered fairseq architectures, without importing torch and fairseq when
the installed code has not changed since they were last read.

Reading the registry imports fairseq and the plugin (seconds); every ``train.sh`` checks its
architecture before any work (``check-arch``) and ``table1.sh`` its rows (``fairseq-attn-paper
rows``), so the names are kept in a small cache file keyed by what decides them: the Python
version, fairseq's installed models (path, version, file names) and the sha256 of every source file
of ``fairseq_attn_plugins``. Any change of code gives another key, hence a fresh read; a cache that
cannot be read, written or parsed is ignored (the registry is read instead).
The cache also holds the plugin model's own architectures, which ``fairseq-attn-demo --archs`` accepts.
The check is only the early refusal: fairseq-train checks the architecture again when it builds.
"""

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
    plugins, fairseq = _package_dir("fairseq_attn_plugins"), _package_dir("fairseq")
    if plugins is None or fairseq is None:
        return None
    h = hashlib.sha256(sys.version.encode())
    h.update(fairseq.encode())
    version = os.path.join(fairseq, "version.txt")
    if os.path.isfile(version):
        h.update(open(version, "rb").read())
    models = os.path.join(fairseq, "models")
    h.update("\n".join(sorted(os.listdir(models)) if os.path.isdir(models) else []).encode())
    for root, dirs, files in os.walk(plugins):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(root, f)
                h.update(os.path.relpath(path, plugins).encode())
                h.update(open(path, "rb").read())
    return h.hexdigest()


def cache_path(key: str) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fairseq_attn_plugins", f"arch-names-{key[:24]}.json")


def _read_registry() -> dict:
    import fairseq_attn_plugins  # noqa: F401  registers the architectures
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq_attn_plugins.models.transformer_attn import attn_architectures
    return {"archs": sorted(ARCH_MODEL_REGISTRY), "attn_archs": attn_architectures()}


def _cached(field: str) -> List[str]:
    """The list ``field`` of the cache of this code, the registry read (and the cache written) without it."""
    key = code_key()
    path = cache_path(key) if key else None
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                kept = json.load(f)
            if kept.get("key") == key and isinstance(kept.get(field), list) and kept[field]:
                return kept[field]
        except (OSError, ValueError, AttributeError):
            pass  # absent or unreadable: read the registry
    names = _read_registry()
    if path:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_json(path, {"key": key, **names})
        except OSError:
            pass  # a read-only home: no cache, the same answer
    return names[field]


def registered_arch_names() -> List[str]:
    """Every architecture fairseq-train accepts with ``--user-dir fairseq_attn_plugins``."""
    return _cached("archs")


def registered_attn_arch_names() -> List[str]:
    """The architectures of the plugin's own model (``transformer_attn``), sorted."""
    return _cached("attn_archs")
