"""Every `lengen` command in the README's and docs/'s code blocks parses with today's CLI: a flag
renamed or removed, a choice dropped or a subcommand moved fails here, not in a reader's shell.
Parsing only (argparse, as `lengen` would): nothing runs."""

import contextlib
import functools
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

from lengen.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from build_docs import doc_pages  # noqa: E402

#: the README and every page of the docs site (docs/ and its section folders; docs/data/ is results)
PAGES = [ROOT / "README.md", *doc_pages(ROOT / "docs")]
FENCE = re.compile(r"^\s*```(\w*)[^\n]*\n(.*?)^\s*```", re.S | re.M)


def code_blocks(text: str, language: str | None = None) -> list[str]:
    """A page's fenced code blocks (in block quotes too), or only those of one language."""
    return [body for lang, body in FENCE.findall(re.sub(r"^> ?", "", text, flags=re.M))
            if language is None or lang == language]


@functools.cache
def parser():
    """lengen's argument parser, built once (parsing does not change it)."""
    return build_parser()


def documented_commands(text: str) -> list[str]:
    """The `lengen ...` commands of a page's code blocks, continuation lines joined, shell
    variables set in the block (VAR=..., for VAR in FIRST ...) expanded, others as a placeholder
    path; usage synopses (with [options] or ...) are not commands."""
    found = []
    for block in code_blocks(text):
        env = {}
        for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
            line = re.sub(r"^\$\s+", "", line.strip())
            if m := re.match(r"^([A-Za-z_]\w*)=(\"[^\"]*\"|'[^']*'|\S+)$", line):
                env[m[1]] = m[2][1:-1] if m[2][:1] in "\"'" else m[2]
                continue
            if m := re.match(r"^for (\w+) in (\S+)", line):
                env[m[1]] = m[2]
            # a separator outside quotes (`--versus "standard; test standard"` is one argument)
            for part in re.split(r'(?:&&|;|\|\|?)(?=(?:[^"]|"[^"]*")*$)', line):
                part = part.strip().removeprefix("do ").strip()
                if not part.startswith("lengen ") or "[" in part or "..." in part:
                    continue
                for name in sorted(env, key=len, reverse=True):
                    part = part.replace("$" + name, env[name])
                found.append(re.sub(r"\$\(?[\w.-]*\)?", "PATH", part))
    return found


def parse_error(command: str) -> str | None:
    """argparse's message for a command it refuses, or None."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser().parse_args(shlex.split(command, comments=True)[1:])
    except SystemExit as e:
        if e.code not in (0, None):
            return err.getvalue().strip().splitlines()[-1]
    return None


def test_the_docs_show_commands():
    commands = [c for page in PAGES for c in documented_commands(page.read_text())]
    assert len(commands) > 50, len(commands)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_documented_command_parses(page):
    refused = [(c, e) for c in documented_commands(page.read_text()) if (e := parse_error(c))]
    assert not refused, "\n".join(f"{c}\n  -> {e}" for c, e in refused)


def test_a_stale_flag_in_a_code_block_is_refused():
    page = ("Train:\n\n```bash\nM=runs/x\nlengen train --task bucket_sort \\\n    --no-such-flag 3 --out $M\n"
            "lengen inspect RUN_DIR [--attention] [--activations]\n```\n")
    commands = documented_commands(page)
    assert commands == ["lengen train --task bucket_sort --no-such-flag 3 --out runs/x"]
    assert "--no-such-flag" in parse_error(commands[0])
    assert parse_error("lengen train --task bucket_sort --out runs/x") is None
    assert "invalid choice" in parse_error("lengen sweep launch ruoss2023-mini")


SCRIPT_CALL = re.compile(r"(?:python3?|bash)\s+((?:benchmarks|scripts)/[\w./-]+)([^`\n]*)")
#: a file of the repository a page names (docs/data/..., lengen/..., tests/..., a script)
REPO_FILE = re.compile(r"(?<![\w/.])((?:benchmarks|scripts|lengen|tests|docs)/[\w./-]+"
                       r"\.(?:py|sh|cpp|md|png|csv|json|txt))")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_file_a_page_names_exists_and_scripts_take_the_flags_shown(page):
    """A file of the repository a page names (a benchmark, a script, a module, a test, a data
    file) exists, and each --flag a page passes a script is spelled in that script (its argparse
    or its shell `case`)."""
    text = re.sub(r"\s*\\\n\s*", " ", page.read_text())
    names = REPO_FILE.findall(re.sub(r"<!-- generated:.*?-->", "", text))  # (a block's path is under docs/data)
    missing = [p for p in names if not (ROOT / p).exists()]
    assert not missing, missing
    unknown = [(m[1], flag) for m in SCRIPT_CALL.finditer(text) if (ROOT / m[1]).is_file()
               for flag in re.findall(r"(?<!\S)(--[a-z][\w-]*)", m[2].split("#")[0])
               if not re.search(re.escape(flag) + r"(?![\w-])", (ROOT / m[1]).read_text())]
    assert not unknown, unknown


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_python_example_is_python_and_imports_what_lengen_has(page):
    """A ```python block of a page parses, and every name it imports from lengen exists (a moved
    or renamed function fails here). Not run: examples load models and train."""
    import ast
    import importlib
    import importlib.util
    import textwrap

    missing = []
    for block in code_blocks(page.read_text(), "python"):
        tree = ast.parse(textwrap.dedent(block))   # a SyntaxError names the line
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lengen":
                module = importlib.import_module(node.module)
                missing += [f"{node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)
                            and importlib.util.find_spec(f"{node.module}.{a.name}") is None]
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "lengen" and importlib.util.find_spec(a.name) is None:
                        missing.append(a.name)
    assert not missing, missing


def test_the_readme_s_model_example_runs_and_gives_the_shape_it_says():
    """README's Python example (a task, a model, a position sampler) is self-contained: run it and
    compare the logits' shape with the `# [B, T, V]` comment beside the call."""
    readme = (ROOT / "README.md").read_text()
    block = next(b for b in code_blocks(readme, "python") if "get_task" in b)
    said = re.search(r"logits = .*#\s*\[([\d, ]+)\]", block)
    assert said, "the example's last line should say the logits' shape"
    scope = {}
    exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 - the README's own example
    assert list(scope["logits"].shape) == [int(x) for x in said[1].split(",")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_inline_lengen_command_names_flags_and_subcommands_that_exist(page):
    """`lengen ...` in a sentence is often a fragment (no run folder, a flag without its value),
    so only what argparse cannot know is refused: an unknown flag or subcommand."""
    prose = FENCE.sub("", page.read_text())
    spans = [re.sub(r"\s+", " ", s) for s in re.findall(r"`(lengen [^`]+)`", prose)]
    refused = [(s, e) for s in spans if not re.search(r"\[|\.\.\.|\$|\\\|", s)
               and (e := parse_error(s)) and ("unrecognized arguments" in e or "invalid choice" in e)]
    assert not refused, refused


def test_every_sweep_and_train_preset_a_page_runs_is_shipped():
    """`lengen sweep run NAME` and `lengen train --preset NAME` in the docs name presets lengen
    ships (argparse takes any string there; a renamed preset would fail only at run time)."""
    from lengen.presets import PRESETS
    from lengen.sweeps.presets import preset_names

    sweeps, trains = set(preset_names()), set(PRESETS)
    unknown = []
    for page in PAGES:
        text = page.read_text()
        # a name, not a flag, a file or an upper-case placeholder (SPEC, NAME)
        names = [("sweep", n) for n in re.findall(r"lengen sweep run ([a-z][\w.-]*)", text)
                 if not n.endswith((".yaml", ".yml"))]
        names += [("train", n) for n in re.findall(r"--preset ([a-z][\w-]*)", text)]
        unknown += [(page.name, kind, n) for kind, n in names if n not in (sweeps if kind == "sweep" else trains)]
    assert not unknown, unknown
