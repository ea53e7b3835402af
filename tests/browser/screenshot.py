"""Regenerates docs/report-lock-contention.png: the report of the recorded lock-contention profile.

    python tests/browser/screenshot.py [--out docs/report-lock-contention.png] [--height 2000]

Runs the real CLI offline on fixtures/recorded/lock_contention.*, opens the page in the system
Chromium (headless, network blocked, 1400 px wide) and saves the top of the page.
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
    parser.add_argument("--height", type=int, default=2000,
                        help="keep at most this many CSS pixels from the top (0: the whole page)")
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
                height = min(full, args.height) if args.height else full
                args.out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(args.out), full_page=True,
                                clip={"x": 0, "y": 0, "width": args.width, "height": height})
        finally:
            browser.close()
    print(f"{args.out} ({args.width}x{height} of {full} px)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
