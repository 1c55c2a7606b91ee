"""No layer imports a higher one: the data and protocol layers load without the models, the
kernels or the command line."""

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
