"""Greedy decoding."""

from keras import ops

from keras_gen.samplers.sampler import Sampler


class GreedySampler(Sampler):
    """Picks the most likely token at every step.

    Temperature does not change the result; it is accepted so that every
    sampler has the same arguments.

    Examples:
    >>> import keras_gen
    >>> sampler = keras_gen.samplers.get("greedy")
    >>> type(sampler).__name__
    'GreedySampler'
    """

    deterministic = True

    def get_next_token(self, logits, seed):
        return ops.argmax(logits, axis=-1)
