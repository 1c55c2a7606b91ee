"""`lengen lm`: byte-level decoder language models and their long-context evaluation."""

from __future__ import annotations

from lengen.cli.parsers import corpus_training, values
from lengen.cli.parsers.common import add_device_arguments, add_logit_scale_arguments, parse_lengths, protocols_only


TRAIN_EPILOG = """examples:
  # the default: a 0.86M-parameter RoPE model on the Python standard library, ~10 CPU minutes
  lengen lm train --pe rope --out runs/lm-rope
  # another encoding, your own text, a shorter run
  lengen lm train --pe alibi --corpus 'notes/**/*.md' --steps 300 --out runs/lm-alibi
  lengen lm train --pe rope --pe-option base=500 --train-length 128 --seed 1 --out runs/lm-rope-b500
  # PoSE: train in 256-token windows with position ids reaching 4096 (docs/training_time_methods.md)
  lengen lm train --pe rope --positions pose --position-option target=4096 --out runs/lm-rope-pose
  # DroPE: a finished RoPE run's weights with RoPE removed, recalibrated 60 steps at its length
  lengen lm train --init-from runs/lm-rope --pe none --steps 60 --warmup 6 --out runs/lm-drope
  # on a GPU, bfloat16 autocast
  lengen lm train --pe rope --device cuda --precision bf16 --out runs/lm-rope-gpu

Interrupt with Ctrl-C and rerun the same command to resume from the last checkpoint, on any
--device and in any --precision (neither is part of the run's identity). The run directory gets
config.json, checkpoint.pt, metrics.jsonl and eval.json (validation perplexity at the training
length next to a unigram baseline). Corpus tokens are cached under $LENGEN_CACHE
(default ~/.cache/lengen).
"""


EVAL_EPILOG = """examples:
  # perplexity against context length (one forward pass per length, every token scored)
  lengen lm eval runs/lm-rope --methods rope,pi:factor=8,ntk:factor=8,yarn:factor=8,rerope:window=128 \\
      --lengths 256,512,1024,2048
  # the last-segment protocol: every length scores the same last 256 tokens of each document
  lengen lm eval runs/lm-rope --protocol last-segment --segment 256 --methods rope,rerope:window=128+logn
  # passkey retrieval accuracy (landmark / YaRN prompt format)
  lengen lm eval runs/lm-rope --protocol passkey --lengths 512,1024 --trials 20 --out results/passkey
  # RULER-style tasks (needles, variable tracking, common words): accuracy per task and length
  lengen lm eval runs/lm-rope --protocol ruler --tasks niah_single,vt,cwe --lengths 1k,2k --trials 10
  # non-RoPE models are evaluated as trained
  lengen lm eval runs/lm-alibi --methods base --lengths 256,1024,4096
  # a DroPE run (lengen lm train --init-from): plain, and with the logit scale fitted on held-out text
  lengen lm eval runs/lm-drope --methods base --lengths 128,256,512,1024 --drope-scale fit

Methods (RoPE models only; "rope" = as trained) are lengen.extrapolation specs, comma-separated;
options follow a colon and methods compose with "+". An option the protocol does not use is
refused: --docs and --batch-size are for ppl and last-segment, --segment for last-segment, --trials
and --seed for passkey and ruler, --tasks for ruler (the same rule as `lengen hf eval`). Writes
results.csv (method, length, ppl or accuracy, ...; ruler: method, task, length, accuracy, ...),
results.json and a plot into --out (default RUN_DIR/eval-PROTOCOL).

ruler tasks: niah_single, niah_single_word, niah_single_uuid, niah_multikey, niah_multivalue,
niah_multiquery, vt, cwe (docs/language_models.md defines them); a trial scores the fraction of its
expected answers found as whole words in the greedy continuation.
"""


def add_parser(sub) -> None:
    corpus_training.add_command_group(sub, "lm", "byte-level decoder language models: train, evaluate against "
                                "length", __doc__, [_add_train, _add_eval])


def _add_train(sub) -> None:
    d = values.LM
    p = corpus_training.add_subcommand(sub, "train", "train a decoder LM (resumable)", "Train a byte-level "
                                 "decoder LM on random windows of a corpus.", TRAIN_EPILOG)
    corpus_training.add_data_arguments(p, d)
    corpus_training.add_position_arguments(
        p, f"standard, pose, randomized, ... ({d.positions}); evaluation always uses the positions 0..L-1",
        "pose: target=L_t (default max-position), chunks=N, split=half|uniform")
    g = corpus_training.add_model_arguments(p, d, max_position="learned-table size, randomized range, pose's "
                                      "default target")
    add_logit_scale_arguments(g, "none, log_n, log_n_clipped, log_n_position")
    g.add_argument("--init-from", metavar="RUN_DIR",
                   help="start from this finished RoPE run's weights with the encoding dropped (DroPE; needs --pe "
                   "none): its shape, corpus and training length unless given (they must match), a fresh "
                   "optimiser (docs/training_time_methods.md)")
    corpus_training.add_run_arguments(p, d, seeded="weights and data order", validated="the final ppl",
                                out_default="runs/lm-PE[-POSITIONS]-LTRAIN-sSEED")
    p.set_defaults(func="lengen.cli.lm:run_train")


def _add_eval(sub) -> None:
    d = values.LM_EVAL
    p = corpus_training.add_subcommand(sub, "eval", "perplexity / last-segment / passkey / ruler against context "
                                 "length", "Evaluate a trained LM run against context length.", EVAL_EPILOG)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by `lengen lm train`")
    p.add_argument("--methods", default=None,
                   help="comma-separated methods (default for RoPE runs: rope, pi, ntk, yarn with factor = "
                   "longest length / training length, rerope, self_extend; base otherwise)")
    p.add_argument("--lengths", type=parse_lengths, help="context lengths, comma-separated, 4096 or 4k "
                   "(default: 1, 2, 4, 8 x the training length)")
    p.add_argument("--protocol", default="ppl", choices=values.LM_PROTOCOLS, help="(ppl)")
    p.add_argument("--segment", type=int, metavar="K", help=f"{protocols_only('segment')}: scored tokens at the "
                   "end of each sequence (default: min(training length, shortest length))")
    p.add_argument("--docs", type=int, metavar="N", help=f"{protocols_only('docs')}: validation sequences "
                   f"({d.docs})")
    p.add_argument("--trials", type=int, metavar="N", help=f"{protocols_only('trials')}: prompts per length "
                   f"({d.trials})")
    p.add_argument("--seed", type=int, help=f"{protocols_only('seed')}: prompt seed ({d.seed})")
    p.add_argument("--tasks", metavar="T,T", help=f"{protocols_only('tasks')}: comma-separated tasks (default: all)")
    p.add_argument("--batch-size", type=int, metavar="B", help=f"{protocols_only('batch_size')}: sequences per "
                   f"forward pass ({d.batch_size})")
    p.add_argument("--drope-scale", metavar="fit|C", help="NoPE runs (DroPE): also evaluate with the attention logits "
                   "times 1 + C ln(T/L) past the training length L (method drope_scale:c=...); fit: C in [0, 1] "
                   "minimising the held-out perplexity at the lengths past L, on --fit-docs sequences after the "
                   "reported ones (results.json: drope_scale)")
    p.add_argument("--fit-docs", type=int, metavar="N", help=f"--drope-scale fit: held-out sequences ({d.fit_docs})")
    p.add_argument("--out", metavar="DIR", help="output directory (default RUN_DIR/eval-PROTOCOL)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arguments(p, "the evaluation runs")
    p.set_defaults(func="lengen.cli.lm:run_eval")
