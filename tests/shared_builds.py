"""Things made once per test run and shared by every pytest-xdist worker (not a test module).

``build_once(key, make)`` returns the folder ``key`` under the run's shared root, calling
``make(folder)`` only if no worker has made it yet. Workers take a file lock per key, so one
builds while the others wait; the folder is made under a temporary name and renamed when
complete, so a failed or interrupted build is never taken for a finished one. The root is
created by ``conftest.pytest_configure`` in the controlling process and handed to the workers
through the environment; a process without it (a helper imported outside pytest) uses a root
of its own.
"""

import os
import shutil
import tempfile

from filelock import FileLock

ENV = "ATTN_TESTS_SHARED"


def root() -> str:
    path = os.environ.get(ENV)
    if not path:
        path = os.environ[ENV] = tempfile.mkdtemp(prefix="attn_tests_shared_")
    os.makedirs(path, exist_ok=True)
    return path


def build_once(key: str, make) -> str:
    done = os.path.join(root(), key)
    with FileLock(done + ".lock"):
        if os.path.exists(os.path.join(done, ".complete")):
            return done
        tmp = done + ".tmp"
        for d in (tmp, done):
            shutil.rmtree(d, ignore_errors=True)
        os.makedirs(tmp)
        make(tmp)
        os.rename(tmp, done)
        open(os.path.join(done, ".complete"), "w").close()
        return done


def copy_of(src: str, dest: str) -> str:
    """A private copy of a shared folder, for a test that changes it."""
    shutil.copytree(src, dest, symlinks=True)
    return dest
