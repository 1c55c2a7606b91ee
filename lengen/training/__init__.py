"""What every resumable training loop shares, whatever it trains: the run directory (run_dir),
the checkpoint and metrics bookkeeping (session), the wall-clock deadline (deadline), optimiser
choices (optim) and the corpus-training loop of the LM, MLM and arithmetic models (corpus_loop).
The CHE models' own loop, grouped training and per-length evaluation are in lengen.che."""
