"""The tiny `lengen lm train` run the LM tests share: a few stdlib modules, one small layer."""

from lengen.data import stdlib_root

CORPUS = str(stdlib_root() / "json")  # a few small stdlib modules: offline and fast
TINY = ["--corpus", CORPUS, "--train-length", "16", "--layers", "1", "--heads", "2", "--d-model", "16",
        "--d-ff", "32", "--batch-size", "4", "--warmup", "2", "--checkpoint-every", "3", "--log-every", "2",
        "--val-windows", "4", "--no-progress"]
