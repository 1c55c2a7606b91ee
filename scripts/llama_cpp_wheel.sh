#!/usr/bin/env bash
# Installs llama-cpp-python, at the version constraints.txt pins, into .venv (after scripts/setup.sh):
# the GGUF export checks its files with it (`lengen hf export --format gguf`), and so do
# tests/test_hf_export_gguf.py's llama.cpp comparisons (skipped without it).
# PyPI has no Linux CPU wheel of it: pip compiles llama.cpp, about 25 minutes on 2 cores. So a
# built wheel is kept and reused: looked for in build/wheels/ and in $LENGEN_WHEEL_CACHE (default
# ~/.cache/lengen/wheels), built into the latter when neither has it. GGML_NATIVE=OFF: the wheel
# runs on any x86-64 CPU with AVX2, not only on the one that built it.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^llama[-_]cpp[-_]python==//p' constraints.txt)
[ -n "$version" ] || { echo "scripts/llama_cpp_wheel.sh: constraints.txt pins no llama-cpp-python" >&2; exit 2; }
cache=${LENGEN_WHEEL_CACHE:-$HOME/.cache/lengen/wheels}
have=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))" 2>/dev/null || true)
if [ "$have" = "$version" ]; then
  echo "scripts/llama_cpp_wheel.sh: llama-cpp-python $version is already in .venv"
  exit 0
fi
find_wheel() { ls build/wheels/llama_cpp_python-"$version"-*.whl "$cache"/llama_cpp_python-"$version"-*.whl 2>/dev/null | head -1 || true; }
wheel=$(find_wheel)
if [ -z "$wheel" ]; then
  mkdir -p "$cache"
  echo "scripts/llama_cpp_wheel.sh: building llama-cpp-python $version (about 25 minutes on 2 cores), kept in $cache"
  start=$(date +%s)
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    .venv/bin/pip wheel --quiet --disable-pip-version-check --no-deps "llama-cpp-python==$version" -w "$cache"
  echo "scripts/llama_cpp_wheel.sh: built in $(( ($(date +%s) - start) / 60 )) minutes"
  wheel=$(find_wheel)
fi
pip=(.venv/bin/pip install --quiet --disable-pip-version-check --constraint constraints.txt)
"${pip[@]}" --no-deps "$wheel"
# its own dependencies (typing-extensions, numpy, jinja2 are lengen's already)
"${pip[@]}" diskcache typing-extensions numpy jinja2
echo "scripts/llama_cpp_wheel.sh: llama-cpp-python $version installed from $wheel"
