"""What importing the plugin does, and when: :func:`register` imports fairseq (in a command, without
scikit-learn and scipy.stats: :mod:`fairseq_attn_records.fairseq_import`), registers the core's
pieces and the ``transformer_attn`` model and its architectures, and installs the plugin's fixes
of fairseq, each once. Importing the package calls it, except in the plugin's own commands that
read their arguments first (:data:`READ_ARGUMENTS_FIRST`): they call it once the arguments are
read and the work needs it, so a usage error, ``--help`` or a missing file costs no import of
torch or fairseq (about 3 s of CPU)."""

from fairseq_attn_records import fairseq_import

from .integration.refusals import program, running_command

#: the console commands (pyproject.toml's scripts) that read their arguments before registering the plugin
READ_ARGUMENTS_FIRST = ("fairseq-attn-bench", "fairseq-attn-export", "fairseq-attn-pieces")


def reads_arguments_first(argv0=None) -> bool:
    """Whether the running program is one of :data:`READ_ARGUMENTS_FIRST` (``argv0``: the tests)."""
    return program(argv0, "")[0] in READ_ARGUMENTS_FIRST


def register() -> None:
    """fairseq imported, the pieces, the model and its architectures registered, the fixes installed
    (a second call changes nothing)."""
    if running_command():
        fairseq_import.import_fairseq()

    import fairseq_attn_core  # noqa: F401  (registers every piece)

    from . import models  # noqa: F401  (registers the model and its architectures)
    from .integration import fixes

    fixes.install()
