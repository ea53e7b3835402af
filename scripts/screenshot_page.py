#!/usr/bin/env python3
"""A PNG of one part of a diagnose page, for the docs (docs/reference.md's sweep picture):

    python scripts/screenshot_page.py REPORT.html OUT.png [--selector "#charts"] [--width 1100]

Uses the system Chromium (/usr/bin/chromium, or $DIAGNOSE_CHROMIUM) through Playwright, as the
browser tests do; the page is opened from the file, offline.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--selector", default="#charts")
    parser.add_argument("--width", type=int, default=1100)
    args = parser.parse_args()
    chromium = os.environ.get("DIAGNOSE_CHROMIUM") or shutil.which("chromium")
    if not chromium:
        print("error: no chromium (bash scripts/install-test-tools.sh)", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": args.width, "height": 900})
            page.goto(args.page.resolve().as_uri())
            page.locator(args.selector).screenshot(path=str(args.out))
        finally:
            browser.close()
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
