"""The three "add a ..." how-to pages (docs/how-to/add-an-encoding.md, add-a-method.md and
add-a-task.md) are run, not only parsed: their example modules (the ```python blocks whose first
line is `# file: NAME.py, in lengen/PACKAGE/`) are loaded as the modules they say they are, their
registry lines (the `+` lines of their ```diff blocks) are run, their reference tests
(`# file: test_NAME.py, in tests/`) pass, and the new encoding, method and task run through the
paths the pages say they do: CHE alone and grouped, the decoder LM with its KV cache, the masked
LM and arithmetic for the encoding; the decoder LM (and lengen.hf) for the method; CHE alone and
grouped for the task. Registries are module-level: the pages' entries go into copies of them,
and the real ones are back after each test.

Beside it: docs/reference/catalogue.md has one row for every name of the encoding, position
sampler, logit scale and extrapolation method registries, and no other, so a new registry entry
without a catalogue row fails here."""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import math
import re
import sys
from pathlib import Path

import pytest
import torch

import test_encoding_contract as contract  # the contract's configs and checks (its tests are not re-collected)
from lengen import kernels
from lengen.encodings import ENCODINGS
from lengen.extrapolation import METHODS
from lengen.models.logit_scaling import LOGIT_SCALES
from lengen.positions import SAMPLERS
from lengen.tasks import TASKS
from test_docs_commands import code_blocks

ROOT = Path(__file__).resolve().parent.parent
HOWTO_DIR = ROOT / "docs" / "how-to"
#: the page that adds each kind
HOWTOS = {"encoding": HOWTO_DIR / "add-an-encoding.md", "method": HOWTO_DIR / "add-a-method.md",
          "task": HOWTO_DIR / "add-a-task.md"}
CATALOGUE = ROOT / "docs" / "reference" / "catalogue.md"
#: the first line of an example file: its name and the folder it is saved in
MARKER = re.compile(r"# file: (\w+)\.py, in (lengen/\w+|tests)/")
#: what each page adds, by kind
NEW = {"encoding": "scaled_alibi", "method": "partial_pi", "task": "first_token"}
#: each kind's registry and the package its module goes in
REGISTRY = {"encoding": ("ENCODINGS", "lengen/encodings"), "method": ("METHODS", "lengen/extrapolation"),
            "task": ("TASKS", "lengen/tasks")}


def howto_text() -> str:
    """The three pages' text, one after the other (each page's blocks are self-contained)."""
    return "\n".join(page.read_text() for page in HOWTOS.values())


def example_files(text: str) -> dict[tuple[str, str], str]:
    """{(folder, module name): source} of a page's marked ```python blocks, in page order."""
    files = {}
    for block in code_blocks(text, "python"):
        first = block.split("\n", 1)[0].strip()
        if m := MARKER.fullmatch(first):
            assert (m[2], m[1]) not in files, f"{m[2]}/{m[1]}.py shown twice"
            files[(m[2], m[1])] = block
    return files


def registry_lines(text: str) -> list[str]:
    """The added lines (`+...`) of a page's ```diff blocks: imports and `REGISTRY.add` lines."""
    return [line[1:] for block in code_blocks(text, "diff") for line in block.splitlines()
            if line.startswith("+")]


def load(name: str, path: Path, mp: pytest.MonkeyPatch):
    """The file at `path` imported as module `name` (in sys.modules until `mp` is undone)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    mp.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def howto_loaded(root: Path, text: str | None = None):
    """The pages' examples written under `root`, their modules loaded as lengen.encodings.scaled_alibi,
    ... and registered by their own registry lines into copies of the registries; yields the pages'
    test modules. On exit the registries and sys.modules are as before. `text`: the three pages'
    text (howto_text()) unless given."""
    text = howto_text() if text is None else text
    with pytest.MonkeyPatch.context() as mp:
        for registry in (ENCODINGS, METHODS, TASKS):
            mp.setattr(registry, "_items", dict(registry._items))
        tests = []
        for (folder, name), source in example_files(text).items():
            path = root / folder / f"{name}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source)
            if folder != "tests":
                load(f"{folder.replace('/', '.')}.{name}", path, mp)
        exec("\n".join(registry_lines(text)), {"ENCODINGS": ENCODINGS, "METHODS": METHODS,  # noqa: S102
                                                "TASKS": TASKS})
        for (folder, name) in example_files(text):
            if folder == "tests":
                tests.append(load(f"howto_{name}", root / folder / f"{name}.py", mp))
        yield tests


@pytest.fixture
def howto(tmp_path):
    with howto_loaded(tmp_path / "howto") as tests:
        yield tests


def run_tests(modules, tmp_path) -> list[str]:
    """Call every test function of the pages' test modules (tmp_path passed to those that ask)."""
    ran = []
    for module in modules:
        for name, fn in vars(module).items():
            if name.startswith("test_") and inspect.isfunction(fn):
                params = inspect.signature(fn).parameters
                fn(**({"tmp_path": tmp_path / name} if "tmp_path" in params else {}))
                ran.append(name)
    return ran


# -- the pages ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(HOWTOS))
def test_each_page_shows_its_module_its_test_and_its_registry_line(kind):
    text, name = HOWTOS[kind].read_text(), NEW[kind]
    registry, package = REGISTRY[kind]
    assert set(example_files(text)) == {(package, name), ("tests", f"test_{name}")}
    adds = [line for line in registry_lines(text) if ".add(" in line]
    assert [re.search(r"(\w+)\.add\(\"(\w+)\"", line).groups() for line in adds] == [(registry, name)]
    assert name not in {"encoding": ENCODINGS, "method": METHODS, "task": TASKS}[kind], \
        "the pages' examples are not part of lengen: their names must be free"


@pytest.mark.parametrize("kind", list(HOWTOS))
def test_each_page_links_to_the_two_others(kind):
    links = set(re.findall(r"\]\(([\w-]+\.md)\)", HOWTOS[kind].read_text()))
    assert {p.name for k, p in HOWTOS.items() if k != kind} <= links, links


def test_the_examples_register_and_pass_their_reference_tests(howto, tmp_path):
    assert NEW["encoding"] in ENCODINGS and NEW["method"] in METHODS and NEW["task"] in TASKS
    ran = run_tests(howto, tmp_path)
    assert [m.__name__ for m in howto] == [f"howto_test_{name}" for name in NEW.values()], howto
    assert len(ran) >= 3, ran  # a test function (at least) in each test file


def test_the_registries_are_as_before_after_the_page_is_unloaded(tmp_path):
    before = [reg.names() for reg in (ENCODINGS, METHODS, TASKS)]
    with howto_loaded(tmp_path):
        assert "lengen.encodings.scaled_alibi" in sys.modules
    assert [reg.names() for reg in (ENCODINGS, METHODS, TASKS)] == before
    assert "lengen.encodings.scaled_alibi" not in sys.modules


# -- the paths each kind runs in ------------------------------------------------------------------------
def test_the_encoding_trains_alone_and_grouped_like_solo(howto, tmp_path):
    pe = NEW["encoding"]
    contract.test_trains_a_che_model(tmp_path / "alone", pe)
    contract.assert_group_equals_solo(contract.group_cfgs(pe, 0.1, model={"pe_options": {"scale": 0.5}}),
                                      tmp_path / "group")


def test_the_encoding_decodes_with_a_cache_and_trains_an_mlm_and_an_arithmetic_model(howto, tmp_path,
                                                                                      monkeypatch):
    pe = NEW["encoding"]
    contract.test_decoding_with_a_kv_cache_equals_the_full_forward(pe)
    kernels.available()  # the attention kernel from the suite's shared build, before the cache moves
    monkeypatch.setenv("LENGEN_CACHE", str(tmp_path / "cache"))  # the corpus tokens, cached privately
    contract.test_trains_a_masked_lm(tmp_path / "mlm", pe, None)
    contract.test_trains_an_arithmetic_model_with_standard_and_coupled_ids(tmp_path / "arith", pe)
    # trained, not refused: it declares nothing that refuses these paths (coupled ids included)
    for run in ("mlm/run", "arith/standard", "arith/coupled"):
        assert (tmp_path / run / "eval.json").exists(), run


def test_the_method_runs_in_a_decoder_lm_with_its_cache(howto):
    from lengen.lm.methods import resolve_methods

    model = contract.decoder("rope")  # trained on T = 10 tokens
    (resolved,) = resolve_methods([f"{NEW['method']}:factor=2"], model)
    x = torch.randint(0, 11, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full, plain = model(x, method=resolved.method), model(x)
        cache = model.new_cache()
        steps = [model(x[:, t:t + 1], cache=cache, method=resolved.method) for t in range(16)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=2e-5, rtol=1e-4)
    assert not torch.allclose(full, plain, atol=1e-4)  # the slow frequencies are divided


def test_the_method_extends_a_hugging_face_model(howto):
    transformers = pytest.importorskip("transformers")
    from lengen.hf import extend, restore

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, vocab_size=50,
                                      max_position_embeddings=16)
    model = transformers.LlamaForCausalLM(config).eval()
    x = torch.randint(0, 50, (1, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        plain = model(x).logits
        extended = extend(model, NEW["method"], factor=4)(x).logits
        restore(model)
        again = model(x).logits
    assert math.isfinite(float(extended.abs().max())) and not torch.allclose(extended, plain, atol=1e-4)
    torch.testing.assert_close(again, plain)


def test_the_task_trains_alone_and_grouped_like_solo(howto, tmp_path):
    task = NEW["task"]
    cfg = contract.che_cfg("rope", task=task)
    contract.assert_trained_run(tmp_path / "alone", cfg, contract.train(cfg, tmp_path / "alone", progress=False))
    contract.assert_group_equals_solo(contract.group_cfgs("rope", 0.0, task=task), tmp_path / "group")


# -- the catalogue ----------------------------------------------------------------------------------------
#: catalogue section heading -> the registry's names
REGISTRIES = {
    "Positional encodings": lambda: ENCODINGS.names(),
    "Position samplers": lambda: SAMPLERS.names(),
    "Logit scales": lambda: list(LOGIT_SCALES),
    "Training-free extrapolation methods": lambda: METHODS.names(),
}


def catalogue_rows(text: str) -> dict[str, list[str]]:
    """{section heading: the names in the first column of its table}, `## ` sections."""
    rows: dict[str, list[str]] = {}
    section = None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif section and (m := re.match(r"^\|\s*`([\w.-]+)`", line)):
            rows.setdefault(section, []).append(m[1])
    return rows


def test_the_catalogue_lists_every_registered_name_once():
    rows = catalogue_rows(CATALOGUE.read_text())
    assert set(REGISTRIES) <= set(rows), sorted(rows)
    for section, names in REGISTRIES.items():
        listed = rows[section]
        assert len(listed) == len(set(listed)), f"{section}: a name listed twice: {listed}"
        assert set(listed) == set(names()), (
            f"{section}: catalogue rows and registry differ: missing {sorted(set(names()) - set(listed))}, "
            f"not registered {sorted(set(listed) - set(names()))}")


def test_a_registry_entry_without_a_catalogue_row_fails(tmp_path):
    with howto_loaded(tmp_path):  # the pages' scaled_alibi and partial_pi have no row
        with pytest.raises(AssertionError, match="missing.*scaled_alibi"):
            test_the_catalogue_lists_every_registered_name_once()
