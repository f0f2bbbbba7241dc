"""Build a tiny GPT-2, pick a sampler, generate.

python examples/quickstart.py
"""

import argparse

import keras_gen

# `--help` shows the docstring; the example takes no arguments.
argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
).parse_args()

backbone = keras_gen.models.GPT2Backbone(
    vocabulary_size=100,
    num_layers=2,
    num_heads=2,
    hidden_dim=32,
    intermediate_dim=64,
    max_sequence_length=128,
)
lm = keras_gen.models.GPT2CausalLM(backbone)
lm.compile(sampler="top_k")
print(lm.generate([[1, 2, 3], [4, 5]], max_new_tokens=8, seed=0))
lm.sampler.temperature = 0.7  # takes effect without recompiling
print(lm.generate([1, 2, 3], max_new_tokens=8, seed=0))
