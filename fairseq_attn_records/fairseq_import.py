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


class Deferred:
    """The function ``module.name``, imported at its first call."""

    def __init__(self, module: str, name: str):
        self.module, self.__name__ = module, name

    def __call__(self, *args, **kwargs):
        return getattr(importlib.import_module(self.module), self.__name__)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.module}.{self.__name__}, imported at its first call>"


class Placeholder(types.ModuleType):
    """Stands for a module while fairseq is imported; after, its other attributes are the real
    module's (imported then)."""

    def __getattr__(self, attr):
        if attr.startswith("__") or sys.modules.get(self.__name__) is self:
            raise AttributeError(f"{self.__name__}.{attr}: not deferred while fairseq is imported "
                                 f"(fairseq_attn_records.fairseq_import.DEFERRED names what is)")
        return getattr(importlib.import_module(self.__name__), attr)


def placeholders():
    """A placeholder for each module of :data:`DEFERRED`, holding its deferred names."""
    made = {name: Placeholder(name) for name in DEFERRED}
    for name, attrs in DEFERRED.items():
        for attr in attrs:
            sub = f"{name}.{attr}"
            setattr(made[name], attr, made[sub] if sub in made else Deferred(name, attr))
    return made


def import_fairseq():
    """``import fairseq``, with scikit-learn and scipy.stats deferred to their first call."""
    if "fairseq" in sys.modules or any(name in sys.modules for name in DEFERRED):
        import fairseq
        return fairseq
    standing = placeholders()
    sys.modules.update(standing)
    try:
        import fairseq
    finally:
        for name, module in standing.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
    return fairseq
