"""fairseq's early stopping (``--patience P``: stop once the validation loss has not improved for P
validations in a row) across a resume, and what stopped a training.

fairseq 0.12 keeps the patience counter (``should_stop_early.best`` / ``.num_runs``) in the process
only: a run killed and resumed from its checkpoint would wait P validations more than the losses
say. :func:`patience_state` reads the counter back from the run's own log (the validations up to the
update resumed from) and :func:`restore` gives it to fairseq before it trains, so that a resumed run
stops where one uninterrupted run would. The log holds each loss rounded to 3 decimals, as fairseq
prints it: a resumed run compares with the rounded best (a tie at 3 decimals counts as no
improvement). :class:`EarlyStopSeen` tells the run record that the stop was the patience's.
"""

import logging
from typing import Optional, Tuple

EARLY_STOP = "early stop since valid performance hasn't improved"


def patience_state(losses) -> Tuple[Optional[float], int]:
    """(best loss, validations since it improved) after ``losses``, as fairseq's
    ``should_stop_early`` counts them (lower is better; an equal loss does not improve)."""
    from fairseq_attn_reports.curves import patience_counts
    last = (None, None, 0)
    for last in patience_counts(losses):
        pass
    return last[1], last[2]


def restore(log_path: str, upto: int) -> Optional[Tuple[float, int]]:
    """Give fairseq-train's early stopping the state the run's log says it had at ``upto`` updates;
    returns it (None: no validation logged yet)."""
    from fairseq_cli import train as fairseq_train

    from fairseq_attn_reports.curves import validation_losses
    best, runs = patience_state(validation_losses(log_path, upto))
    if best is None:
        return None
    fairseq_train.should_stop_early.best = best
    fairseq_train.should_stop_early.num_runs = runs
    return best, runs


class EarlyStopSeen(logging.Handler):
    """Set when fairseq-train logs that its --patience stopped the training."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(EARLY_STOP):
            self.seen = True
