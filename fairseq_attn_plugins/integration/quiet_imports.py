"""fairseq's import-time notice about tensorboardX, dropped in the commands.

Importing fairseq's tasks (every fairseq command does, and so does this package) logs, at INFO,
``Please install tensorboardX: pip install tensorboardX`` from ``fairseq.tasks.text_to_speech``:
only that speech task's own logs use tensorboardX (fairseq-train's TensorBoard logs are written
through ``torch.utils.tensorboard``), so the first line of every command was advice to install
something nothing here uses. In fairseq's commands and this distribution's
(:func:`.refusals.running_command`), a filter on that one logger drops that one message before
fairseq is imported; every other message passes, and a script or notebook importing the package
keeps fairseq's logging as it was.
"""

import logging

NOTICE = "Please install tensorboardX"
LOGGER = "fairseq.tasks.text_to_speech"


class DropNotice(logging.Filter):
    """Drops the records whose message starts with :data:`NOTICE`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(NOTICE)


def install() -> None:
    """The filter on fairseq's text-to-speech logger (once), in commands only."""
    from .refusals import running_command

    logger = logging.getLogger(LOGGER)
    if running_command() and not any(isinstance(f, DropNotice) for f in logger.filters):
        logger.addFilter(DropNotice())
