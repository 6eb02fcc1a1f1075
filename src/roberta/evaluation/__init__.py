"""Measuring a model from outside its training run: `sts` (`roberta evaluate sts`: the STS
correlations of ours and of sentence-transformers models) and `probe` (the probe of a run:
a pretraining run's checkpoints fine-tuned on small GLUE tasks)."""
