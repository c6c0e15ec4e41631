"""The web page's kernels view in a real browser (headless Debian Chromium, as tests/api/test_live_up.py).

Why a browser: the view is drawn by app.js from two API answers (the kernels and the flame
graph frame); only a browser shows that the table, the hints and the nested bars come out of
them, without a script error. Served over the API fixture's database (tests/api/conftest.py),
whose llm service has CUPTI windows; no ``gpuwatch up`` needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.conftest import LiveApi
from tests.support.kernel_windows import ATTENTION, GEMM

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def test_the_kernels_view_shows_top_kernels_hints_and_the_flame_graph(live_api: LiveApi) -> None:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (/usr/bin/chromium); .ci/run installs it")
    playwright = pytest.importorskip("playwright.sync_api")
    token = live_api.fleet.tokens["research"]
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{live_api.url}/#token={token}")
            page.wait_for_selector("#fleet tbody tr", timeout=15_000)
            page.goto(f"{live_api.url}/#/service/research/llm")
            page.wait_for_function("document.querySelector('#service-kernels').getAttribute('href') !== '#'")
            page.click("#service-kernels")
            page.wait_for_selector("#kernels tbody tr:nth-child(3)", timeout=15_000)
            page.wait_for_selector("#kernel-flamegraph .frame", timeout=15_000)
            rows = page.locator("#kernels tbody tr")
            assert rows.count() == 3
            first = rows.nth(0).inner_text()
            assert GEMM in first and "gemm" in first and "%" in first
            assert ATTENTION in rows.nth(1).inner_text()
            assert "8 windows of 2 processes in 2 pods" in page.locator("#kernels-summary").inner_text()
            hints = page.locator("#kernel-hints li").all_inner_texts()
            assert any("CUDA Graphs" in h for h in hints) and any("pin_memory=True" in h for h in hints), hints
            bars = page.evaluate("[...document.querySelectorAll('#kernel-flamegraph .frame')].map((b) => "
                                 "[b.textContent, parseFloat(b.style.width), parseFloat(b.style.top)])")
            assert bars[0] == ["total", 100, 0] and bars[1] == ["llm", 100, 18], bars[:3]
            assert {b[0] for b in bars if b[2] == 36} == {"trainer-0", "trainer-1"}  # research's pods only
            assert any(b[0] == GEMM and b[2] == 72 for b in bars)
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "web-kernels.png"), full_page=True)
            assert not errors, errors
            assert page.locator("#status").inner_text() == ""
        finally:
            browser.close()
