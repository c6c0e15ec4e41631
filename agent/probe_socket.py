"""The Unix datagram socket the CUPTI probes write to: bound once per path, with the sender's credentials.

Why a module of its own: who holds the socket path is decided here, before any thread
runs, so that a second agent (or ``gpuwatch up``) on the same path stops at start with one
line instead of silently taking the windows of the first. The rules:

* the path's lock file (``<path>.lock``, an ``flock`` the kernel releases however its
  holder dies, as :mod:`gpuwatch.datadir` locks the data directory) says who holds it; a
  second opener is refused with the holder's name and PID;
* holding the lock, a socket file already at the path is a dead agent's: it is removed,
  unless a ``connect`` to it succeeds (a live receiver that took no lock), which refuses too;
  anything that is not a socket is never removed;
* ``SO_PASSCRED`` is set before ``bind``, so the kernel attaches the sender's
  ``SCM_CREDENTIALS`` (pid, uid, gid) to every datagram: the receiver trusts those, never
  the pid a probe writes into its window;
* the file's mode is set right after ``bind`` (``0o666`` for the chart's hostPath, where
  workload pods of any uid write; ``0o600`` for ``gpuwatch up``, owner-only).

Linux only (``SO_PASSCRED``); elsewhere :class:`ProbeSocket` refuses with a line saying so.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from telemetry.kernels import MAX_VALUE_BYTES

#: the longest ``sun_path`` Linux takes (108 bytes with the terminating NUL)
MAX_PATH_BYTES: Final = 107
HINT: Final = "set GPUWATCH_PROBE_SOCKET to another path, or to an empty string to turn the kernel probe receiver off"
_CRED = struct.Struct("iII")  # struct ucred: pid_t pid, uid_t uid, gid_t gid


class ProbeSocketError(RuntimeError):
    """The probe socket cannot be used; the message names the path, why, and what to do."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """The sender of one datagram, as the kernel states it (pid 0: not visible in the agent's PID namespace)."""

    pid: int
    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class Datagram:
    data: bytes
    credentials: Credentials | None  # None: the kernel attached none (or they were cut)
    truncated: bool  # longer than MAX_VALUE_BYTES: ``data`` holds only its start


class ProbeSocket:
    """A bound, locked, non-blocking probe socket at ``path``; :meth:`close` gives the path back."""

    def __init__(self, path: Path, mode: int, holder: str = "gpuwatch agent") -> None:
        self.path, self.mode = path, mode
        if not hasattr(socket, "SO_PASSCRED"):
            raise ProbeSocketError(f"the kernel probe socket needs Linux (SO_PASSCRED); {HINT}")
        if len(os.fsencode(path)) > MAX_PATH_BYTES:
            raise ProbeSocketError(f"the kernel probe socket path {path} is longer than the {MAX_PATH_BYTES} "
                                   f"bytes a Unix socket path may have; {HINT}")
        self._lock_fd = self._lock(holder)
        try:
            self._clear_stale()
            self.sock = self._bind()
            self._inode = os.stat(path).st_ino
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._buffer = bytearray(MAX_VALUE_BYTES)
        self._ancillary = socket.CMSG_SPACE(_CRED.size)
        self.closed = False

    def __enter__(self) -> ProbeSocket:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # ---- opening ----
    def _lock(self, holder: str) -> int:
        owner_only = not self.mode & 0o077
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700 if owner_only else 0o755)
            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ProbeSocketError(f"cannot use the kernel probe socket's directory {self.path.parent} "
                                   f"({exc.strerror or exc}); {HINT}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = os.read(fd, 200).decode(errors="replace").strip() or "another gpuwatch agent"
            os.close(fd)
            raise ProbeSocketError(f"{who} already receives kernel probe windows on {self.path}; stop it, or "
                                   f"{HINT}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{holder} (PID {os.getpid()})\n".encode())
        return fd

    def _clear_stale(self) -> None:
        """Holding the lock: a socket file at the path is a dead receiver's, unless one answers."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ProbeSocketError(f"{self.path} exists and is not a socket (left alone); remove it, or {HINT}")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as probe:
            try:
                probe.connect(str(self.path))
            except OSError as exc:
                if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                    raise ProbeSocketError(f"cannot check who holds {self.path} ({exc.strerror or exc}); "
                                           f"{HINT}") from None
            else:
                raise ProbeSocketError(f"a live receiver (without gpuwatch's lock) is bound to {self.path}; "
                                       f"stop it, or {HINT}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # before bind: no datagram without them
            sock.bind(str(self.path))
            os.chmod(self.path, self.mode)
        except OSError as exc:
            sock.close()
            raise ProbeSocketError(f"cannot bind the kernel probe socket {self.path} ({exc.strerror or exc}); "
                                   f"{HINT}") from None
        sock.setblocking(False)
        return sock

    # ---- reading ----
    def fileno(self) -> int:
        return self.sock.fileno()

    def receive(self) -> Datagram | None:
        """The next datagram, or None when none is waiting (the socket does not block)."""
        try:
            size, ancdata, flags, _ = self.sock.recvmsg_into([self._buffer], self._ancillary)
        except BlockingIOError:
            return None
        credentials = None
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= _CRED.size:
                credentials = Credentials(*_CRED.unpack_from(data))
        if flags & socket.MSG_CTRUNC:
            credentials = None
        return Datagram(bytes(self._buffer[:size]), credentials, bool(flags & socket.MSG_TRUNC))

    # ---- closing ----
    def close(self) -> None:
        """Close the socket, remove its file if it is still this one's, and release the lock; idempotent."""
        if self.closed:
            return
        self.closed = True
        self.sock.close()
        with contextlib.suppress(OSError):
            if os.lstat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        os.ftruncate(self._lock_fd, 0)  # the lock file stays: removing it would race with an opener
        os.close(self._lock_fd)
