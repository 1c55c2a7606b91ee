"""lengen/cli/parsers/values.py (what the help shows: registries' names, configs' defaults) is a
copy the parsers read so that `--help` loads no torch; here it is checked against the registries
and configs themselves."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import help_values  # noqa: E402


def test_the_help_values_are_those_of_the_registries_and_configs():
    assert help_values.TARGET.read_text() == help_values.render(), (
        "lengen/cli/parsers/values.py is behind the registries or configs it copies: "
        "run `python scripts/help_values.py` and commit the file")


def test_the_parsers_read_them_as_the_configs_do():
    from lengen.cli.parsers import values
    from lengen.lm.config import LMConfig

    assert values.LM.model.num_layers == LMConfig().model.num_layers
    assert values.USED_BY["tasks"] == "ruler"
