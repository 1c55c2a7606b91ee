"""The docs site's pages are a manual: user pages (every page but the engineering notes) carry no
run-log dates or commit hashes outside generated blocks and HTML comments, link only to pages
and files of the site itself, and stay short enough to read (results pages and the generated CLI
reference excepted). Dated history belongs in docs/engineering/."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "scripts"))
from build_docs import doc_pages  # noqa: E402

PAGES = doc_pages(DOCS)
#: the engineering notes: dated GPU logs, debugging histories, time accounting (not user pages)
ENGINEERING = "engineering"
USER_PAGES = [p for p in PAGES if p.relative_to(DOCS).parts[0] != ENGINEERING]
#: pages allowed to be long: a study's results with its appendices, the generated CLI reference
LONG_OK = ("results/", "reference/cli.md")
MAX_LINES = 320   # "under ~300 lines"

#: text a script writes from committed data: build_docs.py's blocks, hf_compat.py's "Tested with" line
GENERATED = re.compile(r"<!-- generated:.*?<!-- end generated -->|<!-- tested-with:.*?<!-- /tested-with -->", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
DATE = re.compile(r"(?<![\w-])20\d\d-[01]\d-[0-3]\d(?![\w-])")
#: a commit hash: 7-40 lowercase hex digits with at least one letter and one digit, standing alone
COMMIT = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w/-])")
#: a list item at the start of its line (a bullet or a number)
LIST_ITEM = re.compile(r"^([-*+]|\d+[.)])\s+\S")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def visible(text: str) -> str:
    """What a reader of the site sees of a page's own text: generated blocks (rebuilt from data,
    with their provenance lines) and HTML comments removed."""
    return COMMENT.sub("", GENERATED.sub("", text))


def run_log_marks(text: str) -> list[str]:
    return [m[0] for pattern in (DATE, COMMIT) for m in pattern.finditer(visible(text))]


def outside_links(page: Path, text: str, docs: Path = DOCS) -> list[str]:
    """Link targets of a page that are not a page or file of the site: a web address, a path that
    leaves docs/, or a file that does not exist (anchors within pages are MkDocs' to check)."""
    bad = []
    for target in LINK.findall(re.sub(r"```.*?```", "", text, flags=re.S)):
        path = target.split("#")[0]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):      # http:, https:, file:, mailto:
            bad.append(target)
        elif path:
            resolved = (page.parent / path).resolve()
            if not resolved.is_relative_to(docs.resolve()) or not resolved.exists():
                bad.append(target)
    return bad


def markdown_problems(text: str) -> list[str]:
    """Where a page that reads well on GitHub breaks in MkDocs (Python-Markdown): a list or a table
    right after a paragraph line (it joins the paragraph as text), an item right after an item that
    has a blank line in it (the same), and a line of a list indented by 1-3 spaces (a nested list
    or a code block in an item needs 4). Generated blocks are read too: the site shows them.
    "line: what" each."""
    found = []
    fence = in_list = loose = False
    before = ""   # the previous line's kind: "", text, list, table, other
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if stripped.startswith("```"):
            if in_list and not fence and 1 <= indent <= 3:
                found.append(f"{n}: a code block in a list item indented by {indent} (4 needed)")
            fence = not fence
            before = "other"
            continue
        if fence:
            continue
        if not stripped:
            before = ""
            loose = in_list   # a blank line inside an item: its next item needs one too
            continue
        if indent == 0:
            if LIST_ITEM.match(line):
                if before == "text" and not in_list:
                    found.append(f"{n}: a list right after a paragraph line (add a blank line)")
                elif before and in_list and loose:
                    found.append(f"{n}: an item right after an item with a blank line in it (add a blank line)")
                in_list, loose, before = True, False, "list"
                continue
            if stripped.startswith("|"):
                if before in ("text", "list"):
                    found.append(f"{n}: a table right after a paragraph line (add a blank line)")
                before = "table"
                continue
            if before == "" or not in_list:
                in_list = False
            before = "other" if stripped.startswith(("#", "<")) else ("list" if in_list else "text")
            continue
        if in_list and indent <= 3:
            found.append(f"{n}: a line of a list indented by {indent} (nested lists and code need 4)")
        before = "list" if in_list else ("text" if not stripped.startswith("<") else "other")
    return found


def test_the_site_has_its_sections():
    sections = {p.relative_to(DOCS).parts[0] for p in PAGES if len(p.relative_to(DOCS).parts) > 1}
    assert {"how-to", "reference", "results", ENGINEERING} <= sections, sections
    assert (DOCS / "index.md").exists() and (DOCS / "getting-started.md").exists()


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_a_user_page_carries_no_run_log_dates_or_commit_hashes(page):
    found = run_log_marks(page.read_text())
    assert not found, (f"{page.relative_to(ROOT)}: {found}: dated run logs and commit hashes go to "
                       f"docs/{ENGINEERING}/ (or into an HTML comment when they are provenance)")


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_page_links_only_inside_the_site(page):
    text = page.read_text()
    if page.name == "README.md":   # the README links into docs/ from the repository root
        bad = [t for t in LINK.findall(text) if re.match(r"^[a-z][a-z0-9+.-]*:", t)
               or not (ROOT / t.split("#")[0]).resolve().is_relative_to(ROOT)
               or not (ROOT / t.split("#")[0]).exists()]
    else:
        bad = outside_links(page, text)
    assert not bad, f"{page.relative_to(ROOT)} links outside the site: {bad}"


@pytest.mark.parametrize("page", [p for p in USER_PAGES if not p.relative_to(DOCS).as_posix().startswith(LONG_OK)],
                         ids=lambda p: p.relative_to(DOCS).as_posix())
def test_a_user_page_is_short_enough_to_read(page):
    lines = len(page.read_text().splitlines())
    assert lines <= MAX_LINES, f"{page.relative_to(ROOT)}: {lines} lines (split it: a guide, a how-to, results)"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_a_page_renders_its_lists_and_tables_in_mkdocs(page):
    found = markdown_problems(page.read_text())
    assert not found, f"{page.relative_to(ROOT)}:\n" + "\n".join(found)


def test_the_markdown_check_finds_what_mkdocs_would_render_as_text():
    """Each pattern Python-Markdown renders differently from GitHub, and its fixed form."""
    assert markdown_problems("Setup:\n- a\n- b\n") == ["2: a list right after a paragraph line (add a blank line)"]
    assert markdown_problems("Setup:\n\n- a\n- b\n") == []
    assert markdown_problems("Results:\n| a |\n|---|\n") == ["2: a table right after a paragraph line (add a blank line)"]
    assert markdown_problems("<!-- hand-written: x -->\n| a |\n|---|\n\n## H\n- a\n") == []
    assert markdown_problems("- a\n  - b\n- c\n") == ["2: a line of a list indented by 2 (nested lists and code need 4)"]
    assert markdown_problems("- a\n    - b\n    continued\n- c\nlazy line\n") == []
    assert markdown_problems("- a\n\n  ```\n  x\n  ```\n") == [
        "3: a code block in a list item indented by 2 (4 needed)"]
    # an item whose text has a blank line in it (a second paragraph, a code block) is loose: the
    # next item without a blank line before it would be read as that item's text
    assert markdown_problems("- a\n\n    ```\n    x\n    ```\n- b\n") == [
        "6: an item right after an item with a blank line in it (add a blank line)"]
    assert markdown_problems("- a\n\n    ```\n    x\n    ```\n\n- b\n- c\n") == []
    # a paragraph after a list ends the list; an indented line there is a paragraph's own text
    assert markdown_problems("- a\n\nText\n  more\n") == []
    # fenced text is not read; a generated block's is (the site shows it)
    assert markdown_problems("```\nSetup:\n- a\n```\n") == []
    assert markdown_problems("<!-- generated: x -->\nt\n| a |\n<!-- end generated -->\n") == [
        "3: a table right after a paragraph line (add a blank line)"]
    # ... and what follows a fence is read again
    assert markdown_problems("```\nx\n```\n- a\n  - b\n") == ["5: a line of a list indented by 2 (nested lists and code need 4)"]


def test_the_checks_find_what_they_look_for(tmp_path):
    """Each check on a page made to fail it (and to pass it at the boundary)."""
    page = ("# Speed\n\nMeasured on 2026-11-23 at commit 1ad1355, torch 2.13.0, sha 9f86d08.\n"
            "<!-- hand-written: run of 2026-11-24, lengen 0b1faee -->\n"
            "<!-- generated: bench x -->\n| 2026-11-25 | lengen c7069977506a |\n<!-- end generated -->\n"
            "Tokens 1234567 and deadbeef words; 2026-1-5; the file report_2026-11-23.csv.\n")
    assert run_log_marks(page) == ["2026-11-23", "1ad1355", "9f86d08"]
    docs = tmp_path / "docs"
    for name in ("index.md", "results/index.md", "how-to/x.md"):
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text("# x\n")
    (tmp_path / "lengen" / "hf").mkdir(parents=True)
    (tmp_path / "lengen" / "hf" / "patch.py").write_text("")
    text = ("[a](../index.md) [b](../results/index.md#top) [c](https://arxiv.org/abs/2305.16843) "
            "[d](../../lengen/hf/patch.py) [e](../no-such-page.md) ![f](../figures/none.png) [g](#here)")
    assert outside_links(docs / "how-to" / "x.md", text, docs) == ["https://arxiv.org/abs/2305.16843", "../../lengen/hf/patch.py",
                                              "../no-such-page.md", "../figures/none.png"]
