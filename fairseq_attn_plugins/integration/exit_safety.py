"""A training that ends must not abort at exit.

fairseq reads batches ahead in a daemon thread (``BufferedIterator``'s ``BackgroundConsumer``,
``--data-buffer-size``, default 10). When training stops, that thread is usually collating the
next batch in torch's C++ code; CPython (before 3.14) ends a daemon thread that still runs when
the interpreter shuts down by unwinding it from inside that code, and the C++ runtime answers
with ``terminate called without an active exception``: SIGABRT, exit status 134, after the last
checkpoint was saved. A recipe reads that as a failed training.

:func:`parked_at_exit` wraps ``BufferedIterator._create_consumer``: each consumer it starts is
remembered, and once, an ``atexit`` handler (:func:`park_consumers`, run before the shutdown ends
daemon threads) waits until every live consumer is parked: done, or blocked on its full queue
(waiting in ``queue.put``, in Python's lock wait, where ending it is harmless). At most
``PARK_TIMEOUT_S`` seconds; past that a warning names the threads still running.
"""

import atexit
import logging
import time
import weakref

PARK_TIMEOUT_S = 30.0
_consumers: "weakref.WeakSet" = weakref.WeakSet()
_registered = []  # the atexit handler, once

logger = logging.getLogger(__name__)


def parked(consumer) -> bool:
    """Done, or waiting in ``put`` on its full queue: it is the queue's only producer, and only
    ``put`` waits on ``not_full``."""
    return not consumer.is_alive() or bool(consumer._queue.not_full._waiters)


def park_consumers(timeout_s: float = PARK_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    running = [c for c in list(_consumers) if not parked(c)]
    while running and time.monotonic() < deadline:
        running[0].join(0.005)
        running = [c for c in running if not parked(c)]
    if running:
        logger.warning("%d batch reader thread(s) of fairseq still running at exit after %.1f s: %s",
                       len(running), timeout_s, ", ".join(c.name for c in running))


def parked_at_exit(original):
    def _create_consumer(self):
        original(self)
        _consumers.add(self._consumer)
        if not _registered:
            atexit.register(park_consumers)
            _registered.append(park_consumers)

    return _create_consumer
