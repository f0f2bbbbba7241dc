"""Generation options: the model's defaults, a GenerationConfig, keywords.

python examples/generation_options.py
"""

import argparse

import keras_gen

# `--help` shows the docstring; the example takes no arguments.
argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
).parse_args()

lm = keras_gen.CausalLM.from_preset("demo")
# The defaults its generation_config.json gives: top-k 40 at temperature
# 0.8, repetition penalty 1.2, 64 new tokens.
print(lm.generation_config)
print(lm.generate("The for statement", max_new_tokens=24, seed=0))

# A config of your own; keywords override its fields for one call.
focused = keras_gen.GenerationConfig(do_sample=True, top_p=0.8, min_p=0.05)
print(lm.generate("A class definition", focused, temperature=0.6, seed=1))

# Greedy, with no penalty, and stopping at the first period.
print(
    lm.generate(
        "Exceptions are",
        do_sample=False,
        repetition_penalty=1.0,
        stop_strings=["."],
        include_stop_string=True,
    )
)
