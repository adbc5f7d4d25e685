"""exit_now: a recipe process ends as Python's exit would end it (exit handlers, open files written,
its status), without the interpreter's teardown."""

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(code, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def test_handlers_run_open_files_are_written_and_the_status_kept(tmp_path):
    p = run("""
        import atexit, logging, sys, weakref
        from fairseq_attn_recipes.process_exit import exit_now
        left_open = open("open.txt", "w")
        left_open.write("written, never closed\\n" * 1000)
        binary = open("open.bin", "wb")
        binary.write(b"x" * 100)
        log = logging.getLogger("t")
        log.addHandler(logging.FileHandler("log.txt"))
        log.warning("logged")
        atexit.register(lambda: open("handler.txt", "w").write("ran"))
        class Box: pass
        box = Box()
        class Touchy:  # an object that answers its __class__ with a message (torch.distributed.reduce_op)
            @property
            def __class__(self):
                print("__class__ read", file=sys.stderr)
                return Touchy
        touchy = Touchy()
        weakref.finalize(box, lambda: open("finalized.txt", "w").write("ran"))
        print("to stdout", end="")
        print("to stderr", end="", file=sys.stderr)
        exit_now(3)
        open("after.txt", "w").write("never")
    """, tmp_path)
    assert p.returncode == 3, p.stderr
    assert (p.stdout, p.stderr) == ("to stdout", "to stderr")  # nothing else: no object's __class__ was read
    assert (tmp_path / "open.txt").read_text() == "written, never closed\n" * 1000
    assert (tmp_path / "open.bin").read_bytes() == b"x" * 100
    assert (tmp_path / "log.txt").read_text() == "logged\n"
    assert (tmp_path / "handler.txt").read_text() == "ran" and (tmp_path / "finalized.txt").read_text() == "ran"
    assert not (tmp_path / "after.txt").exists()


def test_a_running_thread_is_waited_for_as_python_waits(tmp_path):
    p = run("""
        import threading, time
        from fairseq_attn_recipes.process_exit import exit_now
        def late():
            time.sleep(0.3)
            open("thread.txt", "w").write("done")
        threading.Thread(target=late).start()
        exit_now(None)
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "thread.txt").read_text() == "done"
