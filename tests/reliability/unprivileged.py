"""Running a test's code as a user that file permissions apply to.

Root reads and writes whatever it likes, so a folder with mode 000 or a read-only file means
nothing to a test run as root (as in the CI container). :func:`run_unprivileged` runs a
function in a forked child that has dropped to ``nobody`` when the tests run as root, and in
the test's own process otherwise; :func:`shared_tmp` makes a temporary folder that user can
reach. The child can import nothing new (the interpreter's files may be unreadable to it), so
the function must use only modules the test has imported.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NOBODY = 65534


def run_unprivileged(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` run so that file permissions hold; its result, or its exception re-raised
    as ``RuntimeError`` with the child's repr of it."""
    if os.geteuid() != 0:
        return fn(*args)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root, run, send the outcome back
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            outcome: tuple[str, Any] = ("ok", fn(*args))
        except BaseException as error:
            outcome = ("error", f"{type(error).__name__}: {error}")
        with os.fdopen(write, "wb") as pipe:
            try:
                pipe.write(pickle.dumps(outcome))
            except Exception as error:
                pipe.write(pickle.dumps(("error", f"unpicklable result: {error!r}")))
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    status, value = pickle.loads(data)
    if status == "error":
        raise RuntimeError(value)
    return value


@contextmanager
def shared_tmp() -> Iterator[Path]:
    """A temporary folder that the unprivileged user can enter (pytest's tmp_path is private
    to the user running the tests)."""
    folder = Path(tempfile.mkdtemp(prefix="ragloop-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for parent, dirs, _ in os.walk(folder):  # top-down: unlock a folder before entering it
            for name in dirs:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(parent, name), 0o755)
        shutil.rmtree(folder, ignore_errors=True)
