"""Sampling from the whole distribution."""

from keras import ops

from keras_gen import backend
from keras_gen.samplers.sampler import Sampler


def sample_from_logits(logits, seed):
    """Draw one token per row from `softmax(logits)` with the Gumbel trick.

    `argmax(logits + Gumbel noise)` is a draw from the categorical
    distribution, with no softmax and no log: tokens filtered out with
    `-inf` logits can never be drawn.
    """
    uniform = backend.uniform(ops.shape(logits), seed)
    # Keep the noise finite at both ends of [0, 1).
    uniform = ops.clip(uniform, 1e-7, 1.0 - 1e-7)
    gumbel = -ops.log(-ops.log(uniform))
    return ops.argmax(logits + gumbel, axis=-1)


class RandomSampler(Sampler):
    """Samples each token from the full softmax distribution.

    Args:
        temperature: float > 0, logits are divided by it first.
        seed: int or `None`, the default seed of `generate`.

    Examples:
    >>> sampler = RandomSampler(temperature=0.7)
    >>> sampler.get_parameters()
    {'temperature': 0.7}
    """

    def get_next_token(self, logits, seed):
        return sample_from_logits(self.filter_logits(logits), seed)
