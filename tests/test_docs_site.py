"""The documentation site: it builds with warnings as errors, every internal link and anchor
leads somewhere, and a real browser (headless Chromium) shows the index, an API page and a
notebook page without a console error, saving screenshots.

Needs the docs extra (``pip install -e ".[docs]"``) and Chromium with its driver (Debian:
``apt-get install chromium chromium-driver``); ``.ci/run`` installs both and sets
``JITOPS_REQUIRE_DOCS=1``, under which their absence fails instead of skipping.
"""

import functools
import html.parser
import http.server
import importlib
import os
import shutil
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = os.environ.get("JITOPS_REQUIRE_DOCS") == "1"
SCREENSHOTS = Path(os.environ.get("JITOPS_SCREENSHOTS", ROOT / "docs" / "_build" / "screenshots"))


def _need(module: str, what: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        if REQUIRED:
            raise
        pytest.skip(f"{module} is missing: {what}")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    for m in ("sphinx", "myst_nb", "numpydoc", "pydata_sphinx_theme"):
        _need(m, 'install the docs extra: pip install -e ".[docs]"')
    out = tmp_path_factory.mktemp("site")
    res = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q",
                          "-b", "html", str(ROOT / "docs"), str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-5000:]
    return out


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("href", "src"):
            if a.get(key) and not (tag == "link" and key == "href" and
                                   a.get("rel") in ("preconnect", "dns-prefetch")):
                self.links.append(a[key])


def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(errors="replace"))
    return p


def test_every_internal_link_and_anchor_resolves(site):
    pages = sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)
    assert len(pages) > 15
    parsed = {page: _parse(page) for page in pages}
    broken = []
    for page, p in parsed.items():
        for link in p.links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or url.netloc or link.startswith(("mailto:", "javascript:")):
                continue
            target = (page.parent / urllib.parse.unquote(url.path)).resolve() if url.path \
                else page
            if not target.exists():
                broken.append(f"{page.relative_to(site)} -> {link}")
            elif url.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if url.fragment not in ids:
                    broken.append(f"{page.relative_to(site)} -> {link} (no such anchor)")
    assert not broken, "\n".join(broken[:40])


def test_the_generated_pages_say_what_they_should(site):
    api = (site / "api.html").read_text()
    for name in ("jitops.subtract", "jitops.elementwise_sub", "jitops.elementwise",
                 "jitops.act.relu", "jitops.set_num_threads", "jitops.result_shape"):
        assert f'id="{name}"' in api, name
    perf = (site / "performance.html").read_text()
    assert "vs PyTorch" in perf and "latest.png" in perf
    tour = (site / "notebooks" / "01_tour.html").read_text()
    assert "<img" in tour  # the committed outputs, pictures included


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def browser():
    webdriver = _need("selenium.webdriver", 'install the docs extra: pip install -e ".[docs]"')
    binary, driver_path = _chromium(), shutil.which("chromedriver")
    if binary is None or driver_path is None:
        if REQUIRED:
            raise AssertionError("Chromium or chromedriver missing (apt-get install chromium "
                                 "chromium-driver)")
        pytest.skip("Chromium or chromedriver missing: apt-get install chromium chromium-driver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("page, expect", [
    ("index.html", "jitops"),
    ("api.html", "jitops.subtract"),
    ("notebooks/01_tour.html", "axis"),
])
def test_a_browser_shows_the_page_without_console_errors(browser, server, page, expect):
    browser.get(f"{server}/{page}")
    body = browser.find_element("tag name", "body").text
    assert expect in body and len(body) > 200
    broken_images = browser.execute_script(
        "return Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)"
        ".map(i => i.src)")
    assert not broken_images, broken_images
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, "\n".join(e["message"] for e in errors)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / (page.replace("/", "_").replace(".html", ".png"))
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
