"""/ui in a real browser: Debian's headless Chromium loads the page served by the gateway (no CDN), the
figures it shows match /admin/usage, and its console shows no error."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_KEY
from tests.helpers import route, sdk_client, upstream_policy
from tests.usage.browser import Browser, chromium

pytestmark = pytest.mark.skipif(chromium() is None, reason="needs chromium (apt-get install chromium)")

TAIL = """
tenants: [{name: team-a, api_keys: [key-a]}, {name: team-b, api_keys: [key-b]}]
models:
  priced-model: {input_per_mtok: 2, cached_input_per_mtok: 0.5, output_per_mtok: 8}
"""
# A screenshot for the README when asked: UI_SCREENSHOT=docs/ui.png
SCREENSHOT = os.environ.get("UI_SCREENSHOT")


def test_the_page_shows_the_figures_of_admin_usage_without_console_errors(fake_openai, serve_gateway,
                                                                          tmp_path: Path) -> None:
    fake, up = fake_openai
    srv = serve_gateway(upstream_policy(up.url, route("priced-model", more="    cache: {exact: {ttl: 600}}\n"),
                                        tail=TAIL))
    for key, text in [("key-a", "what is the capital of france"), ("key-a", "what is the capital of france"),
                      ("key-b", "how far is the moon")]:
        sdk_client(srv, key).chat.completions.create(model="priced-model", temperature=0,
                                                     messages=[{"role": "user", "content": text}])
    fake.cached_tokens = 2
    sdk_client(srv, "key-b").chat.completions.create(model="priced-model", messages=[{"role": "user", "content":
                                                                                       "and the sun"}])
    usage = httpx.get(srv.url + "/admin/usage", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()
    assert usage["totals"]["requests"] == 4

    async def visit() -> dict:
        async with Browser() as browser:
            await browser.open(f"{srv.url}/ui#key={ADMIN_KEY}", "document.body?.dataset.loaded === '1'")
            shown = await browser.evaluate("""(() => {
              const text = (id) => document.getElementById(id).textContent;
              const rows = (id) => [...document.querySelectorAll('#' + id + ' tr')].slice(1)
                  .map((tr) => [...tr.children].map((td) => td.textContent));
              return {spent: text('spent'), net: text('saved-net'), requests: text('requests'),
                      layers: rows('saved-layers'), tenants: rows('tenants'), routes: rows('routes'),
                      hits: rows('hit-rate'), latency: rows('latency'), bars: document.querySelectorAll('#chart rect').length,
                      key_in_url: location.href.includes('key=')};
            })()""")
            return {**shown, "errors": browser.errors, "png": await browser.screenshot()}

    shown = asyncio.run(visit())
    (Path(SCREENSHOT) if SCREENSHOT else tmp_path / "ui.png").write_bytes(shown["png"])
    assert shown["png"].startswith(b"\x89PNG")
    usd = lambda v: f"${v:.6f}"  # noqa: E731
    totals = usage["totals"]
    assert shown["errors"] == []
    assert (shown["spent"], shown["net"], shown["requests"]) == (usd(totals["spent_usd"]),
                                                                 usd(totals["net_saved_usd"]), "4")
    assert ["exact", usd(totals["saved_usd"]["exact"])] in shown["layers"]
    assert ["prefix", usd(totals["saved_usd"]["prefix"])] in shown["layers"]
    assert shown["tenants"] == [[name, str(t["requests"]), usd(t["spent_usd"]), usd(t["net_saved_usd"])]
                                for name, t in usage["tenants"].items()]
    assert [r[0] for r in shown["routes"]] == ["priced-model"]
    assert ["exact", "1", "4", "25.0 %"] in shown["hits"]  # one exact hit in four lookups
    assert any(row[0] == "priced-model" for row in shown["latency"])
    assert shown["bars"] == 2 * len(usage["series"]) and not shown["key_in_url"]


def test_the_page_s_files_are_its_own_and_nothing_else_is_served(serve_gateway, fake_openai) -> None:
    _, up = fake_openai
    srv = serve_gateway(upstream_policy(up.url, route("m")))
    page = httpx.get(srv.url + "/ui")
    assert page.status_code == 200 and "default-src 'self'" in page.headers["Content-Security-Policy"]
    assert "http" not in page.text.replace("http-equiv", "")  # no CDN: every file is the gateway's own
    assert httpx.get(srv.url + "/ui/app.js").headers["Content-Type"].startswith("text/javascript")
    missing = httpx.get(srv.url + "/ui/..%2Fhandlers.py")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
