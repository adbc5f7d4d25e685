"""The end of a recipe process that imported torch and fairseq, without the interpreter's teardown.

Once its work is done and its files written, such a process spends about 0.7 s of CPU (2-core
CPU: 4.0 s for importing torch and fairseq and exiting, 3.3 s without the teardown) freeing
its modules and their millions of objects one by one, which nothing reads. A study starts one
per training, evaluation and binarisation. :func:`exit_now` ends the process as Python's own
exit would, but for that teardown: the exit handlers run (logging's, which closes its files,
fairseq's TensorBoard writers', multiprocessing's, ``weakref.finalize``'s), every file object
still open is flushed, then stdout and stderr, and the process ends with ``os._exit``. A process
with a thread that is not a daemon still running (Python's exit waits for it), or a Python
without ``atexit._run_exitfuncs``, exits as usual.
"""

import atexit
import gc
import io
import os
import sys
import threading


def exit_now(code=0) -> None:
    """End the process with ``code`` (None: 0) as ``sys.exit`` would, without the teardown."""
    code = 0 if code is None else code
    run_handlers = getattr(atexit, "_run_exitfuncs", None)
    waited_for = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if run_handlers is None or waited_for or not isinstance(code, int):
        sys.exit(code)
    run_handlers()
    for obj in gc.get_objects():  # file objects left open: written out as their finaliser would
        # by type(), not isinstance(): that one reads an object's __class__, which some objects answer
        # with a message (torch.distributed.reduce_op's deprecation warning, on stderr)
        if issubclass(type(obj), io.IOBase) and obj is not sys.stdout and obj is not sys.stderr:
            try:
                if not obj.closed:
                    obj.flush()
            except Exception:  # as a finaliser's failure, it ends nothing
                pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            code = code or 120  # as Python's exit reports stdout that cannot be flushed
    os._exit(code)
