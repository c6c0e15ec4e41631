"""The data directory of ``gpuwatch up``: where it is by default, and which run is using it.

One directory holds one embedded PostgreSQL (in ``postgres/``) and belongs to one
``gpuwatch up`` at a time. The lock is an ``flock`` on ``gpuwatch.lock``, which the
kernel releases when the holder exits however it exits (``kill -9`` included), so there
is never a stale lock to clean; the file's text names the holder for the message a
second run prints.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from gpuwatch.errors import UserError

LOCK_NAME = "gpuwatch.lock"


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/gpuwatch``, by default ``~/.local/share/gpuwatch`` (root's too)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpuwatch"


def cluster_root(data_dir: Path) -> Path:
    """Where the embedded PostgreSQL of ``data_dir`` lives (its data, socket and log)."""
    return data_dir / "postgres"


class DataDirLock:
    """Held while a command uses ``directory``; a second holder gets a :class:`UserError` naming the first."""

    def __init__(self, directory: Path, command: str) -> None:
        self.directory = directory
        self.command = command
        self._fd: int | None = None

    def __enter__(self) -> DataDirLock:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "gpuwatch command"
            os.close(fd)
            raise UserError(f"another {holder} is using the data directory {self.directory}; stop it, "
                            "or give another --data-dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"gpuwatch {self.command} (PID {os.getpid()})\n".encode())
        self._fd = fd
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # the file stays: removing it would race with a run opening it now
            os.close(self._fd)
            self._fd = None
