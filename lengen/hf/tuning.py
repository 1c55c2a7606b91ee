"""`lengen hf tune` / lengen.hf.tune(...): choose a training-free RoPE extension and its options for
a local Hugging Face model at one target length, on text, within a time budget.

The objective is last-segment perplexity (lengen.protocols.last_segment_perplexity, ReRoPE's
protocol): each sequence is a context of L tokens plus one target, and only its final `segment`
targets are scored. The search (lengen.hf.search) runs on a *tune slice* of sequences; the chosen
setting is reported on a disjoint *evaluation slice*, beside plain RoPE and the method's documented
default on the same slice, so the reported number is not the one that was minimised.

The parts: the settings (lengen.hf.settings.TuneSettings), the slices (lengen.hf.tune_slices), the
cache and the records beside it (lengen.hf.tune_cache), the ranking and the printed report
(lengen.hf.tune_report); here the model as the search's objective and the whole command."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from lengen import io
from lengen.devices import precision_context, resolve_device
from lengen.environment import run_environment
from lengen.errors import LengenError
from lengen.hf.arch import inspect_model
from lengen.hf.calibration import CalibrationText
from lengen.hf.identity import model_fingerprint
from lengen.hf.loading import attention_hints, load, load_tokenizer
from lengen.hf.patch import extend, restore
from lengen.hf.scoring import greedy_fn, nll_fn
from lengen.hf.search import SearchResult, Setting, search, spaces_for
from lengen.hf.settings import TuneSettings
from lengen.hf.tune_cache import cache_key, check_records, load_cache
from lengen.hf.tune_report import no_better_than, ranking_rows
from lengen.hf.tune_slices import Piece, make_slices
from lengen.progress import progress_bar
from lengen.protocols import passkey_accuracy, write_csv
from lengen.protocols.fitting import check_prompts_fit


class ModelObjective:
    """objective(setting, i) -> mean NLL of the final `segment` targets of sequences[i], the model
    extended with the setting's spec ("rope": as trained). The extension is kept between calls
    for the same spec. `get_model()` gives the model, loaded on first use: a run whose scores are
    all cached never loads it."""

    def __init__(self, get_model, sequences: list[Piece], segment: int, train_length: int,
                 precision: str, device: torch.device, calibration=None):
        self.get_model, self.sequences, self.segment = get_model, sequences, segment
        self.calibration = calibration   # what a calibrated method (dpe, dope) reads: lengen.hf.patch.extend
        self.train_length, self.precision, self.device = train_length, precision, device
        self.nll = None
        self.current: str | None = None

    def use(self, spec: str) -> None:
        if spec == self.current:
            return
        self.close()
        if spec != "rope":
            extend(self.get_model(), spec, train_length=self.train_length, calibration=self.calibration)
        self.current = spec

    def __call__(self, setting: Setting | str, i: int) -> float:
        self.use(setting if isinstance(setting, str) else setting.spec)
        self.nll = self.nll or nll_fn(self.get_model())
        ids = torch.as_tensor(self.sequences[i].tokens)[None]
        with precision_context(self.precision, self.device):
            return float(self.nll(ids, self.segment).double().mean())

    def close(self) -> None:
        if self.current not in (None, "rope"):
            restore(self.get_model())
        self.current = None


def tune(settings: TuneSettings | None = None, *, out: str | Path = "runs/hf-tune", progress: bool = True,
         clock=time.monotonic, **kwargs) -> dict:
    """Search, report on the evaluation slice, write OUT/tune.json, tune.csv and tune_cache.json;
    returns the result (as in tune.json). Keyword arguments build the TuneSettings when none is given:
    lengen.hf.tune(model_path="./llama", length=16384, text="books/", budget=30)."""
    settings = settings or TuneSettings(**kwargs)
    settings.check()
    out = Path(out)
    io.check_writable(out)
    model_id = model_fingerprint(settings.model_path, settings.gguf_file)   # a damaged weight file fails here
    device = resolve_device(settings.device)
    L0 = settings.trained_length()
    segment = settings.segment_tokens()
    tokenizer = load_tokenizer(settings.eval_settings())
    tune_slice, eval_slice, slices = make_slices(settings, tokenizer)
    if settings.passkey:   # a length no passkey prompt fits is refused before the model loads
        check_prompts_fit("passkey", tokenizer.encode, [settings.length], (), settings.seed)
    key = cache_key(settings, L0, slices["tune_tokens"], model_id)
    cache = load_cache(out, key, settings.model_path)
    check_records(out, key)
    cache_path = out / "tune_cache.json"
    save = lambda *_: io.write_json(cache_path, cache)   # noqa: E731

    started = time.time()
    loaded = {}

    def get_model():
        if "model" not in loaded:   # on first use: a rerun with every score cached never loads it
            m = load(settings.eval_settings(), tokenizer)[0].to(device)
            inspect_model(m)        # an unsupported model fails now, not at its first setting
            for hint in attention_hints(m, settings.attn, settings.length, device, settings.precision):
                print(hint, file=sys.stderr)
            loaded["model"] = m
        return loaded["model"]

    # calibrated methods (dpe, dope) read the tune text, never the evaluation slice's
    calibration = CalibrationText(tokenizer, settings.text)
    objective = ModelObjective(get_model, tune_slice, segment, L0, settings.precision, device, calibration)
    bar = progress_bar(0, "hf tune", disable=not progress, unit="seq")
    try:
        result = search(spaces_for(settings.methods, L0, settings.length, settings.logn), objective,
                        len(tune_slice), settings.budget * 60, clock=clock, cache=cache["tune"],
                        on_score=save, margin=settings.margin, refine=settings.refine, progress=bar)
    finally:
        objective.close()
        bar.close()
    save()
    chosen = result.best(len(tune_slice))
    passkey = {}
    if chosen is not None and settings.passkey:
        chosen, passkey = _passkey_choice(get_model, calibration, result, len(tune_slice), settings, L0, device,
                                          cache, save)
    if chosen is None:
        raise LengenError(f"the budget ({settings.budget:g} min) ended before any setting was scored on "
                          f"all {len(tune_slice)} tune sequences; rerun with a larger --budget "
                          f"(the {cache_path} keeps what was scored)")
    default = spaces_for([chosen.setting.method], L0, settings.length, False)[0].defaults()[0]
    report = _evaluate(get_model, eval_slice, segment, L0, settings, device, cache, slices["eval_tokens"],
                       {"chosen": chosen.spec, "rope": "rope", "default": default.spec}, save, progress,
                       calibration)
    if settings.passkey:   # other prompts than the ones the choice was made on
        for row in report:
            row["eval_passkey"] = _passkey_cached(get_model, calibration, row["spec"], settings, L0, device,
                                                  cache, settings.seed + 1, save)
    call = f'lengen.hf.extend(model, "{chosen.spec}"' + (
        f", train_length={settings.train_length})" if settings.train_length else ")")
    meta = {**asdict(settings), "train_length": L0, "segment": segment, **slices, "settings": key,
            "device": str(device), "environment": run_environment(device),
            "seconds": round(time.time() - started, 1),
            "out_of_budget": result.out_of_budget, "new_evaluations": result.calls,
            # the search's cost, this run and earlier ones into the same --out (cached seconds)
            "search_seconds": round(sum(sum(t.seconds) for t in result.trials), 1),
            "early_stopping": f"stopped when worse than the best finished setting by > {settings.margin} nats "
                              "of mean NLL on the sequences scored so far"}
    ranking = ranking_rows(result, len(tune_slice))
    if settings.passkey:
        for row in ranking:
            row["tune_passkey"] = passkey.get(row["spec"])
    output = {"meta": meta, "ranking": ranking, "chosen": chosen.spec,
              "tune_ppl": math.exp(chosen.mean), "evaluation": report,
              "no_better_than": no_better_than(report), "call": call}
    io.write_json(out / "tune.json", output)
    write_csv(out / "tune.csv", output["ranking"])
    return output


def _passkey_choice(get_model, calibration: CalibrationText, result: SearchResult, n_items: int,
                    settings: TuneSettings, L0: int, device, cache: dict, save):
    """Optional passkey objective: each method's best finished setting (by tune perplexity) gets
    settings.passkey prompts (seed settings.seed); the choice is the highest accuracy, ties broken by
    tune perplexity. Returns (chosen trial, {spec: accuracy})."""
    finalists = sorted((b for m in settings.methods if (b := result.best(n_items, m)) is not None),
                       key=lambda t: t.mean)
    accuracy = {t.spec: _passkey_cached(get_model, calibration, t.spec, settings, L0, device, cache, settings.seed,
                                        save) for t in finalists}
    return max(finalists, key=lambda t: (accuracy[t.spec], -t.mean)), accuracy


def _passkey_cached(get_model, calibration: CalibrationText, spec: str, settings: TuneSettings, L0: int, device,
                    cache: dict, seed: int, save) -> float:
    """Passkey accuracy of `spec` at settings.length on settings.passkey prompts of `seed` (cached);
    the prompts are built with calibration.tokenizer, the run's."""
    scores = cache.setdefault("passkey", {}).setdefault(f"seed={seed},trials={settings.passkey}", {})
    if spec not in scores:
        model, tokenizer = get_model(), calibration.tokenizer
        pad = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)
        if spec != "rope":
            extend(model, spec, train_length=L0, calibration=calibration)
        try:
            with precision_context(settings.precision, device):
                (point,) = passkey_accuracy(greedy_fn(model, pad), tokenizer.encode, tokenizer.decode,
                                            [settings.length], settings.passkey, seed)
        finally:
            if spec != "rope":
                restore(model)
        scores[spec] = point.accuracy
        save()
    return scores[spec]


def _evaluate(get_model, eval_slice, segment, L0, settings, device, cache, digest, specs: dict, save,
              progress: bool, calibration: CalibrationText) -> list[dict]:
    """Each spec's last-segment perplexity on the evaluation slice (cached per slice digest)."""
    scores = cache["eval"].setdefault(digest, {})
    objective = ModelObjective(get_model, eval_slice, segment, L0, settings.precision, device, calibration)
    todo = sum(len(eval_slice) - len(scores.get(s, [])) for s in dict.fromkeys(specs.values()))
    bar = progress_bar(todo, "hf tune: evaluation slice", disable=not progress or not todo, unit="seq")
    try:
        for spec in dict.fromkeys(specs.values()):
            nll = scores.setdefault(spec, [])
            while len(nll) < len(eval_slice):
                bar.set_description(f"evaluation slice: {spec}")
                nll.append(objective(spec, len(nll)))
                save()
                bar.update(1)
    finally:
        objective.close()
        bar.close()
    return [{"role": role, "spec": spec, "eval_ppl": math.exp(sum(scores[spec]) / len(scores[spec])),
             "sequences": len(scores[spec])} for role, spec in specs.items()]
