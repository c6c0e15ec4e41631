"""``gpuwatch token``: create, list and revoke REST API tokens.

Why a command (besides ``POST /api/v1/tokens``): the first admin token has to come from
somewhere, so this talks to the database directly, as whoever holds its DSN. The token
is printed once, on stdout, and never logged; only its hash is stored.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

_ROLES = ("viewer", "operator", "admin")


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser("token", help="create, list or revoke REST API tokens")
    sub = p.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    for name, text in (("create", "create a token and print it once"), ("list", "list tokens (no secrets)"),
                       ("revoke", "revoke a token by id")):
        q = sub.add_parser(name, help=text)
        q.add_argument("--db", help="PostgreSQL DSN (or GPUWATCH_DB); `gpuwatch up` prints its DSN")
        q.add_argument("--db-file", help="file holding the DSN")
        if name == "create":
            q.add_argument("--role", choices=_ROLES, required=True, help="viewer, operator (silences) or admin")
            q.add_argument("--namespaces", help="comma-separated namespaces the token is limited to (default: all)")
            q.add_argument("--name", default="", help="a label shown in listings")
        if name == "revoke":
            q.add_argument("id", type=int, help="the token's id (from `gpuwatch token list`)")
        q.set_defaults(func=run)


def _dsn(args: argparse.Namespace) -> str | None:
    if args.db:
        return str(args.db)
    if args.db_file:
        with open(args.db_file, encoding="utf-8") as f:
            return f.read().strip()
    return os.environ.get("GPUWATCH_DB")


async def _main(args: argparse.Namespace, dsn: str) -> int:
    import asyncpg

    from collector.api import tokens
    from collector.store import migrate

    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
        if args.token_command == "create":
            scope = args.namespaces.split(",") if args.namespaces else None
            try:
                secret, info = await tokens.create(conn, args.role, scope, args.name)
            except ValueError as exc:
                print(f"gpuwatch token: {exc}", file=sys.stderr)
                return 2
            where = ", ".join(info.namespaces) if info.namespaces else "all namespaces"
            print(f"token {info.id} ({info.role}, {where}); shown only now, keep it secret:", file=sys.stderr)
            print(secret, flush=True)
            return 0
        if args.token_command == "list":
            for t in await tokens.list_tokens(conn):
                state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
                ns = ",".join(t.namespaces) if t.namespaces else "*"
                print(f"{t.id:>5}  gw_{t.prefix}…  {t.role:<8}  {ns:<30}  {state:<24}  {t.name}")
            return 0
        revoked = await tokens.revoke(conn, args.id)
        if revoked is None:
            print(f"gpuwatch token: no token with id {args.id}", file=sys.stderr)
            return 1
        print(f"token {revoked.id} revoked")
        return 0
    finally:
        await conn.close()


def run(args: argparse.Namespace) -> int:
    dsn = _dsn(args)
    if not dsn:
        print("gpuwatch token: give --db DSN, --db-file F or GPUWATCH_DB", file=sys.stderr)
        return 2
    return asyncio.run(_main(args, dsn))
