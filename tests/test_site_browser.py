"""The static site in a real browser: headless Chromium (Debian's package) driven by playwright.

Opens index.html and a scenario page from file://, checks that there are no console
errors, that the torch and JAX code columns sit side by side in a 1280-px window,
and that the figure loaded; saves a full-page screenshot (also copied to
reports/site-screenshot.png, git-ignored, for a person to look at).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from detach_parity.shared.apps import site

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("basics", "linear_regression")  # cheap to run; the page checked is the first
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no Chromium at /usr/bin/chromium (apt-get install chromium)"),
    pytest.mark.xdist_group("site"),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    site.build(out, list(SCENARIOS))
    return out


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install '.[test]')")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


def _open(browser, path: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("requestfailed", lambda req: errors.append(f"failed to load {req.url}"))
    page.goto(path.as_uri(), wait_until="load")
    return page, errors


def test_index_lists_scenarios_without_errors(built, browser) -> None:
    page, errors = _open(browser, built / "index.html")
    try:
        assert page.title() == "detach-parity: reference"
        links = page.locator("#table-scenarios a").all_inner_texts()
        assert links == list(SCENARIOS)
        assert page.locator("#table-cheatsheet tbody tr").count() == len(SCENARIOS)
        assert page.locator("#table-scenarios .verdict").all_inner_texts() == ["PASS"] * len(SCENARIOS)
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280  # no sideways scrolling
        assert errors == []
    finally:
        page.close()


def test_scenario_page_columns_side_by_side_and_figure(built, browser, tmp_path) -> None:
    page, errors = _open(browser, built / f"{SCENARIOS[0]}.html")
    try:
        boxes = {}
        for sel in ("#col-torch", "#col-jax", ".cell.torch >> nth=0", ".cell.jax >> nth=0"):
            loc = page.locator(sel)
            assert loc.is_visible(), sel
            boxes[sel] = loc.bounding_box()
        for left, right in (("#col-torch", "#col-jax"), (".cell.torch >> nth=0", ".cell.jax >> nth=0")):
            a, b = boxes[left], boxes[right]
            assert a["x"] + a["width"] <= b["x"], f"{left} {a} overlaps {right} {b}"
            assert a["y"] == pytest.approx(b["y"], abs=0.5)
            assert a["width"] > 400 and b["width"] > 400 and b["x"] + b["width"] <= 1280
        # the GRAD-FLOW lines are highlighted on both sides
        for fw in ("torch", "jax"):
            source = (ROOT / f"{fw}_impl" / f"{SCENARIOS[0]}.py").read_text(encoding="utf-8")
            assert page.locator(f".cell.{fw} .hll").count() == source.count("# GRAD-FLOW:") > 0
        img = page.locator("#figures img").first
        img.scroll_into_view_if_needed()
        assert img.evaluate("el => el.complete && el.naturalWidth") > 0
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        shot = tmp_path / "site-screenshot.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        (ROOT / "reports").mkdir(exist_ok=True)
        shutil.copyfile(shot, ROOT / "reports" / "site-screenshot.png")
        assert errors == []
    finally:
        page.close()
