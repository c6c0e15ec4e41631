"""Windows to the node agent: one Unix datagram each, never blocking the workload.

Why datagrams: a window is one self-contained message of at most 256 KiB, so there is no
stream to frame or reconnect; the agent can restart between two windows and the next one
simply arrives. The socket is non-blocking: a missing agent (no socket file, nobody bound)
or a full receive queue leaves the window in a bounded buffer, retried with the next
window; past ``buffer`` windows the oldest is dropped and counted. The agent learns the
sender's pid from the kernel (``SCM_CREDENTIALS``), not from the datagram.
"""

from __future__ import annotations

import errno
import logging
import socket
from collections import deque

log = logging.getLogger("gpuwatch.probe")

_WAIT = {errno.ENOENT: "no agent socket", errno.ECONNREFUSED: "no agent bound to the socket",
         errno.EAGAIN: "the agent's socket is full", errno.ENOBUFS: "the agent's socket is full"}


class DatagramSender:
    """Sends each payload to ``path``; keeps at most ``buffer`` unsent ones (oldest dropped)."""

    def __init__(self, path: str, buffer: int = 30) -> None:
        self.path = path
        self.pending: deque[bytes] = deque()
        self.buffer = max(1, buffer)
        self.sent = self.dropped = 0
        self._sock: socket.socket | None = None
        self._said: set[str] = set()

    def send(self, payload: bytes) -> None:
        """Queue ``payload`` and send what is queued, oldest first, until the socket refuses."""
        self.pending.append(payload)
        while len(self.pending) > self.buffer:
            self.pending.popleft()
            self.dropped += 1
            self._once("drop", f"gpuwatch probe: dropping the oldest kernel windows (buffer of {self.buffer} full)")
        while self.pending:
            try:
                self._socket().sendto(self.pending[0], self.path)
            except OSError as exc:
                why = _WAIT.get(exc.errno or 0)
                if why is None:
                    why = f"{exc.strerror or exc}"
                self._once(why, f"gpuwatch probe: cannot reach the agent at {self.path} ({why}); "
                           f"windows are kept (at most {self.buffer}) and sent when it answers")
                return
            self.pending.popleft()
            self.sent += 1

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _socket(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
            self._sock = sock
        return self._sock

    def _once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning(message)
