"""The plugin's refusals read as one line in fairseq's own commands.

fairseq-train, -generate, -interactive and -validate (with ``--user-dir``) have no handler for
the plugin's errors, so a refused flag or checkpoint came out as a 20-line traceback through
fairseq's internals with the reason on its last line. Once the plugin is imported, an uncaught
error of the plugin's own kinds (:class:`PieceConfigError`: a flag, override or piece set
refused; a corrupt or unsafe checkpoint) prints ``error: MESSAGE`` alone (exit status 1); any
other exception keeps Python's traceback. Python code calling the plugin still gets the
exception itself.
"""

import sys

_installed = False


def refusal_kinds():
    from ..attention.settings import PieceConfigError
    from .checkpoint_safety import CorruptCheckpointError, UnsafeCheckpointError

    return PieceConfigError, CorruptCheckpointError, UnsafeCheckpointError


def _hook(previous):
    def excepthook(kind, value, tb):
        if isinstance(value, refusal_kinds()):
            sys.stderr.write(f"error: {value}\n")
            sys.stderr.flush()
            return
        previous(kind, value, tb)

    excepthook._attn_plugins_refusals = True
    return excepthook


def install() -> None:
    global _installed
    if _installed:
        return
    if not getattr(sys.excepthook, "_attn_plugins_refusals", False):
        sys.excepthook = _hook(sys.excepthook)
    _installed = True
