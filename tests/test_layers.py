"""No layer imports a higher one: the data and protocol layers load without the models, the
kernels or the command line."""

import json
import subprocess
import sys

import pytest


@pytest.mark.parametrize("module,forbidden", [
    ("lengen.data", ("lengen.lm", "lengen.models", "lengen.kernels", "lengen.cli", "lengen.training")),
    ("lengen.protocols", ("lengen.cli", "lengen.lm", "lengen.training", "lengen.sweeps")),
    ("lengen.training", ("lengen.cli", "lengen.sweeps", "lengen.reports", "lengen.lm")),
    ("lengen.sweeps", ("lengen.cli", "lengen.reports")),
])
def test_lower_layers_do_not_import_higher_ones(module, forbidden):
    code = (f"import sys, {module}; "
            f"print(sorted(m for m in sys.modules if m.startswith({forbidden!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"{module} pulls in {out.strip()}"


def test_the_parsers_load_no_library_layer():
    """The command line's parsers (lengen.cli.parsers, built for every `lengen` call and --help)
    stand above nothing: the handlers they name as strings ("lengen.cli.train:run") import the
    library, after parsing."""
    code = ("import json, sys; from lengen.cli import build_parser; build_parser(); "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('lengen.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # what `import lengen` runs first (lengen._openmp, ...), the errors, and the command line's own modules
    allowed = ("lengen._", "lengen.errors", "lengen.cli.parsers.")
    loaded = json.loads(out)
    assert "lengen.cli.parsers.train" in loaded
    assert [m for m in loaded if m not in ("lengen.cli", "lengen.cli.parsers") and not m.startswith(allowed)] == [], out
