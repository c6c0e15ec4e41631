"""The ``gpuwatch`` command and its subcommands.

Each subcommand lives in its own ``cmd_*.py`` module exposing ``register(subparsers)``;
this module only collects them, so adding a command touches one line here. Imports of
heavy dependencies (NVML, Kafka, the database) happen inside the command functions, so
``gpuwatch --help`` works with only the base install.

It is also the one place where a failure becomes what the user reads: :func:`explain`
turns the errors a user can fix (a dead or misnamed database, a port in use, a missing
file, a bad setting) into one line that says what was wrong and what to do, with any
password redacted, and the command exits non-zero; a closed pipe (``gpuwatch catalog |
head``) ends the command quietly. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from gpuwatch import (
    cmd_agent,
    cmd_catalog,
    cmd_collector,
    cmd_export,
    cmd_frames,
    cmd_replay,
    cmd_token,
    cmd_top,
    cmd_up,
)
from gpuwatch.errors import UserError, redact

_COMMANDS = (cmd_up, cmd_agent, cmd_collector, cmd_export, cmd_frames, cmd_replay, cmd_catalog, cmd_token, cmd_top)
_BROKEN_PIPE = 128 + 13  # what a shell reports for a command ended by SIGPIPE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuwatch", description=__doc__.splitlines()[0] if __doc__ else None)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _COMMANDS:
        module.register(subparsers)
    _remember_parsers(parser)
    return parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Let every (sub)command's namespace carry its own parser, so that its usage, not the
    top-level one, answers an unknown flag (``gpuwatch up --bogus``)."""
    parser.set_defaults(parser_=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _remember_parsers(sub)


def main(argv: Sequence[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    parser: argparse.ArgumentParser = args.parser_
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        result: int = args.func(args)
    except BrokenPipeError:
        _quiet_stdout()
        return _BROKEN_PIPE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        message = explain(exc, args)
        if message is None:
            raise
        print(f"{parser.prog}: {redact(message, _dsn_given(args))}", file=sys.stderr)
        return _exit_code(exc)
    return result


def _quiet_stdout() -> None:
    """The reader went away: point stdout at /dev/null so the flush at exit raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _exit_code(exc: BaseException) -> int:
    if isinstance(exc, UserError):
        return exc.code
    return 2 if _is(exc, "agent.settings", "SettingsError") else 1


def _is(exc: BaseException, module: str, name: str) -> bool:
    """Whether ``exc`` is ``module.name``, without importing a module the command never loaded."""
    loaded = sys.modules.get(module)
    kind = getattr(loaded, name, None) if loaded is not None else None
    return isinstance(kind, type) and isinstance(exc, kind)


def _raised_in(exc: BaseException, package: str) -> bool:
    """Whether the exception passed through ``package``'s code (an OSError from asyncpg's connect)."""
    tb = exc.__traceback__
    while tb is not None:
        name = str(tb.tb_frame.f_globals.get("__name__", ""))
        if name == package or name.startswith(package + "."):
            return True
        tb = tb.tb_next
    return False


def _dsn_given(args: argparse.Namespace) -> str | None:
    """The DSN the user gave this command (flag, file or environment), if any."""
    if getattr(args, "db", None):
        return str(args.db)
    db_file = getattr(args, "db_file", None)
    if db_file:
        try:
            return Path(db_file).read_text(encoding="utf-8").strip()
        except OSError:
            return None
    return os.environ.get("GPUWATCH_DB")


def _database(args: argparse.Namespace) -> str:
    dsn = _dsn_given(args)
    return f"PostgreSQL at {redact(dsn, dsn)}" if dsn else "the embedded PostgreSQL"


def _listen_flags(args: argparse.Namespace) -> str:
    flags = [f"--{name.replace('_', '-')} {value}" for name in ("metrics_host", "metrics_port", "api_host", "api_port")
             if (value := getattr(args, name, None)) is not None]
    return f" ({', '.join(flags)})" if flags else ""


def explain(exc: BaseException, args: argparse.Namespace) -> str | None:
    """One line for an error the user can fix, or None for a bug (which keeps its traceback)."""
    if isinstance(exc, UserError) or _is(exc, "agent.settings", "SettingsError"):
        return str(exc)
    if _is(exc, "gpuwatch.embedded_pg", "EmbeddedPgError"):
        return str(exc)
    database = _explain_database(exc, args)
    if database is not None:
        return database
    if _is(exc, "aiokafka.errors", "KafkaError"):
        where = getattr(args, "kafka_bootstrap", None) or os.environ.get("GPUWATCH_KAFKA_BOOTSTRAP") or "127.0.0.1:9092"
        return f"Kafka at {where}: {exc}; check that it runs there and --kafka-bootstrap"
    if isinstance(exc, OSError):
        return _explain_os_error(exc, args)
    return None


def _explain_database(exc: BaseException, args: argparse.Namespace) -> str | None:
    if "asyncpg" not in sys.modules:  # no database was touched (and the agent need not load the store)
        return None
    from collector.store import errors

    db = _database(args)
    fix = "the DSN given with --db (or --db-file, GPUWATCH_DB)" if _dsn_given(args) else "the data directory"
    line = errors.explain(exc, db, fix, lambda e: _raised_in(e, "asyncpg"))
    if line is not None:
        return line
    if isinstance(exc, OSError) and _raised_in(exc, "asyncpg"):
        return f"cannot connect to {db}: {_reason(exc)}; check that PostgreSQL runs there, and {fix}"
    return None


def _reason(exc: OSError) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return os.strerror(exc.errno).lower() if exc.errno else str(exc)


def _explain_os_error(exc: OSError, args: argparse.Namespace) -> str | None:
    if exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    if exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
        return f"cannot listen{_listen_flags(args)}: {exc.strerror}; choose another port (0: any free port) or address"
    return None


if __name__ == "__main__":
    sys.exit(main())
