"""``gpuwatch token``: create, list and revoke REST API tokens.

Why a command (besides ``POST /api/v1/tokens``): the first admin token has to come from
somewhere, so this talks to the database directly, as whoever can reach it: with a DSN,
or, for the embedded PostgreSQL of a running ``gpuwatch up``, through the Unix socket in
its data directory (which only that directory's owner can enter). The token is printed
once, on stdout, and never logged; only its hash is stored.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from gpuwatch.errors import UserError

_ROLES = ("viewer", "operator", "admin")


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser("token", help="create, list or revoke REST API tokens")
    sub = p.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    for name, text in (("create", "create a token and print it once"), ("list", "list tokens (no secrets)"),
                       ("revoke", "revoke a token by id")):
        q = sub.add_parser(name, help=text)
        where = q.add_mutually_exclusive_group()
        where.add_argument("--db", help="PostgreSQL DSN (or GPUWATCH_DB)")
        where.add_argument("--db-file", help="file holding the DSN")
        where.add_argument("--data-dir", type=Path, metavar="DIR",
                           help="the data directory of a running `gpuwatch up` (the default when no DSN is given: "
                                "~/.local/share/gpuwatch)")
        if name == "create":
            q.add_argument("--role", choices=_ROLES, required=True, help="viewer, operator (silences) or admin")
            q.add_argument("--namespaces", help="comma-separated namespaces the token is limited to (default: all)")
            q.add_argument("--name", default="", help="a label shown in listings")
        if name == "revoke":
            q.add_argument("id", type=int, help="the token's id (from `gpuwatch token list`)")
        q.set_defaults(func=run)


def _dsn(args: argparse.Namespace) -> str:
    if args.db:
        return str(args.db)
    if args.db_file:
        with open(args.db_file, encoding="utf-8") as f:
            return f.read().strip()
    if os.environ.get("GPUWATCH_DB") and args.data_dir is None:
        return os.environ["GPUWATCH_DB"]
    from gpuwatch.datadir import cluster_root, default_data_dir
    from gpuwatch.embedded_pg import SOCKET_PORT, socket_dsn

    data_dir = (args.data_dir or default_data_dir()).expanduser()
    root = cluster_root(data_dir)
    if not (root / f".s.PGSQL.{SOCKET_PORT}").exists():
        raise UserError(f"no gpuwatch up is running with the data directory {data_dir}: start it "
                        f"(gpuwatch up{'' if args.data_dir is None else f' --data-dir {data_dir}'}), "
                        "or give --db DSN")
    return socket_dsn(root, "gpuwatch")


async def _main(args: argparse.Namespace, dsn: str) -> int:
    from collector.api import tokens
    from collector.store import migrate
    from collector.store.errors import connect

    conn = await connect(dsn)
    try:
        await migrate(conn)
        if args.token_command == "create":
            scope = args.namespaces.split(",") if args.namespaces else None
            try:
                secret, info = await tokens.create(conn, args.role, scope, args.name)
            except ValueError as exc:
                raise UserError(str(exc), code=2) from None
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
            raise UserError(f"no token with id {args.id} (gpuwatch token list shows them)")
        print(f"token {revoked.id} revoked")
        return 0
    finally:
        await conn.close()


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_main(args, _dsn(args)))
