"""Debian's chromium and chromium-driver under selenium, for the tests that drive a real
headless browser (the web fixtures and any test that needs a browser of its own)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from support import ROOT

#: where browser tests leave their screenshots, for a person to look at
SHOTS = Path(os.environ.get("DISQUEPY_SCREENSHOTS", ROOT / "build" / "screenshots"))


def shot(browser, name: str) -> Path:
    """Save the page as ``SHOTS/name.png`` (checked to be a page, not a blank)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    browser.save_screenshot(str(path))
    assert path.stat().st_size > 10_000  # a page, not a blank
    return path

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                  "--window-size=1440,1000")


def chromium_paths() -> tuple[str | None, str | None]:
    return (shutil.which("chromium") or shutil.which("chromium-browser"),
            shutil.which("chromedriver"))


def make_driver(user_data_dir: str, *flags: str):
    """A selenium Chrome driver on Debian's chromium + chromium-driver, headless, with a
    fresh profile in ``user_data_dir`` (and any more command-line ``flags``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = chromium_paths()
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for f in CHROMIUM_FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={user_data_dir}")
    for f in flags:
        opts.add_argument(f)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)
