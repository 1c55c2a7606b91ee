#!/usr/bin/env python3
"""Runs lengen's Hugging Face tests (`pytest -m hf`) against one transformers release; records the
versions that pass and writes docs/huggingface.md's "Tested with" line from the record.

    python3 scripts/hf_compat.py pinned    # .venv as scripts/setup.sh made it (constraints.txt)
    python3 scripts/hf_compat.py newest    # the newest transformers the package registry serves
    python3 scripts/hf_compat.py oldest    # the oldest pyproject.toml's `hf` extra allows
    python3 scripts/hf_compat.py 5.10.0    # any release (checked, not recorded)

`.ci/run` runs newest and oldest after the whole suite, which is the pinned check (the same tests
in .venv); `pinned` records that release after `scripts/pin.sh` moves it. Every release but the
pinned one gets its own venv (.venv-hf/LABEL):
torch and lengen's other libraries at constraints.txt's versions, transformers and what it
requires (huggingface-hub, tokenizers, ...) resolved for that release. FutureWarnings are errors,
so a keyword lengen still uses fails here when transformers deprecates it, releases before it is
removed. On failure: the failing tests, then one line naming the release; exit status 1.
Stdlib only: it runs before any venv exists.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
RECORD = ROOT / "docs" / "data" / "hf_tested_with.json"
DOC = ROOT / "docs" / "huggingface.md"
LOGS = ROOT / "build" / "hf-compat"
# lengen's own stack, held at the pinned versions in every side venv; everything else may move
# with transformers (5.0.0 needs huggingface-hub < 2 and tokenizers <= 0.23.0, 5.24.0 the opposite)
HELD = ("torch", "numpy", "pandas", "matplotlib", "tqdm", "pyyaml", "pytest", "pytest-xdist", "execnet")
LABELS = {"pinned": "pinned in constraints.txt", "oldest": "the oldest pyproject.toml allows",
          "newest": "the newest release"}
BEGIN, END = "<!-- tested-with: written by scripts/hf_compat.py -->", "<!-- /tested-with -->"
PYTEST = ["-m", "pytest", "-q", "-m", "hf", "-p", "no:cacheprovider", "-W", "error::FutureWarning"]


def hf_test_files() -> list[str]:
    """The test files that mention transformers (tests/conftest.py marks their tests `hf`): naming
    them spares collecting the whole suite, which costs more than these tests take to run."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if "transformers" in p.read_text(encoding="utf-8"))


def pins() -> dict[str, str]:
    """{normalised name: version} from constraints.txt."""
    found = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            found[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return found


def oldest_declared() -> str:
    match = re.search(r'"transformers>=([0-9][^",;]*)"', (ROOT / "pyproject.toml").read_text())
    if not match:
        sys.exit("hf-compat: pyproject.toml declares no lower bound for transformers")
    return match.group(1)


def run(cmd: list, log=None) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if log is not None:
        log.write_text(out.stdout)
    return out


def fail(message: str) -> None:
    print(f"hf-compat: FAILED: {message}", flush=True)
    sys.exit(1)


def side_venv(label: str, requirement: str) -> Path:
    """The venv for one release, created or brought to `requirement`; returns its python."""
    venv = ROOT / ".venv-hf" / label
    python = venv / "bin" / "python"
    if not python.exists():
        made = run([sys.executable, "-m", "venv", venv])
        if made.returncode:
            fail(f"could not create {venv}: {made.stdout.strip()[-300:]}")
    held = LOGS / "held-constraints.txt"
    held.write_text("".join(f"{n}=={v}\n" for n, v in pins().items() if n in HELD))
    pip = [python, "-m", "pip", "install", "--quiet", "--constraint", held]
    steps = [[*pip, "torch"], [*pip, "--upgrade", "-e", ".[dev,hf]", requirement]]
    if run([python, "-c", "import torch"]).returncode == 0:
        steps = steps[1:]
    for step in steps:
        done = run(step, LOGS / f"{label}-install.log")
        if done.returncode:
            last = [line for line in done.stdout.splitlines() if line.strip()][-1:] or ["?"]
            fail(f"could not install {requirement} into {venv}: {last[0]} "
                 f"(log: {(LOGS / f'{label}-install.log').relative_to(ROOT)})")
    return python


def versions(python: Path) -> dict:
    code = ("import json, platform, torch, transformers; print(json.dumps({'transformers': "
            "transformers.__version__, 'torch': torch.__version__, 'python': platform.python_version()}))")
    out = run([python, "-c", code])
    if out.returncode:
        fail(f"{python} cannot import torch and transformers: {out.stdout.strip()[-300:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def counts(summary: str) -> dict:
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", summary)}


def render(record: dict) -> str:
    """The docs line for a record {label: {transformers, torch, python, passed, date}}."""
    parts = [f"**{record[label]['transformers']}** ({LABELS[label]}"
             + (f" on {record[label]['date']}" if label == "newest" else "") + ")"
             for label in ("oldest", "pinned", "newest") if label in record]
    listed = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    first = next(iter(record.values()))
    # in the order the releases are named (the pinned run's environment has every extra, so more tests)
    tests = [record[label]["passed"] for label in ("oldest", "pinned", "newest") if label in record]
    return (f"Tested with transformers {listed}: {'/'.join(map(str, tests))} tests passed, respectively "
            f"(`pytest -m hf`, FutureWarnings as errors) with torch {first['torch']} on Python "
            f"{first['python']}. This line is written by `scripts/hf_compat.py`, which `.ci/run` runs.")


def write_record(label: str, entry: dict) -> None:
    record = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    record[label] = entry
    record = {k: record[k] for k in LABELS if k in record}
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    tmp = RECORD.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(RECORD)
    text = DOC.read_text()
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < start:
        fail(f"{DOC.relative_to(ROOT)} has no {BEGIN} ... {END} block to write into")
    text = text[:start + len(BEGIN)] + "\n" + render(record) + "\n" + text[stop:]
    tmp = DOC.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(DOC)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not (argv[0] in LABELS or re.fullmatch(r"\d+\.\d+(\.\d+)?\S*", argv[0])):
        print(__doc__, file=sys.stderr)
        return 2
    label = argv[0]
    LOGS.mkdir(parents=True, exist_ok=True)
    if label == "pinned":
        python = ROOT / ".venv" / "bin" / "python"
        if not python.exists():
            fail("no .venv: run scripts/setup.sh first")
    else:
        requirement = {"newest": "transformers", "oldest": f"transformers=={oldest_declared()}"} \
            .get(label, f"transformers=={label}")
        python = side_venv(label, requirement)
    found = versions(python)
    log = LOGS / f"{label}.log"
    tests = run([python, *PYTEST, *hf_test_files()], log)
    summary = tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else ""
    n = counts(summary)
    what = f"transformers {found['transformers']}" + (f" ({LABELS[label]})" if label in LABELS else "")
    if tests.returncode or not n.get("passed"):
        for line in tests.stdout.splitlines():
            if line.startswith(("FAILED ", "ERROR ")):
                print(line[:200])
        fail(f"lengen.hf breaks with {what}: {summary or 'pytest printed nothing'}; constraints.txt "
             f"pins {pins().get('transformers')}; log: {log.relative_to(ROOT)}")
    print(f"hf-compat: {what}: {n['passed']} passed (torch {found['torch']}, Python {found['python']})")
    if label in LABELS:
        write_record(label, {**found, "passed": n["passed"],
                             "date": datetime.date.today().isoformat()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
