"""Regenerates docs/report-lock-contention.png: the report of the recorded lock-contention profile.

    python tests/browser/screenshot.py [--out PNG] [--width 1400] [--until waits] [--height 0]

Runs the real CLI offline on fixtures/recorded/lock_contention.*, opens the page in the system
Chromium (headless, network blocked) and saves the page from the top down to the bottom of the
section named by --until (default: the wait sites, so verdict, findings, run facts with what
sampling cost, flame graph and the wait-sites table; `--until ''` keeps the whole page), at most
--height CSS pixels if given.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.browser.conftest import (CHROMIUM_ARGS, analyze_recorded,  # noqa: E402
                                    browser_unavailable, chromium_path, open_report_in)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "report-lock-contention.png")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--until", default="waits",
                        help="id of the last section to keep ('' for the whole page)")
    parser.add_argument("--height", type=int, default=0, help="keep at most this many px (0: no cap)")
    args = parser.parse_args(argv)
    reason = browser_unavailable()
    if reason:
        print(f"cannot take the screenshot: {reason}", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        html, _ = analyze_recorded("lock_contention", Path(tmp))
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            with open_report_in(browser, html, {"width": args.width, "height": 1000}) as opened:
                opened.assert_clean()
                page = opened.page
                full = page.evaluate("document.documentElement.scrollHeight")
                height = full
                if args.until:
                    bottom = page.evaluate(
                        "(id) => { const e = document.getElementById(id);"
                        " return e ? e.getBoundingClientRect().bottom + window.scrollY : null; }",
                        args.until)
                    if bottom is None:
                        print(f"no element with id {args.until!r}", file=sys.stderr)
                        return 1
                    height = min(full, int(bottom) + 16)
                if args.height:
                    height = min(height, args.height)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(args.out), full_page=True,
                                clip={"x": 0, "y": 0, "width": args.width, "height": height})
        finally:
            browser.close()
    print(f"{args.out} ({args.width}x{height} px of a {full} px page)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
