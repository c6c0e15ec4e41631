"""The in-process server: HTTPS with a given certificate, CORS off unless configured."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from collector.api.server import ApiServer
from collector.api.settings import ApiSettings


def _serve_once(settings: ApiSettings, call: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async def main() -> httpx.Response:
        server = ApiServer(None, settings)
        await server.start()
        try:
            async with httpx.AsyncClient(verify=False, timeout=10) as client:
                return await client.request(call, server.url + "/api/v1/openapi.json", headers=headers)
        finally:
            await server.stop()

    return asyncio.run(main())


def test_https_with_a_certificate(tmp_path: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True, timeout=60)
    settings = ApiSettings.model_validate({"port": 0, "tls_cert": cert, "tls_key": key})
    resp = _serve_once(settings, "GET")
    assert resp.status_code == 200 and resp.url.scheme == "https"
    with pytest.raises(ValueError, match="tls_key"):
        ApiSettings.model_validate({"tls_cert": cert})


def test_cors_is_off_by_default_and_on_when_configured() -> None:
    origin = {"Origin": "https://grafana.example"}
    off = _serve_once(ApiSettings.model_validate({"port": 0}), "GET", headers=origin)
    assert "access-control-allow-origin" not in off.headers
    on = _serve_once(ApiSettings.model_validate({"port": 0, "cors_origins": ["https://grafana.example"]}), "GET",
                     headers=origin)
    assert on.headers["access-control-allow-origin"] == "https://grafana.example"
