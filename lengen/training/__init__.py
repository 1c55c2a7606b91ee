"""Training and evaluation of CHE models; run directories shared with the language models."""
