"""Load the built documentation in headless Chromium and check it as a reader would see it.

    python docs/_tools/check_site.py docs/_build/html [--screenshots DIR]

Serves the built site on 127.0.0.1 (a free port), then loads three pages in headless
Chromium (Debian's ``chromium`` and ``chromium-driver`` packages, driven by selenium):

- the index;
- one API page with maths (``--api-page``; by default the first page of the API reference
  whose HTML holds maths, preferring the pages listed in ``PREFERRED``);
- the gallery.

A page fails when the browser logs a console error (a failed request is one), when it has no
main content, or, for a page with maths, when MathJax did not turn every formula into rendered
maths (or rendered one as an error). A screenshot of each page goes to ``--screenshots``.
Exit status 0 when every page passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import pathlib
import shutil
import sys
import tempfile
import threading

# API pages tried first for the maths check (any API page with maths serves otherwise)
PREFERRED = ["api/generated/mod-attndyn.numeric.core.plots.html",
             "api/generated/attndyn.lambertw.html"]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,1000"]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the browser's log says what failed
        pass


def serve(root: pathlib.Path):
    """An HTTP server for ``root`` on a free localhost port, in a daemon thread."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def find_api_page(site: pathlib.Path) -> str:
    """The API page used for the maths check (relative to the site)."""
    for rel in PREFERRED:
        p = site / rel
        if p.is_file() and 'class="math' in p.read_text(encoding="utf-8"):
            return rel
    for p in sorted((site / "api").rglob("*.html")):
        if 'class="math' in p.read_text(encoding="utf-8"):
            return p.relative_to(site).as_posix()
    raise SystemExit(f"no API page with maths under {site / 'api'}")


def make_driver(chromium: str, chromedriver: str, profile: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=chromedriver), options=opts)


_MATHJAX_DONE = """
const done = arguments[arguments.length - 1];
if (!window.MathJax || !MathJax.startup || !MathJax.startup.promise) { done("no MathJax"); }
else { MathJax.startup.promise.then(() => done("ok"), (e) => done("error: " + e)); }
"""


def check_page(driver, url: str, shot: pathlib.Path, maths: bool) -> list[str]:
    """Load ``url``; return the problems found (empty when the page passes)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    problems = []
    driver.get(url)
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.readyState") == "complete")
    if not driver.find_elements(By.CSS_SELECTOR, "main article, main .bd-article"):
        problems.append("no main article")
    if maths:
        state = driver.execute_async_script(_MATHJAX_DONE)
        if state != "ok":
            problems.append(f"MathJax: {state}")
        n_src = len(driver.find_elements(By.CSS_SELECTOR, ".math"))
        n_out = len(driver.find_elements(By.CSS_SELECTOR, ".math mjx-container"))
        n_err = len(driver.find_elements(By.CSS_SELECTOR, "mjx-merror"))
        if n_src == 0 or n_out < n_src or n_err:
            problems.append(f"maths: {n_out} of {n_src} formulas rendered, {n_err} errors")
        else:
            print(f"  maths: {n_out} of {n_src} formulas rendered")
        first = driver.find_elements(By.CSS_SELECTOR, ".math mjx-container")
        if first:
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", first[0])
    for entry in driver.get_log("browser"):
        if entry.get("level") in ("SEVERE", "ERROR"):
            problems.append(f"console: {entry.get('message')}")
    driver.save_screenshot(str(shot))
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", type=pathlib.Path, help="the built HTML folder")
    ap.add_argument("--screenshots", type=pathlib.Path, default=pathlib.Path("site-screenshots"))
    ap.add_argument("--api-page", default=None, help="API page for the maths check")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--chromedriver",
                    default=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    a = ap.parse_args(argv)
    site = a.site.resolve()
    if not (site / "index.html").is_file():
        ap.error(f"site: no index.html in {site}")
    for exe, what in ((a.chromium, "--chromium"), (a.chromedriver, "--chromedriver")):
        if not pathlib.Path(exe).is_file():
            ap.error(f"{what}: {exe} not found (apt-get install chromium chromium-driver)")
    pages = [("index", "index.html", False),
             ("api", a.api_page or find_api_page(site), True),
             ("gallery", "gallery/index.html", False)]
    a.screenshots.mkdir(parents=True, exist_ok=True)
    httpd = serve(site)
    base = f"http://127.0.0.1:{httpd.server_address[1]}/"
    failed = 0
    with tempfile.TemporaryDirectory(prefix="attndyn-chromium-") as profile:
        driver = make_driver(a.chromium, a.chromedriver, profile)
        try:
            for name, rel, maths in pages:
                shot = a.screenshots / f"{name}.png"
                print(f"{name}: {rel}")
                problems = check_page(driver, base + rel, shot, maths)
                for p in problems:
                    print(f"  FAIL {p}")
                failed += bool(problems)
                print(f"  {'ok' if not problems else 'failed'}; screenshot {shot}")
        finally:
            driver.quit()
            httpd.shutdown()
    print(f"{len(pages) - failed} of {len(pages)} pages passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
