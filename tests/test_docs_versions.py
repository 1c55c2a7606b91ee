"""docs/huggingface.md's "Tested with" line says what the committed record of the last
compatibility check says (docs/data/hf_tested_with.json), and that record covers the release
constraints.txt pins and the oldest pyproject.toml allows. Read here with plain regexes."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def docs_line() -> str:
    text = (ROOT / "docs" / "huggingface.md").read_text()
    block = re.search(r"<!-- tested-with:[^>]*-->\n(.*?)\n<!-- /tested-with -->", text, re.S)
    assert block, "docs/huggingface.md lost its tested-with block"
    return block.group(1)


def record() -> dict:
    return json.loads((ROOT / "docs" / "data" / "hf_tested_with.json").read_text())


def test_the_docs_line_lists_the_recorded_releases():
    line, rec = docs_line(), record()
    said = dict((role, version) for version, role in
                re.findall(r"\*\*([^*]+)\*\* \((the oldest|pinned|the newest)", line))
    assert said == {"the oldest": rec["oldest"]["transformers"], "pinned": rec["pinned"]["transformers"],
                    "the newest": rec["newest"]["transformers"]}
    assert f"on {rec['newest']['date']}" in line
    assert f"torch {rec['pinned']['torch']} on Python {rec['pinned']['python']}" in line
    assert re.search(rf"\b{rec['pinned']['passed']}\b[^.]*tests passed", line)


def test_the_record_covers_the_pinned_and_the_oldest_declared_release():
    rec = record()
    pinned = re.search(r"^transformers==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    oldest = re.search(r'"transformers>=([^",]+)"', (ROOT / "pyproject.toml").read_text())
    assert rec["pinned"]["transformers"] == pinned.group(1)
    assert rec["oldest"]["transformers"] == oldest.group(1)
    assert all(entry["passed"] > 0 for entry in rec.values())
