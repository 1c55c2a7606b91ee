"""lm-evaluation-harness (lm-eval) for any lengen method: the lm-eval model type "lengen", an
lm-eval HFLM over a local model that lengen's loader loads (folder or GGUF file) and
lengen.hf.extend patches, so lm-eval's tasks see the extended model through the model's own
forward. Every method works, those no inference engine serves too (rerope, self_extend, dca,
string, ...): lm-eval calls the patched transformers model as it is.

    import lengen.hf.harness   # registers the model type "lengen" with lm-eval
    lm_eval.simple_evaluate(model="lengen", model_args={"pretrained": DIR, "method": "self_extend:group=4,window=1024", "max_length": 16384}, ...)

lm-eval 0.4.13 finds models only in its registry (no entry-point plugins), so its own `lm_eval`
command sees "lengen" only after this module is imported: `python -m lengen.hf.harness_cli ARGS`
is lm-eval's command line with it registered, and `lengen hf lm-eval` is lengen's own command.
Needs lm-eval and accelerate (the `lmeval` extra)."""

from __future__ import annotations

import json
from pathlib import Path

import lm_eval
import pandas as pd
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager
from lm_eval.utils import handle_non_serializable

from lengen.devices import resolve_device
from lengen.errors import LengenError, unknown_name
from lengen.extrapolation import is_plain
from lengen.hf.loading import load
from lengen.hf.patch import extend
from lengen.hf.settings import EvalSettings
from lengen.io import write_text

MODEL_TYPE = "lengen"
#: lengen's own offline tasks (lengen_passkey, lengen_longdoc), always on lm-eval's task path
TASKS_DIR = Path(__file__).parent / "lmeval_tasks"


def _int(value) -> int | None:
    """lm-eval passes --model_args values as strings or numbers."""
    return None if value in (None, "", "None") else int(value)


@register_model(MODEL_TYPE)
class LengenLM(HFLM):
    """HFLM over a lengen-extended model. `pretrained`: a local folder (loaded by lengen's loader:
    local files only, `gguf_file` inside it) or a transformers model already loaded (then
    `tokenizer` too). `method`: a lengen spec ("rope" = the model as trained); `train_length`
    defaults from the config. `max_length`: the context lm-eval gives the model (it cuts longer
    inputs from the left and scores long documents in windows of it); required for a method
    other than rope, since lm-eval would otherwise take max_position_embeddings, the trained
    length. Other keywords go to HFLM (batch_size, add_bos_token, ...)."""

    def __init__(self, pretrained, method: str = "rope", train_length=None, gguf_file: str | None = None,
                 tokenizer=None, max_length=None, dtype: str = "float32", attn: str = "sdpa",
                 device: str = "auto", **kwargs):
        max_length, train_length = _int(max_length), _int(train_length)
        if not is_plain(method) and max_length is None:
            raise LengenError(f"lengen lm-eval model: give max_length with method {method!r} (the context "
                              "lm-eval may give the extended model; without it lm-eval uses the trained length)")
        if isinstance(pretrained, str):
            model, tokenizer = load_model(pretrained, gguf_file, dtype=dtype, attn=attn, device=device,
                                          tokenizer=tokenizer)
        else:
            if tokenizer is None:
                raise LengenError("lengen lm-eval model: a loaded model needs its tokenizer (tokenizer=...)")
            model = pretrained
        if not is_plain(method):
            # a calibrated method (dpe, dope) reads with this tokenizer: a GGUF folder may have none
            extend(model, method, calibration=tokenizer, **({"train_length": train_length} if train_length else {}))
        self.lengen_method = method
        # HFLM warns that arguments are ignored for a loaded model: those are the loader's here
        super().__init__(pretrained=model, tokenizer=tokenizer, max_length=max_length, **kwargs)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None):
        """lm-eval's command line: --model_args win over its --device and --batch_size (HFLM's
        own would take both and fail on the repeated keyword)."""
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in arg_dict}
        return cls(**arg_dict, **extra)


def load_model(model_path: str, gguf_file: str | None = None, dtype: str = "float32", attn: str = "sdpa",
               device: str = "auto", tokenizer=None):
    """(model on its device, tokenizer) by lengen's loader: a local folder or GGUF file, offline."""
    settings = EvalSettings(model_path=model_path, gguf_file=gguf_file, methods=["rope"], lengths=[2],
                            dtype=dtype, attn=attn)
    model, tokenizer = load(settings, tokenizer if not isinstance(tokenizer, str) else None)
    return model.to(resolve_device(device)), tokenizer


def task_manager(tasks: list[str], include_path: str | None = None, metadata: dict | None = None) -> TaskManager:
    """lm-eval's task index with lengen's tasks and `include_path`; LengenError naming a task it
    does not know. lm-eval's own ~15,000 tasks are indexed (seconds) only when a name is not
    among these."""
    paths = [str(TASKS_DIR)]
    if include_path:
        if not Path(include_path).is_dir():
            raise LengenError(f"--include-path {include_path!r} is not a folder")
        paths.append(str(include_path))
    for defaults in (False, True):
        manager = TaskManager(include_path=paths, include_defaults=defaults, metadata=metadata)
        unknown = [t for t in tasks if not manager.match_tasks([t])]
        if not unknown:
            return manager
    raise LengenError(unknown_name("lm-eval task", unknown[0], manager.all_tasks, listed=False)
                      + ("" if include_path else "; your own YAML tasks: --include-path DIR"))


def evaluate(lm, tasks: list[str], manager: TaskManager, limit=None, num_fewshot=None, seed: int = 0,
             log_samples: bool = False) -> dict:
    """lm_eval.simple_evaluate on an LM (LengenLM), with one seed for lm-eval's random streams."""
    return lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=manager, limit=limit,
                                   num_fewshot=num_fewshot, log_samples=log_samples, random_seed=seed,
                                   numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed)


def result_rows(results: dict, method: str, max_length: int | None) -> list[dict]:
    """One row per task and metric of lm-eval's results ("acc,none" -> metric acc, filter none;
    RULER's metrics are lengths: "8192,none" -> metric 8192)."""
    rows = []
    for task, values in results["results"].items():
        for key, value in values.items():
            metric, _, filt = key.partition(",")
            if not filt or metric.endswith("_stderr") or not isinstance(value, (int, float)):
                continue
            if metric.isdigit() and value == -1:   # RULER's mark for a length it did not run
                continue
            stderr = values.get(f"{metric}_stderr,{filt}")
            rows.append({"task": task, "metric": metric, "filter": filt, "value": value,
                         "stderr": stderr if isinstance(stderr, (int, float)) else None,
                         "n": results.get("n-samples", {}).get(task, {}).get("effective"),
                         "method": method, "max_length": max_length})
    return rows


def save(results: dict, out: Path, record: dict, method: str, max_length: int | None) -> list[Path]:
    """OUT/results.json (lm-eval's results less the samples, plus `record` as "lengen"),
    OUT/results.csv and, when logged, OUT/samples_TASK.jsonl; each written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    dump = lambda obj, **kw: json.dumps(obj, default=handle_non_serializable, **kw)   # noqa: E731
    paths = []
    for task, samples in (results.get("samples") or {}).items():
        paths.append(out / f"samples_{task}.jsonl")
        write_text(paths[-1], "".join(dump(s) + "\n" for s in samples))
    kept = {k: v for k, v in results.items() if k != "samples"}
    write_text(out / "results.json", dump({**kept, "lengen": record}, indent=2) + "\n")
    rows = result_rows(results, method, max_length)
    columns = ["task", "metric", "filter", "value", "stderr", "n", "method", "max_length"]
    write_text(out / "results.csv", pd.DataFrame(rows, columns=columns).to_csv(index=False))
    return [out / "results.json", out / "results.csv", *paths]
