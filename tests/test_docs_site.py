"""The docs site (mkdocs.yml, pages in docs/): `mkdocs build --strict` succeeds, so a broken link,
a page missing from the nav or a nav entry without its page fails here; the built home page and
a how-to render in headless Chromium with the site's navigation; and the CLI reference
(docs/reference/cli.md) is what scripts/cli_reference.py writes from today's parser. One build
for the module (a few seconds)."""

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lengen.cli import command_paths, build_parser

from guards import chromium

ROOT = Path(__file__).resolve().parent.parent


def _mkdocs_config():
    """mkdocs.yml as MkDocs reads it (nav and all), or a skip where MkDocs is not installed."""
    try:
        from mkdocs.config import load_config
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI must have mkdocs (scripts/setup.sh installs the docs extra)")
        pytest.skip("mkdocs is not installed (the docs extra: pip install -e '.[docs]')")
    return load_config(str(ROOT / "mkdocs.yml"))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built with --strict into a temporary folder (the repository stays untouched)."""
    _mkdocs_config()
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    said = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 0, "\n".join([line for line in said if not line.startswith("INFO")] or said[-40:])
    return out


def test_the_site_builds_strict(site):
    assert (site / "index.html").is_file()
    assert (site / "reference" / "cli.html").is_file() and (site / "reference" / "api.html").is_file()
    # mkdocstrings rendered the API pages: lengen.hf's extend has its own heading
    assert 'id="lengen.hf.extend"' in (site / "reference" / "api" / "hf.html").read_text()


def _title(page: Path) -> str:
    """A page's `# title` as the browser shows it (inline code and emphasis unmarked)."""
    first = next(line for line in page.read_text().splitlines() if line.startswith("# "))
    return re.sub(r"`|\*\*?", "", first[2:]).strip()


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).replace("\u00b6", " ").split())


def _dom(browser: str, url: str, profile: Path) -> str:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", "--virtual-time-budget=10000", f"--user-data-dir={profile}"]
    return subprocess.run([browser, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout


def test_home_and_a_how_to_render_with_their_navigation(site, tmp_path):
    browser = chromium()
    nav = _mkdocs_config()["nav"]
    sections = [next(iter(item)) for item in nav if isinstance(item, dict)]
    how_to = next(item["How-to guides"] for item in nav if isinstance(item, dict) and "How-to guides" in item)
    first = how_to[0] if isinstance(how_to[0], str) else next(iter(how_to[0].values()))
    pages = {"index.md": site / "index.html", first: site / Path(first).with_suffix(".html")}
    for source, built in pages.items():
        dom = _dom(browser, built.resolve().as_uri(), tmp_path / "profile")
        tabs = re.search(r'<nav class="md-tabs".*?</nav>', dom, re.S)
        assert tabs, f"{source}: no navigation tabs in the rendered page"
        shown = _text(tabs[0])
        assert all(s in shown for s in sections), (source, sections, shown)
        h1 = re.search(r"<h1[^>]*>(.*?)</h1>", dom, re.S)
        assert h1 and _text(h1[1]) == _title(ROOT / "docs" / source), (source, h1 and _text(h1[1]))
        assert 'class="md-sidebar md-sidebar--primary"' in dom  # the section's pages beside it
        fetched = re.findall(r'(?:src|<link[^>]*href)="(https?://[^"]*)"', dom)
        assert not fetched, f"{source}: the page fetches from outside the site: {fetched}"
        if "<pre" in built.read_text():  # the theme's script ran: it adds a copy button to code
            assert "data-clipboard-target" in dom, f"{source}: the theme's script did not run"


def test_the_cli_reference_is_what_the_parser_gives():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "cli_reference.py"), "--check"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    if "not compared" in done.stdout:
        pytest.skip(done.stdout.strip())
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    headings = set(re.findall(r"^#{2,4} (lengen.*)$", page, re.M))
    missing = [p for p in command_paths(build_parser()) if "lengen " + " ".join(p) not in headings]
    assert not missing, missing
