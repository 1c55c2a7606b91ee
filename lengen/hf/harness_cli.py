"""lm-eval's own command line with lengen's model type "lengen" registered (lm-eval 0.4.13 finds
models only in its registry, not through entry points, so plain `lm_eval` cannot see it):

    python -m lengen.hf.harness_cli --model lengen --tasks niah_single_1 --device cpu \\
        --model_args '{"pretrained": "DIR", "method": "self_extend:group=4,window=1024", "max_length": 16384}'

(--model_args as JSON: lm-eval splits key=value pairs at commas, and specs have commas.)"""

from lm_eval.__main__ import cli_evaluate

import lengen.hf.harness  # noqa: F401  registers the model type "lengen"

if __name__ == "__main__":
    cli_evaluate()
