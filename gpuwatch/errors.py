"""What the command line tells a user when a command cannot go on, and how secrets stay out of it.

Commands raise :class:`UserError` where only they know the context (which flag a port
came from); everything else (a dead database, a port in use, a bad setting) is turned
into one line by the translation layer in :mod:`gpuwatch.cli`. Both pass every DSN
through :func:`redact` first, so a password given on the command line never reaches the
terminal or a log.
"""

from __future__ import annotations

import contextlib
import re
from urllib.parse import unquote, urlsplit

_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s\[\]]*):(?P<password>[^@\s]*)@", re.I)
_QUERY_PASSWORD = re.compile(r"(?P<key>[?&]password=)(?P<password>[^&#\s]+)", re.I)
_KEYWORD_PASSWORD = re.compile(r"(?P<key>(?:^|(?<=\s))password\s*=\s*)(?P<password>'(?:[^'\\]|\\.)*'|\S+)", re.I)
_SHORTEST = 4  # a shorter password is not searched for in free text: "***" would mangle the message


class UserError(Exception):
    """A failure the user can fix; the message says what was wrong and what to do.

    ``code`` is the exit status: 2 for a wrong flag or setting, 128 + N when signal N
    interrupted the command, 1 for the rest.
    """

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _passwords(dsn: str) -> list[str]:
    """The password(s) in a DSN, as written and percent-decoded (URL, keyword or query form)."""
    found = [m.group("password") for m in _URL_PASSWORD.finditer(dsn)]
    found += [m.group("password") for m in _QUERY_PASSWORD.finditer(dsn)]
    found += [m.group("password").strip("'") for m in _KEYWORD_PASSWORD.finditer(dsn)]
    with contextlib.suppress(ValueError):  # not a URL at all (an invalid DSN is what gets reported)
        found.append(urlsplit(dsn).password or "")
    return [p for p in {*found, *(unquote(p) for p in found)} if len(p) >= _SHORTEST]


def redact(text: str, dsn: str | None = None) -> str:
    """``text`` with every password shown as ``***``: those in DSN-like parts of it, and the
    password of ``dsn`` wherever it appears (an error message may quote it)."""
    for password in sorted(_passwords(dsn or ""), key=len, reverse=True):
        text = text.replace(password, "***")
    text = _URL_PASSWORD.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:***@", text)
    text = _QUERY_PASSWORD.sub(lambda m: f"{m.group('key')}***", text)
    return _KEYWORD_PASSWORD.sub(lambda m: f"{m.group('key')}***", text)
