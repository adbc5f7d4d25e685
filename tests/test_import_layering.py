"""Imports run one way. Every module of the three packages is parsed (``ast``, nothing is
imported or run) and each import of a module of the distribution is held against ``LAYERS``:
a module may import modules of its own layer and of the layers below it, never one above.
The layer table of docs/explanation/architecture.md is generated from ``LAYERS`` and the measured imports;
``python tests/test_import_layering.py`` rewrites it."""

import ast
import os
import re
import sys
from typing import Dict, List, Set, Tuple

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PACKAGES = ("fairseq_attn_records", "fairseq_attn_core", "fairseq_attn_plugins", "fairseq_attn_reports",
            "fairseq_attn_recipes")
DOC = os.path.join(ROOT, "docs", "explanation", "architecture.md")

#: bottom first: (modules, what they hold). A module belongs to the entry whose name is the
#: longest prefix of its own (``fairseq_attn_core`` holds ``catalogue.py``
#: and ``__init__.py`` of that package; ``fairseq_attn_plugins`` the package's ``__init__`` and any
#: top-level module not listed). Entries of one line share a layer.
LAYERS: List[Tuple[Tuple[str, ...], str]] = [
    (("fairseq_attn_records",),
     "torch-free: the run record, the metric registry, COMET, the readers of text inputs, of "
     "fairseq-generate output and of a checkpoint's configuration, alignment scores, the atomic file writer, fairseq's import without "
     "scikit-learn (called by the commands), the commands' argument parser (a single-valued option given twice refused)"),
    (("fairseq_attn_core.settings", "fairseq_attn_core.scores"),
     "`Setting` (one flag as data), layer-list and side parsing, the value checks, `PieceConfigError`; "
     "`Scores` (the masks and biases of one call, the rows a mask empties)"),
    (("fairseq_attn_core.piece", "fairseq_attn_core.backends",
      "fairseq_attn_core.position_method_flags"),
     "the hook contract and the registry `PIECES`; the attention paths and their chooser; the "
     "flags and placement shared by the position methods"),
    (("fairseq_attn_core.sentence_positions", "fairseq_attn_core.gaussian_localness"),
     "shared math of several pieces"),
    (("fairseq_attn_core.pieces",), "one module per variant"),
    (("fairseq_attn_core.core", "fairseq_attn_core.flags"),
     "`SelfAttention` (projections, the chosen path computes the heads); the shared flags, validation, "
     "`build_pieces`"),
    (("fairseq_attn_core",),
     "the pieces described from their declarations (`catalogue.py`); the folder's public names"),
    (("fairseq_attn_plugins.checkpoint_safety", "fairseq_attn_plugins.checkpoint_identity"),
     "checkpoints read under torch's `weights_only=True` with fairseq's classes allowlisted, "
     "corrupt and unsafe files named; what run a checkpoint is (read memory-mapped)"),
    (("fairseq_attn_plugins.models",),
     "the `transformer_attn` model, its architectures and `is_attn_arch`, its hydra config, "
     "fine-tuning from a checkpoint without the pieces' parameters"),
    (("fairseq_attn_plugins.integration",),
     "how the plugin fits into fairseq's commands: `--model-overrides` checked, one-line "
     "refusals, fairseq fixes"),
    (("fairseq_attn_plugins.loading",), "fairseq's loaders and hub interface with the plugin in place"),
    (("fairseq_attn_plugins",),
     "the package's `__init__` (installs the integration, registers the model) and its other "
     "top-level modules"),
    (("fairseq_attn_plugins.bench",), "the side-by-side speed and memory benchmark"),
    (("fairseq_attn_plugins.reporting",), "per-head statistics of attention probabilities, attention maps"),
    (("fairseq_attn_plugins.export", "fairseq_attn_plugins.alignment"),
     "CTranslate2 export; attention as word alignment"),
    (("fairseq_attn_plugins.cli",), "the console commands that need the model from the start (argument parsing)"),
    (("fairseq_attn_reports",),
     "torch-free on import: results tables, significance, seeds, Table 1, figures, runs, alignment "
     "evaluation (the plugin imported inside the functions that need a model or a checkpoint)"),
    (("fairseq_attn_reports.cli",), "the reporting commands (argument parsing)"),
    (("fairseq_attn_recipes",), "the recipe steps (`python -m fairseq_attn_recipes ...`), the demo"),
]


def module_files() -> Dict[str, str]:
    """Every module of the distribution: dotted name -> file."""
    out = {}
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(ROOT, package)):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
            for name in sorted(files):
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].replace(os.sep, ".")
                    out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(folder, name)
    return out


def imports_of(module: str, path: str, modules: Set[str]) -> Set[str]:
    """The modules of the distribution that ``module`` imports, wherever in the file (a
    function's own import counts as much as one at the top)."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            out |= set(subs) if len(subs) == len(node.names) else set(subs) | {base}
    return {m for m in out if m.split(".")[0] in PACKAGES}


def layer_of(module: str) -> int:
    best, rank = -1, None
    for i, (prefixes, _) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    assert rank is not None, f"{module} is in no layer of LAYERS (tests/test_import_layering.py)"
    return rank


def entry_of(module: str) -> str:
    return max((p for prefixes, _ in LAYERS for p in prefixes if module == p or module.startswith(p + ".")), key=len)


def graph() -> Dict[str, Set[str]]:
    files = module_files()
    return {m: imports_of(m, path, set(files)) for m, path in files.items()}


def upward_imports(edges: Dict[str, Set[str]]) -> List[str]:
    return sorted(f"{m} imports {t} (layer {layer_of(t) + 1} is above its layer {layer_of(m) + 1})"
                  for m, targets in edges.items() for t in targets if layer_of(t) > layer_of(m))


def short(name: str) -> str:
    return "`" + name.replace("fairseq_attn_plugins.", "").replace(".", "/") + "`"


def layer_table(edges: Dict[str, Set[str]]) -> str:
    """The Markdown table of docs/explanation/architecture.md: each layer, what it holds, and what its
    modules import of the layers below (measured)."""
    below: Dict[int, Set[str]] = {i: set() for i in range(len(LAYERS))}
    for m, targets in edges.items():
        for t in targets:
            if layer_of(t) < layer_of(m):
                below[layer_of(m)].add(entry_of(t))
    rows = ["| layer | modules | holds | imports of the layers below (measured) |", "|---|---|---|---|"]
    for i, (prefixes, holds) in enumerate(LAYERS):
        used = ", ".join(short(p) for p in sorted(below[i], key=lambda p: (layer_of(p), p))) or "nothing of the distribution"
        rows.append(f"| {i + 1} | {', '.join(short(p) for p in prefixes)} | {holds} | {used} |")
    return "\n".join(rows)


BLOCK = re.compile(r"(<!-- layers -->\n)(.*?)(\n<!-- /layers -->)", re.S)


def doc_table() -> str:
    with open(DOC, encoding="utf-8") as f:
        m = BLOCK.search(f.read())
    assert m, f"{DOC}: no <!-- layers --> ... <!-- /layers --> block"
    return m.group(2)


def test_no_module_imports_from_a_layer_above_it():
    edges = graph()
    assert sum(len(t) for t in edges.values()) > 100  # the parser found the imports
    assert upward_imports(edges) == []


def test_the_checker_sees_an_import_that_runs_back_up(tmp_path):
    """The parser and the ranks catch the forms an upward import takes: a relative import
    inside a function, ``from .. import module``, an absolute import of another package."""
    files = module_files()
    cases = {
        "fairseq_attn_plugins.bench.timing": "def f():\n    from ..cli import bench\n",
        "fairseq_attn_core.piece": "from fairseq_attn_plugins.models import transformer_attn\n",
        "fairseq_attn_plugins.models.finetune": "from .. import integration\n",
        "fairseq_attn_reports.runs": "import fairseq_attn_recipes.recording\n",
        "fairseq_attn_plugins.alignment.words": "def f():\n    from fairseq_attn_reports import runs\n",
        "fairseq_attn_records.run_record": "from fairseq_attn_plugins import checkpoint_safety\n",
    }
    for module, source in cases.items():
        path = tmp_path / (module + ".py")
        path.write_text(source)
        edges = {module: imports_of(module, str(path), set(files))}
        assert len(upward_imports(edges)) == 1, (module, edges)
    same = tmp_path / "same.py"
    same.write_text("from fairseq_attn_core import catalogue\nfrom fairseq_attn_records import metrics\n")
    assert upward_imports({"fairseq_attn_plugins.cli.pieces": imports_of("fairseq_attn_plugins.cli.pieces", str(same), set(files))}) == []


def test_every_module_has_a_layer_and_every_layer_a_module():
    modules = module_files()
    for m in modules:
        layer_of(m)
    for prefixes, _ in LAYERS:
        for p in prefixes:
            assert any(m == p or m.startswith(p + ".") for m in modules), f"LAYERS names {p}, which is no module"


def test_the_architecture_doc_shows_the_layers_measured():
    assert doc_table() == layer_table(graph()), (
        "docs/explanation/architecture.md: the layer table differs from LAYERS and the imports measured; "
        "run python tests/test_import_layering.py")


if __name__ == "__main__":  # rewrite the table of docs/explanation/architecture.md
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    new = BLOCK.sub(lambda m: m.group(1) + layer_table(graph()) + m.group(3), text)
    if new != text:
        with open(DOC, "w", encoding="utf-8") as f:
            f.write(new)
        print(f"updated {DOC}")
    sys.exit(0)
