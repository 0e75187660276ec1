"""The report in a real headless Chromium (the system's chromium + chromedriver, driven by
Selenium): every image loads, the tiles carry their labels, the charts are there, the console
stays clean, hostile text runs nothing, and the page fits a phone's width.

Skipped, saying why, where no browser is installed (``apt-get install chromium
chromium-driver``; CI's ``.ci/run`` installs them where it can). With
``WDSTOOL_SHOW_SCREENSHOT=docs/guides/show-report.png`` it also writes the README's screenshot."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from tests.show.conftest import SHOWN, CliReport

pytestmark = pytest.mark.slow

BROWSER = next((p for n in ("chromium", "chromium-browser") if (p := shutil.which(n))), None)
DRIVER = shutil.which("chromedriver")
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    if BROWSER is None or DRIVER is None:
        pytest.skip("no Chromium here: apt-get install chromium chromium-driver")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="wdstool-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(driver, report: CliReport, width: int, mobile: bool = False) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": mobile},
    )
    driver.get((report.out / "index.html").as_uri())
    driver.execute_async_script(  # every image decoded (or failed) before looking
        """const done = arguments[arguments.length - 1];
        Promise.all([...document.images].map(i => i.decode().catch(() => null))).then(done);"""
    )


def test_the_report_in_a_browser(browser, cli_report: CliReport) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    _open(browser, cli_report, 1100)
    images = browser.execute_script(
        "return [...document.images].map(i => [i.getAttribute('src'), i.naturalWidth]);"
    )
    assert len(images) >= SHOWN * 5 + 5  # tiles, views (stored + 3), charts
    assert [src for src, width in images if width <= 0] == []

    tiles = browser.execute_script(
        """return [...document.querySelectorAll('figure.tile')].map(t =>
            [t.dataset.key, t.querySelector('.label').textContent,
             t.querySelector('img').naturalWidth]);"""
    )
    want = [(s["key"], f"{s['class']} ({s['label']})", True) for s in cli_report.summary["samples"]]
    assert [(k, label, w > 0) for k, label, w in tiles] == want
    charts = browser.execute_script(
        "return [...document.querySelectorAll('.chart')].map(c => [c.id, "
        "c.querySelector('img').naturalWidth, c.querySelectorAll('tbody tr').length]);"
    )
    assert {c[0] for c in charts} >= {
        "chart-shards", "chart-classes", "chart-sizes", "chart-formats", "chart-members"
    }  # fmt: skip
    assert all(width > 0 and rows > 0 for _, width, rows in charts)

    # hostile keys, captions, class names and JSON fields ran nothing and read as text
    assert browser.execute_script("return document.body.getAttribute('data-pwned');") is None
    assert browser.execute_script("return document.scripts.length;") == 0
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018
    text = browser.execute_script("return document.body.innerText;")
    sample = cli_report.summary["samples"][0]
    assert sample["fields"]["caption"] in text and "<script>" in text
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []

    shot = os.environ.get("WDSTOOL_SHOW_SCREENSHOT")
    if shot:
        _screenshot(browser, shot)


def test_the_report_fits_a_phone(browser, cli_report: CliReport) -> None:
    _open(browser, cli_report, 390, mobile=True)
    width = browser.execute_script("return document.documentElement.scrollWidth;")
    inner = browser.execute_script("return window.innerWidth;")
    assert inner == 390 and width <= inner
    wide = browser.execute_script(
        """return [...document.querySelectorAll('body *')].filter(e =>
            e.getBoundingClientRect().right > window.innerWidth + 1 &&
            !e.closest('.scroll')).map(e => e.tagName + '.' + e.className).slice(0, 5);"""
    )
    assert wide == []
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def _screenshot(driver, path: str) -> None:
    """The README's picture: the report at a laptop's width, three stretches of it (the
    contact sheet, what the model sees, a chart with its table) one above the other, as a
    small PNG (256 colours). The header, which names this machine's paths, is left out."""
    from PIL import Image

    width, parts = 960, (("samples", 560), ("model", 430), ("chart-classes", 330))
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
    )
    shots = []
    for anchor, height in parts:
        driver.execute_script(
            "window.scrollTo(0, document.getElementById(arguments[0]).offsetTop - 8);", anchor
        )
        img = Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")
        shots.append(img.crop((0, 0, width - 16, height)))  # less the scroll bar
    sheet = Image.new("RGB", (width - 16, sum(h for _, h in parts) + 8 * len(parts)), "#c8ccd2")
    y = 0
    for shot in shots:
        sheet.paste(shot, (0, y))
        y += shot.height + 8
    sheet.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
