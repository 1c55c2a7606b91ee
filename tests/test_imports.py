"""Imports at the top (docs/design.md, "Imports"): a function-level import is only for an optional
or slow dependency (Ray, transformers with lengen.hf, matplotlib), and the command line starts
without any of them."""

import ast
import subprocess
import sys
from pathlib import Path

import lengen

ROOT = Path(lengen.__file__).parent

#: what a function may import on use (the module or any submodule)
LAZY_OK = ("ray", "transformers", "matplotlib", "lengen.hf")


def _lazy_ok(module: str) -> bool:
    return any(module == ok or module.startswith(ok + ".") for ok in LAZY_OK)


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The modules `node` may load, relative imports resolved against `package`."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    # `from lengen import hf` loads lengen.hf: a name may be a submodule
    submodules = [f"{base}.{a.name}" for a in node.names]
    return submodules if all(map(_lazy_ok, submodules)) else [base]


def function_level_imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module) of every import inside a function body of the file at `path` (in the
    package folder `root`)."""
    package = ".".join(path.relative_to(root.parent).parts[:-1])
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend((child.lineno, m) for m in _imported(child, package))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def violations(paths, root: Path = ROOT) -> list[str]:
    out = []
    for path in paths:
        name = path.relative_to(root.parent).as_posix()
        out += [f"{name}:{line}: {module}" for line, module in function_level_imports(path, root)
                if not _lazy_ok(module)]
    return out


def test_function_level_imports_are_only_for_optional_dependencies():
    found = violations(sorted(ROOT.rglob("*.py")))
    assert not found, ("imports inside functions (move them to the top of the module; only Ray, "
                       "transformers / lengen.hf and matplotlib may be imported on use):\n" + "\n".join(found))


def test_the_check_sees_a_function_level_import(tmp_path):
    pkg = tmp_path / "lengen" / "demo_pkg"
    pkg.mkdir(parents=True)
    (pkg / "mod.py").write_text(
        "import torch\n\n\n"
        "def f():\n    import numpy as np\n    from lengen.che import loop\n"
        "    from . import sibling\n    from lengen import hf\n    import matplotlib.pyplot as plt\n\n\n"
        "class C:\n    def g(self):\n        import yaml\n\n        def h():\n            from ray import tune\n")
    found = violations([pkg / "mod.py"], root=tmp_path / "lengen")
    assert found == ["lengen/demo_pkg/mod.py:5: numpy", "lengen/demo_pkg/mod.py:6: lengen.che",
                     "lengen/demo_pkg/mod.py:7: lengen.demo_pkg", "lengen/demo_pkg/mod.py:14: yaml"]


#: what `import lengen` and any `--help` must not load (issue 49: the help printed after 3-5 s)
HEAVY = ("torch", "scipy", "pandas", "matplotlib", "transformers", "ray")


def test_the_command_line_starts_without_heavy_libraries():
    """`import lengen`, `lengen --help` and the help of every command and subcommand (found in the
    parser) load neither torch nor scipy, pandas, matplotlib, transformers or Ray: the parsers take
    names and defaults from lengen.cli.parsers.values and name their handlers as strings. In a
    fresh interpreter, where other tests' imports cannot hide one; each help after the last, so a
    help that loads one is named."""
    code = """
import contextlib, io, sys
import lengen
loaded = {"import lengen": set(sys.modules)}
from lengen.cli import build_parser, command_paths, main
for path in [(), *command_paths(build_parser())]:
    argv = [*path, "--help"]
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
    loaded["lengen " + " ".join(argv)] = set(sys.modules)
for what, modules in loaded.items():
    print(f"{what}: {sorted({m.split('.')[0] for m in modules} & set(%r))}")
""" % (HEAVY,)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert len(lines) > 25 and "lengen hf tune --help: []" in lines, out  # every subcommand was walked
    assert [line for line in lines if not line.endswith(": []")] == [], out


def test_every_command_names_a_handler_in_the_command_line_layer():
    """A parser names its handler as "lengen.cli.MODULE:FUNCTION" (lengen.cli.handler imports it
    after parsing): each one exists, and lives in lengen.cli beside the parsers, not in a library
    layer, so the handler module's own imports show what the command depends on."""
    from lengen.cli import build_parser, handler, handlers

    named = handlers(build_parser())
    assert len(named) >= 20 and named[("hf", "tune")] == "lengen.cli.hf_tune:run_tune", named
    for name, func in named.items():
        module = func.partition(":")[0]
        assert module.startswith("lengen.cli.") and not module.startswith("lengen.cli.parsers"), (name, func)
        assert callable(handler(func)), (name, func)


def test_modules_are_imported_by_name_only_where_the_command_line_dispatches():
    """importlib.import_module hides an import from the checks above: only lengen/cli/__init__.py,
    which builds the parsers and imports a command's handler after parsing, may use it."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                    "import_module", "__import__"):
                found.append(f"{path.relative_to(ROOT.parent).as_posix()}:{node.lineno}")
    assert found and all(f.startswith("lengen/cli/__init__.py:") for f in found), found
