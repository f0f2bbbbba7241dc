"""Sampling from the whole distribution, optionally filtered."""

from keras import ops

from keras_gen import backend
from keras_gen.kernels.filters import FILTERS
from keras_gen.kernels.filters import filter_logits
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
    """Samples each token from the softmax distribution.

    The optional filters (`keras_gen.kernels.filters.FILTERS`) apply after
    the temperature, in vLLM's order: min-p, top-k, top-p (over what min-p
    and top-k kept), then typical. A filter given here (even at its neutral
    value) is part of the compiled program and its value an input, so
    `top_k=0` and `top_k=40` share one program; a filter left at `None`
    costs nothing.

    Args:
        temperature: finite float >= 1e-5, logits are divided by it first.
        seed: int or `None`, the default seed of `generate`.
        **filters: each filter's value, or `None`:
            `top_k`: int >= 0, keep the `k` most likely tokens (0 keeps all).
            `top_p`: float in (0, 1], keep the smallest set whose mass
            reaches `p` (1 keeps all).
            `min_p`: float in [0, 1], keep tokens at least `min_p` times as
            likely as the most likely one (0 keeps all).
            `typical_p`: float in (0, 1], locally typical sampling (1 keeps
            all).

    Examples:
    >>> sampler = RandomSampler(temperature=0.7, top_k=40, top_p=0.9)
    >>> sampler.get_parameters()
    {'temperature': 0.7, 'top_k': 40, 'top_p': 0.9}
    """

    def __init__(self, temperature=1.0, seed=None, **filters):
        unknown = sorted(set(filters) - set(FILTERS))
        if unknown:
            raise TypeError(
                f"Unknown arguments {unknown}: `RandomSampler` takes "
                f"`temperature`, `seed` and the filters {list(FILTERS)}."
            )
        for name in FILTERS:
            setattr(self, name, filters.get(name))
        super().__init__(temperature=temperature, seed=seed)

    def get_parameters(self):
        parameters = super().get_parameters()
        for name, (_, _, check) in FILTERS.items():
            if getattr(self, name) is not None:
                parameters[name] = check(name, getattr(self, name))
        return parameters

    def filter_logits(self, logits):
        return filter_logits(logits, **{name: getattr(self, name) for name in FILTERS})

    def get_next_token(self, logits, seed):
        return sample_from_logits(self.filter_logits(logits), seed)

    def get_config(self):
        config = super().get_config()
        for name in FILTERS:
            if getattr(self, name) is not None:
                config[name] = getattr(self, name)
        return config
