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
        "def f():\n    import numpy as np\n    from lengen.training import loop\n"
        "    from . import sibling\n    from lengen import hf\n    import matplotlib.pyplot as plt\n\n\n"
        "class C:\n    def g(self):\n        import yaml\n\n        def h():\n            from ray import tune\n")
    found = violations([pkg / "mod.py"], root=tmp_path / "lengen")
    assert found == ["lengen/demo_pkg/mod.py:5: numpy", "lengen/demo_pkg/mod.py:6: lengen.training",
                     "lengen/demo_pkg/mod.py:7: lengen.demo_pkg", "lengen/demo_pkg/mod.py:14: yaml"]


def test_the_command_line_starts_without_optional_dependencies():
    """`import lengen` and the help of `lengen` and of some commands (every command module is
    imported to build the parser) load no transformers, Ray or matplotlib; in a fresh interpreter,
    where other tests' imports cannot hide one."""
    code = """
import contextlib, io, sys
import lengen
loaded = {"import lengen": sorted(sys.modules)}
from lengen.cli import main
for argv in (["--help"], ["train", "--help"], ["sweep", "run", "--help"], ["hf", "eval", "--help"]):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
    loaded["lengen " + " ".join(argv)] = sorted(sys.modules)
for what, modules in loaded.items():
    heavy = sorted({m.split(".")[0] for m in modules} & {"transformers", "ray", "matplotlib"})
    print(f"{what}: {heavy}")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert len(lines) == 5 and all(line.endswith(": []") for line in lines), out
