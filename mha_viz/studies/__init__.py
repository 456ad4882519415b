"""Experiments that run the model through pipeline/: sweeps, ablation and importance, induction, logit lens,
padding, patching, variants, mixture of heads, collaborative heads, circuits and the corpus engine."""
