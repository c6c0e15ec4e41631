"""``gpuwatch top``: a terminal view of the fleet, refreshed from the REST API.

Why through the API and not the database: it works from any laptop with a token, sees
exactly what that token may see (namespace scopes included), and needs no DSN.
The token comes from ``GPUWATCH_TOKEN`` (preferred: it stays out of ``ps``) or ``--token``.

Layout: one row per GPU (its pods joined, a pod with several processes once), sized to
the terminal: the numeric columns, the health and the sample age keep their widths and
only the node and pods columns give way (with an ellipsis), so it reads at 80x24;
rows that do not fit are counted in the last line. Health is the API's (open anomalies
and sample age), the same as on the web page.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from telemetry.keys import FB_FREE, FB_USED, GPU_TEMP, POWER_USAGE, SM_ACTIVE

_DEFAULT_URL = "http://127.0.0.1:8080"
_COLOURS = {"ok": "green", "degraded": "yellow", "critical": "bold red", "stale": "bright_black",
            "no_data": "bright_black"}
_WORST_FIRST = ("critical", "no_data", "stale", "degraded", "ok")


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
    return "-" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _memory(m: dict[str, float]) -> str:
    used, free = m.get(FB_USED), m.get(FB_FREE)
    if used is None:
        return "-"
    if free is None:
        return f"{used / 1024:.0f}"
    return f"{used / 1024:.0f}/{(used + free) / 1024:.0f}"


def _pods(g: dict[str, Any], room: int | None) -> str:
    """The GPU's pods, as fully as ``room`` characters allow: ``ns/pod x2 (service)``, else
    without the namespace, else without the service too."""
    pods = g.get("pods", [])
    if not pods:
        return "-"

    def text(namespace: bool, service: bool) -> str:
        parts = []
        for p in pods:
            name = f"{p['namespace'] or '?'}/{p['pod'] or '?'}" if namespace else (p["pod"] or "?")
            if p.get("processes", 1) > 1:
                name += f" x{p['processes']}"
            if service and p.get("service"):
                name += f" ({p['service']})"
            parts.append(name)
        return ", ".join(parts)

    variants = [text(True, True), text(False, True), text(False, False)]
    return next((v for v in variants if room is None or len(v) <= room), variants[-1])


def summary(gpus: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for g in gpus:
        counts[g["health"]] = counts.get(g["health"], 0) + 1
    return ", ".join(f"{counts[h]} {h.replace('_', ' ')}" for h in _WORST_FIRST if h in counts)


_NODE_WIDTH = 12
#: Widths of the columns other than the node's and the pods' (a space follows each column).
_FIXED = (3, 4, 7, 4, 3, 8, 5, 2)


def fleet_table(gpus: list[dict[str, Any]], title: str, height: int | None = None, width: int | None = None) -> Any:
    """The fleet as a rich Table, one row per GPU; at most ``height`` lines tall and ``width``
    columns wide when given."""
    from rich import box
    from rich.table import Table

    from collector.api.health import age_text

    rows = len(gpus) if height is None else max(1, height - 5)  # title, header, rule, footer, prompt line
    shown = gpus if len(gpus) <= rows else gpus[:rows - 1]
    node_w = min(_NODE_WIDTH, max((len(g["node"]) for g in shown), default=4))
    # the box's one-space column separators are the only spacing (no cell padding)
    room = None if width is None else max(10, width - node_w - sum(_FIXED) - (len(_FIXED) + 1))
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=0, pad_edge=False,
                  show_edge=False, expand=width is None)
    table.add_column("node", no_wrap=True, overflow="ellipsis", width=node_w)
    widths = iter(_FIXED)
    table.add_column("gpu", justify="right", no_wrap=True, width=next(widths))
    table.add_column("pods (service)", no_wrap=True, overflow="ellipsis", width=room)
    for name in ("SM", "GiB", "W", "°C"):
        table.add_column(name, justify="right", no_wrap=True, width=next(widths))
    table.add_column("health", no_wrap=True, width=next(widths))
    table.add_column("age", justify="right", no_wrap=True, width=next(widths))
    table.add_column("an", justify="right", no_wrap=True, width=next(widths))
    for g in shown:
        m = g["metrics"]
        age = age_text(g.get("sample_age_seconds"), compact=True)
        index = g.get("gpu_index")
        table.add_row(
            g["node"], "?" if index is None else str(index), _pods(g, room), _pct(m.get(SM_ACTIVE)),
            _memory(m), _num(m.get(POWER_USAGE), ".0f"), _num(m.get(GPU_TEMP), ".0f"),
            f"[{_COLOURS.get(g['health'], 'white')}]{g['health'].replace('_', ' ')}[/]",
            f"[red]{age}[/]" if g.get("stale") else age,
            str(g["open_anomalies"]),
        )
    hidden = gpus[len(shown):]
    if hidden:
        table.caption = f"... {len(hidden)} more GPUs ({summary(hidden)}): enlarge the terminal"
        table.caption_justify = "left"
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

        def fetch(height: int | None) -> Any:
            resp = client.get("/api/v1/gpus")
            if resp.status_code != 200:
                try:
                    why = resp.json().get("message", resp.text)
                except ValueError:
                    why = resp.text
                raise RuntimeError(f"{resp.status_code}: {why}")
            gpus = resp.json()["items"]
            title = f"gpuwatch {args.url} · {len(gpus)} GPUs: {summary(gpus)} · {time.strftime('%H:%M:%S')}"
            return fleet_table(gpus, title, height, console.width)

        try:
            first = fetch(None if args.once else console.height)
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
                        live.update(fetch(console.height), refresh=True)
                    except (httpx.HTTPError, RuntimeError) as exc:
                        live.update(f"[red]{args.url}: {exc}[/] (retrying)", refresh=True)
        except KeyboardInterrupt:
            return 0
