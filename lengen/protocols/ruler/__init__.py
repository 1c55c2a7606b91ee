"""A RULER-style suite of synthetic long-context tasks (Hsieh et al. 2024), generated offline.

Every prompt is built from local text (the passkey filler sentences, RULER's "noise" haystack, and
word lists in lengen.protocols.ruler.text) by a numpy Generator seeded with (seed, task, length),
so every method sees the same prompts. A prompt of target length L is the largest filler whose
prompt encodes to <= L tokens. The model continues greedily through
generate_fn(prompt_ids, max_new_tokens), max_new_tokens sized to the task's answers.

Tasks (needle: "One of the special magic {numbers|words|uuids} for {key} is: {value}." at a
random depth in the filler; keys are adjective-noun words such as "misty-harbor"):
  niah_single        one needle, a 7-digit number; asked for its key
  niah_single_word   one needle, a word value
  niah_single_uuid   one needle, a uuid value (from the seeded generator, not uuid4)
  niah_multikey      four needles with four keys, one asked for: the others are distractors
  niah_multivalue    four needles with the same key and four numbers: all four expected
  niah_multiquery    four needles with four keys, all four asked for: the four values expected
  vt                 variable tracking: "VAR ABCDE = 12345." then four "VAR X = Y." assignments
                     spread in the filler; every variable holding the value is expected (five)
  cwe                common-word extraction: a numbered list of words, ten common ones repeated
                     30 times and the rest 3 times (10/2 or 2/1 when L is too short for that,
                     filled with as many uncommon words as fit); the ten common words expected
Scoring: RULER's string-match-all at word boundaries: a trial scores the fraction of its
expected answers found as whole words (case-insensitive) in the continuation; accuracy is the
mean over trials, `correct` counts the trials with every answer found."""

from lengen.protocols.ruler.score import (RulerPoint, check_tasks, ruler_accuracy, ruler_table, score,
                                          task_means, write_ruler_results)
from lengen.protocols.ruler.tasks import TASKS, RulerTrial, make_ruler_trials

__all__ = ["TASKS", "RulerTrial", "RulerPoint", "make_ruler_trials", "ruler_accuracy", "score",
           "check_tasks", "task_means", "ruler_table", "write_ruler_results"]
