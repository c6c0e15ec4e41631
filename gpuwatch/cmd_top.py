"""``gpuwatch top``: a terminal view of the fleet, refreshed from the REST API.

Why through the API and not the database: it works from any laptop with a token, sees
exactly what that token may see (namespace scopes included), and needs no DSN.
The token comes from ``GPUWATCH_TOKEN`` (preferred: it stays out of ``ps``) or ``--token``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

_DEFAULT_URL = "http://127.0.0.1:8080"


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser("top", help="a refreshing terminal view of the fleet (API)")
    p.add_argument("--url", default=os.environ.get("GPUWATCH_URL", _DEFAULT_URL),
                   help=f"the API's base URL (default $GPUWATCH_URL or {_DEFAULT_URL})")
    p.add_argument("--token", help="API token (default $GPUWATCH_TOKEN)")
    p.add_argument("--interval", type=float, default=2.0, metavar="S", help="seconds between refreshes (default 2)")
    p.add_argument("--once", action="store_true", help="print the table once and exit")
    p.add_argument("--insecure", action="store_true", help="do not verify the API's TLS certificate")
    p.set_defaults(func=run)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:5.1f}%"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def fleet_table(gpus: list[dict[str, Any]], title: str) -> Any:
    """The fleet as a rich Table (one row per GPU)."""
    from rich.table import Table

    table = Table(title=title, expand=True)
    for name, justify in (("node", "left"), ("GPU", "left"), ("model", "left"), ("pod / service", "left"),
                          ("SM act", "right"), ("memory MiB", "right"), ("power W", "right"), ("temp °C", "right"),
                          ("health", "left"), ("anom.", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    colours = {"ok": "green", "degraded": "yellow", "critical": "red", "stale": "bright_black"}
    for g in gpus:
        m = g["metrics"]
        holders = ", ".join(f"{h['namespace'] or '?'}/{h['pod'] or '?'} ({h['service'] or '-'})"
                            for h in g["holders"]) or "-"
        table.add_row(
            g["node"], g["gpu"][:20], g["model"] or "-", holders, _pct(m.get("DCGM_FI_PROF_SM_ACTIVE")),
            _num(m.get("DCGM_FI_DEV_FB_USED"), ".0f"), _num(m.get("DCGM_FI_DEV_POWER_USAGE"), ".0f"),
            _num(m.get("DCGM_FI_DEV_GPU_TEMP"), ".0f"),
            f"[{colours.get(g['health'], 'white')}]{g['health']}[/]", str(g["open_anomalies"]),
        )
    return table


def run(args: argparse.Namespace) -> int:
    import httpx
    from rich.console import Console
    from rich.live import Live

    token = args.token or os.environ.get("GPUWATCH_TOKEN")
    if not token:
        print("gpuwatch top: set GPUWATCH_TOKEN (or --token); create one with `gpuwatch token create`",
              file=sys.stderr)
        return 2
    console = Console()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=args.url.rstrip("/"), headers=headers, timeout=10.0,
                      verify=not args.insecure) as client:

        def fetch() -> Any:
            resp = client.get("/api/v1/gpus")
            if resp.status_code != 200:
                try:
                    why = resp.json().get("message", resp.text)
                except ValueError:
                    why = resp.text
                raise RuntimeError(f"{resp.status_code}: {why}")
            gpus = resp.json()["items"]
            return fleet_table(gpus, f"gpuwatch · {args.url} · {len(gpus)} GPUs · {time.strftime('%H:%M:%S')}")

        try:
            first = fetch()
        except (httpx.HTTPError, RuntimeError) as exc:
            print(f"gpuwatch top: {args.url}: {exc}", file=sys.stderr)
            return 1
        if args.once:
            console.print(first)
            return 0
        try:
            with Live(first, console=console, screen=True, auto_refresh=False) as live:
                while True:
                    time.sleep(args.interval)
                    try:
                        live.update(fetch(), refresh=True)
                    except (httpx.HTTPError, RuntimeError) as exc:
                        live.update(f"[red]{args.url}: {exc}[/] (retrying)", refresh=True)
        except KeyboardInterrupt:
            return 0
