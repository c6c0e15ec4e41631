"""Secrets of alert channels (webhook URLs, PagerDuty routing keys): from env or files only.

Why a type of its own: a Slack webhook URL is a credential (whoever has it can post to
the channel), so it must never reach a log line, an exception message, the database or
a ``repr``. :class:`Secret` holds the value and prints as ``Secret(<name>)``; rules
files name where the value lives (``*_env`` or ``*_file``), never the value itself.
"""

from __future__ import annotations

import os
from pathlib import Path


class SecretError(ValueError):
    """A secret could not be read; the message names where it was looked for, not its value."""


class Secret:
    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str) -> None:
        self._value = value
        self.source = source

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({self.source})"

    __str__ = __repr__

    @classmethod
    def from_env(cls, name: str) -> Secret:
        value = os.environ.get(name, "").strip()
        if not value:
            raise SecretError(f"environment variable {name} is not set or empty")
        return cls(value, f"env {name}")

    @classmethod
    def from_file(cls, path: str) -> Secret:
        try:
            value = Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SecretError(f"cannot read secret file {path}: {exc.strerror or exc}") from None
        if not value:
            raise SecretError(f"secret file {path} is empty")
        return cls(value, f"file {path}")
