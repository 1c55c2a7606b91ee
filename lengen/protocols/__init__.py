"""Long-context evaluation protocols, independent of any model class.

A model enters as callables (see lengen.protocols.scoring):
  nll_fn(ids [B, T], last) -> [B, last]       NLL of the final `last` tokens; nll_from_logits(
                                              logits_fn) builds one from logits_fn(ids) -> [B, T, V]
  generate_fn(prompt_ids, max_new_tokens) -> new ids   (passkey, ruler; greedy_generate_fn(logits_fn) is a
                                              cache-free fallback)
Data are token sequences. Used by `lengen lm eval` and `lengen hf eval`, which both refuse an
option the chosen protocol does not use by check_protocol_options (lengen.protocols.options)."""

from lengen.protocols.baselines import token_counts, unigram_logits_fn, unigram_nll_fn
from lengen.protocols.options import check_protocol_options
from lengen.protocols.passkey import (PasskeyPoint, PasskeyTrial, greedy_generate_fn, make_trials,
                                      parse_answer, passkey_accuracy, passkey_prompt)
from lengen.protocols.ppl import PplPoint, last_segment_perplexity, perplexity_vs_length
from lengen.protocols.ruler import TASKS as RULER_TASKS
from lengen.protocols.ruler import RulerPoint, RulerTrial, make_ruler_trials, ruler_accuracy, write_ruler_results
from lengen.protocols.report import pivot_table, plot_metric, write_csv, write_results
from lengen.protocols.scoring import LogitsFn, NllFn, nll_from_logits, nll_of_targets, score_windows

__all__ = [
    "LogitsFn", "NllFn", "nll_from_logits", "score_windows", "nll_of_targets",
    "PplPoint", "perplexity_vs_length", "last_segment_perplexity",
    "PasskeyTrial", "PasskeyPoint", "passkey_prompt", "make_trials", "parse_answer", "passkey_accuracy",
    "greedy_generate_fn", "unigram_logits_fn", "unigram_nll_fn", "token_counts",
    "RULER_TASKS", "RulerTrial", "RulerPoint", "make_ruler_trials", "ruler_accuracy", "write_ruler_results",
    "write_results", "write_csv", "pivot_table", "plot_metric", "check_protocol_options",
]
