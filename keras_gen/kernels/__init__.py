"""Tensor functions samplers, processors and the engine share: logit
filters, stop matching, reads and writes at per-row positions, and the
automata (and their packed tables) of structured output."""
