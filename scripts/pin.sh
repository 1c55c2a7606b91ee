#!/usr/bin/env bash
# Rewrites constraints.txt from what .venv holds now. Use it to move the pins after the tests pass
# with newer releases:
#   LENGEN_UNPINNED=1 bash scripts/setup.sh    # newest releases within pyproject's ranges
#   .venv/bin/python -m pytest -q              # and the checks in .ci/run
#   bash scripts/pin.sh                        # record them; commit constraints.txt
#   python3 scripts/hf_compat.py pinned        # and docs/huggingface.md's "Tested with" line
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(.venv/bin/python -c 'import platform; print(".".join(platform.python_version_tuple()[:2]))')
{
  echo "# The versions lengen's tests passed with (scripts/pin.sh, $(date -u +%Y-%m-%d)), for Python $py"
  echo "# on Linux x86-64 with the CPU build of torch. scripts/setup.sh installs from this file, so the"
  echo "# README's commands give the same environment on any day. pyproject.toml keeps the ranges."
  echo "# python $py"
  # the local label (+cpu) names the build, not the release: the pin matches either build
  .venv/bin/pip freeze --exclude-editable --disable-pip-version-check | grep -v '^-e ' \
    | sed -E 's/^([A-Za-z0-9_.-]+==[^+]+)\+.*/\1/' | LC_ALL=C sort -f
} > constraints.txt.tmp
mv constraints.txt.tmp constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) pins for Python $py"
