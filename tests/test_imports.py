"""Imports at the top (docs/design.md, "Imports"): a function-level import is only for an optional
or slow dependency (Ray, transformers with lengen.hf, matplotlib, Triton with
lengen.kernels.triton_remap and triton_rotary), and the command line starts without any of them."""

import ast
import subprocess
import sys
from pathlib import Path

import lengen

ROOT = Path(lengen.__file__).parent

#: what a function may import on use (the module or any submodule)
LAZY_OK = ("ray", "transformers", "matplotlib", "lengen.hf", "triton", "lengen.kernels.triton_remap",
           "lengen.kernels.triton_rotary")


def _lazy_ok(module: str) -> bool:
    return any(module == ok or module.startswith(ok + ".") for ok in LAZY_OK)


def _from(node: ast.ImportFrom, package: str) -> str:
    """The module `from MODULE import ...` names, a relative one resolved against `package`."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The modules `node` may load, relative imports resolved against `package`."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = _from(node, package)
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
                       "transformers / lengen.hf, matplotlib and triton / lengen.kernels.triton_remap, triton_rotary may be imported on use):\n" + "\n".join(found))


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


def test_lengen_hf_imports_its_own_modules_at_the_top():
    """Inside lengen.hf only the optional libraries are imported on use; lengen's own modules,
    lengen.hf's included, at the top (an import inside banded.use once hid the circle
    hf.attention -> hf.banded -> hf.patch -> hf.attention)."""
    found = [f"lengen/hf/{path.relative_to(ROOT / 'hf').as_posix()}:{line}: {module}"
             for path in sorted((ROOT / "hf").rglob("*.py"))
             for line, module in function_level_imports(path) if module.split(".")[0] == "lengen"]
    assert not found, "lengen modules imported inside functions of lengen.hf:\n" + "\n".join(found)


def package_modules(root: Path = ROOT) -> dict[str, Path]:
    """{dotted name: file} of every module of the package in the folder `root` (a package by its
    __init__.py, named by the package)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _runs(node: ast.AST) -> list[ast.AST]:
    """The statements under `node` that may run: all but the body of an `if TYPE_CHECKING:`."""
    if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
        return node.orelse
    return list(ast.iter_child_nodes(node))


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """{module: the package's modules it imports}, at the top or inside a function (an import in a
    function only hides a circle: it runs once the function does), not under `if TYPE_CHECKING:`.
    `from package import name` is an edge to package.name where that is a module, else to the
    package (its __init__)."""
    modules = package_modules(root)
    graph = {}
    for name, path in modules.items():
        package = ".".join(path.relative_to(root.parent).parts[:-1])
        edges, todo = set(), [ast.parse(path.read_text(), str(path))]
        while todo:
            node = todo.pop()
            todo += _runs(node)
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _from(node, package)
                edges.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
        graph[name] = {m for m in edges if m in modules and m != name}
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), list(graph[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph[m]
    return seen


def import_circles(graph: dict[str, set[str]]) -> list[str]:
    """Each circle of imports: its members (modules that import each other, directly or through
    one another), then one way round it, "a -> b -> c -> a"."""
    reach = {m: _reachable(graph, m) for m in graph}
    circles, seen = [], set()
    for start in sorted(graph):
        if start in seen or start not in reach[start]:
            continue
        members = sorted(m for m in reach[start] if start in reach[m])
        seen.update(members)
        paths, way = {start: [start]}, None   # breadth first, within the members, back to start
        while way is None:
            for m, path in list(paths.items()):
                for n in sorted(graph[m] & set(members)):
                    if n == start:
                        way = way or path + [start]
                    paths.setdefault(n, path + [n])
        circles.append(f"{', '.join(members)}: {' -> '.join(way)}")
    return circles


def test_no_import_circle_among_lengen_modules():
    found = import_circles(import_graph())
    assert not found, ("modules that import each other (move what they share into a module below "
                       "both):\n" + "\n".join(found))


def test_the_check_sees_an_import_circle(tmp_path):
    """A circle closed only by an import inside a function (as hf.attention -> hf.banded ->
    hf.patch -> hf.attention was) is one; an import for type hints alone is not."""
    pkg = tmp_path / "lengen" / "demo_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from lengen.demo_pkg import a\n")
    (pkg / "a.py").write_text("from lengen.demo_pkg import b\nimport lengen.demo_pkg.d\n")
    (pkg / "b.py").write_text("from . import c\n")
    (pkg / "c.py").write_text("import torch\n\n\ndef f():\n    from lengen.demo_pkg.a import g\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                              "    from lengen.demo_pkg import a\nelse:\n    from lengen.demo_pkg import e\n")
    (pkg / "e.py").write_text("E = 1\n")
    graph = import_graph(tmp_path / "lengen")
    assert graph["lengen.demo_pkg"] == {"lengen.demo_pkg.a"} and graph["lengen.demo_pkg.d"] == {"lengen.demo_pkg.e"}
    assert import_circles(graph) == [
        "lengen.demo_pkg.a, lengen.demo_pkg.b, lengen.demo_pkg.c: "
        "lengen.demo_pkg.a -> lengen.demo_pkg.b -> lengen.demo_pkg.c -> lengen.demo_pkg.a"]


#: lengen's floors, bottom up (docs/design.md, "The packages"): a package imports only packages
#: on lower floors; the foundation's small modules may import each other (no circle, above)
FLOORS = [
    ("foundation", {"lengen", "_openmp", "_threads", "errors", "registry", "formatting", "io", "options",
                    "progress", "devices", "environment", "presets"}),
    ("data and position sources", {"kernels", "data", "tasks", "positions", "protocols"}),
    ("encodings", {"encodings"}),
    ("model and methods", {"models", "extrapolation"}),
    ("training", {"training"}),
    ("model kinds", {"che", "lm", "mlm", "arith", "hf"}),
    ("studies", {"inspect", "sweeps"}),
    ("reports", {"reports"}),
    ("command line", {"cli"}),
    ("python -m lengen", {"__main__"}),
]


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a package on the same or a higher floor (foundation modules excepted),
    and every package that has no floor."""
    floor = {p: i for i, (_, packages) in enumerate(FLOORS) for p in packages}
    out = sorted({package_of(m) for m in graph} - set(floor))
    out = [f"{p}: not on any floor (add it to FLOORS)" for p in out]
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            pa, pb = package_of(a), package_of(b)
            if pa != pb and pa in floor and pb in floor and floor[pb] >= floor[pa] > 0:
                out.append(f"{a} ({FLOORS[floor[pa]][0]}) imports {b} ({FLOORS[floor[pb]][0]})")
    return out


def test_no_package_imports_one_on_its_own_floor_or_above():
    found = upward_imports(import_graph())
    assert not found, ("imports that go up or sideways (move the shared piece down a floor):\n"
                       + "\n".join(found))


def test_the_floor_check_sees_sideways_and_upward_imports():
    graph = {"lengen.lm.model": {"lengen.che.loop", "lengen.models.attention"},
             "lengen.models.attention": {"lengen.extrapolation.base", "lengen.kernels.heads"},
             "lengen.kernels.heads": set(), "lengen.che.loop": set(), "lengen.extrapolation.base": set(),
             "lengen.newpkg.x": {"lengen.errors"}, "lengen.errors": set()}
    assert upward_imports(graph) == [
        "newpkg: not on any floor (add it to FLOORS)",
        "lengen.lm.model (model kinds) imports lengen.che.loop (model kinds)",
        "lengen.models.attention (model and methods) imports lengen.extrapolation.base (model and methods)"]


#: what `import lengen` and any `--help` must not load (issue 49: the help printed after 3-5 s)
HEAVY = ("torch", "scipy", "pandas", "matplotlib", "transformers", "ray", "lm_eval", "datasets")


def test_the_command_line_starts_without_heavy_libraries():
    """`import lengen`, `lengen --help` and the help of every command and subcommand (found in the
    parser) load neither torch nor scipy, pandas, matplotlib, transformers, Ray nor lm-eval: the parsers take
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
