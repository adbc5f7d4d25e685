"""What fairseq and torch print that says nothing to a user of this package, dropped: the one rule.

* **fairseq's tensorboardX notice.** Importing fairseq's tasks (every fairseq command does, and
  so does this package) logs, at INFO, ``Please install tensorboardX: pip install tensorboardX``
  from ``fairseq.tasks.text_to_speech``: only that speech task's own logs use tensorboardX
  (fairseq-train's TensorBoard logs are written through ``torch.utils.tensorboard``). A filter on
  that one logger drops that one message, before fairseq is imported, wherever the package is
  imported (``python -c "import fairseq_attn_plugins"`` prints nothing); every other message passes.
* **Known-harmless warnings** (:data:`HARMLESS_WARNINGS`), each matched by its message and
  category, never a whole category: on a CPU, every fairseq-train step and batch iterator warned
  about CUDA features fairseq 0.12 asks for and the CPU does without.
* **The INFO lines of this distribution's own commands** (``fairseq-attn-*`` and the recipes'
  steps, :func:`.refusals.own_command`): a command that loads a checkpoint (``fairseq-attn-plot``,
  ``-align``, ``-export``...) or builds a model (lengths.sh's ``check-positions``) printed fairseq's
  data and dictionary sizes and the plugin's pieces per layer before its output. Those commands configure logging as fairseq's own commands do (before
  fairseq is imported, whose import-time ``logging.basicConfig`` calls then change nothing), at
  WARNING: warnings and errors still print. fairseq's commands, the recipes' training step and a
  script or notebook keep their logging as it was.
"""

import logging
import re
import warnings

NOTICE = "Please install tensorboardX"
LOGGER = "fairseq.tasks.text_to_speech"

#: (category, the start of the message, word for word; why it is harmless here)
HARMLESS_WARNINGS = (
    (UserWarning, "'pin_memory' argument is set as true but no accelerator is found",
     "fairseq's batch iterators always ask for pinned memory; without a GPU there is nothing to pin"),
    (FutureWarning, "`torch.cuda.amp.autocast(args...)` is deprecated",
     "fairseq 0.12's train_step enters torch.cuda.amp.autocast(enabled=False) at every step; "
     "the name is torch's concern, not the user's"),
)


class DropNotice(logging.Filter):
    """Drops the records whose message starts with :data:`NOTICE`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(NOTICE)


def install() -> None:
    """The notice's filter and the warnings' (each once), and this distribution's commands'
    logging at WARNING; before fairseq is imported."""
    from .refusals import own_command

    logger = logging.getLogger(LOGGER)
    if not any(isinstance(f, DropNotice) for f in logger.filters):
        logger.addFilter(DropNotice())
    for category, message, _why in HARMLESS_WARNINGS:
        warnings.filterwarnings("ignore", message=re.escape(message), category=category)  # once: same entry
    if own_command():
        logging.basicConfig(format="%(levelname)s: %(name)s: %(message)s", level=logging.WARNING)
