"""Logit filters, stop matching and the options -> sampler mapping."""
