"""fairseq imported without scikit-learn and scipy.stats, which no translation run calls.

``import fairseq`` imports every task and criterion of fairseq 0.12, and two of them import
scikit-learn and scipy.stats at module level for metrics of other tasks:
``fairseq.criterions.sentence_prediction`` (``f1_score``, ``matthews_corrcoef``, ``pearsonr``,
``spearmanr``: sentence classification) and ``fairseq.tasks.audio_classification``
(``sklearn.metrics``). Loading the two libraries is about 1.2 s of the 4 s a process spends
importing torch and fairseq on a 2-core CPU, in every fairseq process the recipes, the demo and
the commands start, though translation never calls them.

:func:`import_fairseq` imports fairseq with those names deferred: while fairseq's modules run,
``sklearn``, ``sklearn.metrics`` and ``scipy.stats`` are placeholders in ``sys.modules``
(:class:`Placeholder`) that give fairseq :class:`Deferred` functions for exactly the names it
imports (:data:`DEFERRED`); right after, the placeholders are taken out of ``sys.modules``, so a
later ``import sklearn.metrics`` anywhere in the process loads and gets the real module. A
deferred function imports the real one at its first call and returns what it returns; the
module object fairseq keeps (``sklearn_metrics``) answers with the real module's attributes.
Nothing fairseq computes changes; the two libraries are loaded at the first call of one of
their functions instead of at start (never, in translation). A name fairseq imports that is
not in :data:`DEFERRED` (another fairseq) fails the import, naming it, instead of being guessed.

Called where this distribution's own code starts a process that imports fairseq: the plugin's
``__init__`` in a command that imports the plugin before fairseq (``running_command``: the
``fairseq-attn-*`` commands, the recipe steps (``check-positions`` among them), the demo;
fairseq's own commands import fairseq first and are left as they are), the recipes' training
step (``recording.resolve_train_args``), and fairseq's preprocess and generate as the recipes and the demo
run them (:mod:`fairseq_attn_recipes.fairseq_command`). A script, a notebook or pytest importing
the plugin imports fairseq as it always did. fairseq's files and the Python environment are not
changed; where fairseq or one of the three modules is imported already, fairseq is imported as
it always is. Not thread-safe: meant for a process's start, before other threads import
anything.

:func:`import_sacremoses` does the same for sacremoses and joblib (:data:`SACREMOSES_DEFERRED`), in
the recipe steps that tokenise or detokenise with Moses (:mod:`fairseq_attn_recipes.tokenisation`).
"""

import importlib
import sys
import types

#: the names fairseq 0.12's modules import from each library at module level
DEFERRED = {
    "sklearn": ("metrics",),
    "sklearn.metrics": ("f1_score", "matthews_corrcoef"),
    "scipy.stats": ("pearsonr", "spearmanr"),
}
#: the names sacremoses 0.1 imports from joblib at module level (``sacremoses.util``: its parallel
#: helpers, which the recipes never call; their steps parallelise with multiprocessing): about 0.3 s
#: of CPU (joblib and numpy) in every step that tokenises or detokenises with Moses
SACREMOSES_DEFERRED = {"joblib": ("Parallel", "delayed")}


class Deferred:
    """The function ``module.name``, imported at its first call."""

    def __init__(self, module: str, name: str):
        self.module, self.__name__ = module, name

    def __call__(self, *args, **kwargs):
        return getattr(importlib.import_module(self.module), self.__name__)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.module}.{self.__name__}, imported at its first call>"


class Placeholder(types.ModuleType):
    """Stands for a module while fairseq (or sacremoses) is imported; after, its other attributes
    are the real module's (imported then)."""

    def __getattr__(self, attr):
        if attr.startswith("__") or sys.modules.get(self.__name__) is self:
            raise AttributeError(f"{self.__name__}.{attr}: not deferred while fairseq (or sacremoses) is imported "
                                 f"(fairseq_attn_records.fairseq_import.DEFERRED and SACREMOSES_DEFERRED name what is)")
        return getattr(importlib.import_module(self.__name__), attr)


def placeholders(deferred=DEFERRED):
    """A placeholder for each module of ``deferred``, holding its deferred names."""
    made = {name: Placeholder(name) for name in deferred}
    for name, attrs in deferred.items():
        for attr in attrs:
            sub = f"{name}.{attr}"
            setattr(made[name], attr, made[sub] if sub in made else Deferred(name, attr))
    return made


def import_deferring(module: str, deferred):
    """``import module``, with the names of ``deferred`` (module -> names) deferred to their first
    call; as a plain import where ``module`` or one of them is imported already."""
    if module in sys.modules or any(name in sys.modules for name in deferred):
        return importlib.import_module(module)
    standing = placeholders(deferred)
    sys.modules.update(standing)
    try:
        return importlib.import_module(module)
    finally:
        for name, placeholder in standing.items():
            if sys.modules.get(name) is placeholder:
                del sys.modules[name]


def import_fairseq():
    """``import fairseq``, with scikit-learn and scipy.stats deferred to their first call."""
    return import_deferring("fairseq", DEFERRED)


def import_sacremoses():
    """``import sacremoses``, with joblib deferred to its first call (:data:`SACREMOSES_DEFERRED`)."""
    return import_deferring("sacremoses", SACREMOSES_DEFERRED)
