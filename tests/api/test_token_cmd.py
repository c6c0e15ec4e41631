"""``gpuwatch token``: create prints the secret once, list never shows it, revoke works."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _token(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuwatch", "token", *args], capture_output=True, text=True,
                          timeout=60, env=ENV)


def test_token_create_list_revoke(pg_db: str, tmp_path: Path) -> None:
    made = _token("create", "--db", pg_db, "--role", "operator", "--namespaces", "research,ml", "--name", "ci")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("gw_") and len(secret) >= 40 and "shown only now" in made.stderr

    async def stored() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(pg_db)
        try:
            return list(await conn.fetch("SELECT * FROM api_tokens"))
        finally:
            await conn.close()

    rows = asyncio.run(stored())
    assert len(rows) == 1 and rows[0]["namespaces"] == ["research", "ml"] and rows[0]["role"] == "operator"
    assert secret.encode() not in bytes(rows[0]["token_sha256"]) and secret[3:9] == rows[0]["prefix"]
    listing = _token("list", "--db", pg_db)
    assert listing.returncode == 0 and "operator" in listing.stdout and "research,ml" in listing.stdout
    assert secret not in listing.stdout
    assert _token("revoke", "--db", pg_db, "1").returncode == 0
    assert "revoked" in _token("list", "--db", pg_db).stdout
    assert _token("revoke", "--db", pg_db, "99").returncode == 1
    bad = _token("create", "--db", pg_db, "--role", "viewer", "--namespaces", "Bad_NS")
    assert bad.returncode == 2 and "namespaces" in bad.stderr
    nowhere = subprocess.run(  # no database given, and no `up` runs in the default data directory
        [sys.executable, "-m", "gpuwatch", "token", "create", "--role", "viewer"], capture_output=True, text=True,
        timeout=60, env={**ENV, "XDG_DATA_HOME": str(tmp_path)})
    assert nowhere.returncode == 1 and "no gpuwatch up is running" in nowhere.stderr
