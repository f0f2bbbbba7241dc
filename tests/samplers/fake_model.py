"""A fake `next` for sampler tests: no model, known logits."""

import numpy as np
from keras import ops

from keras_gen import backend

VOCAB = "abcdefghijklmnopqrstuvwxyz*"
STOP = VOCAB.index("*")


def fake_next(word, batch=1):
    """A `next` whose logits spell `word` one letter per step, then `*`.

    At step `index` the letter `word[index]` gets logit 1 and every other
    letter 0... scaled so the preferred letter dominates.
    """
    table = np.full((64, len(VOCAB)), -1e3, "float32")
    for position, letter in enumerate(word + "*" * (64 - len(word))):
        table[position, VOCAB.index(letter)] = 0.0
    table = ops.convert_to_tensor(table)

    def next(prompt, state, index):
        logits = backend.slice(table, index, 1, axis=0)
        logits = ops.repeat(logits, batch, axis=0)
        return logits, None, state

    return next


def spell(tokens):
    return "".join(VOCAB[t] for t in ops.convert_to_numpy(tokens))
