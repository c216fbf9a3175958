"""The results pages of the documentation site: made from the committed results by
``mkdocs build`` (a page per task, per paper's claims, per method), and opened in a real
headless browser (Chromium, from Debian's ``chromium`` package): the task pages show their
tables and images, and no link of the results pages is broken. The browser test is one of the
slow checks (``pytest -m slow``; CI runs them) and skips, with the reason, where no Chromium is
installed."""

from __future__ import annotations

import functools
import html
import json
import re
import shutil
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fedbench.leaderboard.site import claims_sections, results_nav, site_pages

REPO = Path(__file__).resolve().parents[1]
BOARD = REPO / "leaderboard"
needs_results = pytest.mark.skipif(not (BOARD / "records").is_dir(), reason="no committed records (not a checkout)")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


@needs_results
def test_results_pages_come_from_the_committed_results():
    from fedbench.methods import METHODS

    pages, assets = site_pages(REPO)
    tasks = sorted(p.stem for p in (BOARD / "records").iterdir() if p.is_dir())
    papers = list(claims_sections((BOARD / "claims.md").read_text(encoding="utf-8"))[1])
    # a section per claims file with claims (fixes.yaml holds corrections, not a paper)
    assert papers == sorted(p.stem for p in (BOARD / "claims").glob("*.yaml") if p.stem != "fixes")
    assert set(pages) == ({f"results/{t}.md" for t in tasks} | {f"results/claims/{p}.md" for p in papers}
                          | {f"results/methods/{m}.md" for m in METHODS.keys()}
                          | {"results/index.md", "results/methods/index.md"})
    ledgar = pages["results/ledgar.md"]
    assert ledgar.startswith((BOARD / "ledgar.md").read_text(encoding="utf-8"))  # the committed table, as it is
    shown = re.findall(r"!\[[^]]*\]\(([^)]+)\)", ledgar)
    assert "ledgar/iid_curves.png" in shown and all(f"results/{p}" in assets for p in shown)
    assert all(path.is_file() for path in assets.values())
    claims = pages["results/claims/fed_hello.md"]
    assert claims.startswith("# Fed-HeLLo") and "## How the claims are tested" in claims and "FedLoRA" not in claims
    # the paper's figure (plot_claims), linked from its page and copied beside it
    assert re.findall(r"!\[[^]]*\]\(([^)]+)\)", claims) == ["claims_gaps/fed_hello.png"]
    assert assets["results/claims/claims_gaps/fed_hello.png"] == BOARD / "claims_gaps" / "fed_hello.png"
    hello = pages["results/methods/fed_hello_rgd.md"]
    assert "Eq. 7" in hello and "rule version 1" in hello  # the paper's equation, from the module docstring
    assert "`tests/methods/test_fed_hello.py::test_rgd_priors_eq7_bottleneck_hand_count`" in hello
    cost = hello.split("## Measured cost per resource tier")[1]
    assert "| [ledgar](../ledgar.md) | 6:3:1 | 0 |" in cost and "MB" in cost
    nav = json.dumps(results_nav(pages))
    assert all(p in nav for p in pages)


def _browser() -> str | None:
    return next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


#: A page that holds every page to check in an iframe: its load event waits for theirs (and
#: for their images), then it writes what the browser shows into <pre id="out">, which
#: ``--dump-dom`` prints (no timers, no virtual time: the dump follows the load event).
CHECKER = """<!doctype html><html><body><pre id="out">pending</pre>
%s
<script>
window.addEventListener("load", () => {
  const found = {};
  for (const frame of document.querySelectorAll("iframe")) {
    const doc = frame.contentDocument, images = [...doc.images];
    found[frame.getAttribute("src")] = {title: doc.title, tables: doc.querySelectorAll("table").length,
      images: images.map(i => ({src: i.src, width: i.naturalWidth})),
      links: [...doc.querySelectorAll("a[href]")].map(a => a.href)};
  }
  document.getElementById("out").textContent = JSON.stringify(found);
});
</script></body></html>"""


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # the browser closing a connection early is no error
        pass


@needs_results
@pytest.mark.slow  # a second full site build (test_docs builds it in the default run) and a browser
@pytest.mark.skipif(_browser() is None, reason="no Chromium installed (Debian: apt-get install chromium)")
def test_built_site_in_a_headless_browser(tmp_path):
    from test_docs import build

    site = tmp_path / "site"
    p = build(REPO, site)
    assert p.returncode == 0, p.stderr
    tasks = sorted(p.stem for p in (BOARD / "records").iterdir() if p.is_dir())
    pages = ([f"/results/{t}/" for t in tasks] + ["/results/", "/results/claims/fed_hello/",
                                                   "/results/methods/fed_hello/", "/results/methods/"])
    frames = "\n".join(f'<iframe src="{p}" style="width:1400px;height:900px"></iframe>' for p in pages)
    (site / "check.html").write_text(CHECKER % frames, encoding="utf-8")
    server = _Server(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        dom = subprocess.run([_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                              f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", f"{base}/check.html"],
                             capture_output=True, text=True, timeout=300).stdout
        m = re.search(r'<pre id="out">(.*?)</pre>', dom, re.S)
        assert m and m.group(1) != "pending", f"the browser did not finish: {dom[-500:]}"
        found = json.loads(html.unescape(m.group(1)))
        assert sorted(found) == sorted(pages)
        for task in tasks:  # a task page shows its tables and every plot, decoded by the browser
            page = found[f"/results/{task}/"]
            assert page["tables"] >= 2, task
            assert page["images"] and all(i["width"] > 100 for i in page["images"]), (task, page["images"])
        assert found["/results/methods/fed_hello/"]["tables"] >= 2
        claims = found["/results/claims/fed_hello/"]  # the paper's figure (plot_claims), decoded
        assert len(claims["images"]) == 1 and claims["images"][0]["width"] > 100, claims["images"]
        broken = []
        links = sorted({link for page in found.values() for link in page["links"] if link.startswith(base)})
        for link in links:
            url, _, anchor = link.partition("#")
            try:
                with urllib.request.urlopen(url, timeout=30) as r:
                    body = r.read().decode("utf-8", "replace") if url.endswith("/") or url.endswith(".html") else ""
            except urllib.error.HTTPError as err:
                broken.append(f"{link}: {err.code}")
                continue
            if anchor and f'id="{urllib.parse.unquote(anchor)}"' not in body:
                broken.append(f"{link}: no anchor")
        assert len(links) > 50 and not broken, broken
    finally:
        server.shutdown()
