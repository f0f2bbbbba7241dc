"""Sampling from the whole distribution, optionally filtered."""

from keras import ops

from keras_gen import backend
from keras_gen.samplers.sampler import Sampler
from keras_gen.sampling import filters
from keras_gen.utils.checks import check_fraction
from keras_gen.utils.checks import check_int
from keras_gen.utils.checks import check_probability

# Each filter's check; `None` leaves the filter out of the program.
FILTER_CHECKS = {
    "top_k": lambda v: check_int("top_k", v, low=0),
    "top_p": lambda v: check_probability("top_p", v),
    "min_p": lambda v: check_fraction("min_p", v),
    "typical_p": lambda v: check_probability("typical_p", v),
}


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

    The optional filters apply after the temperature, in vLLM's order:
    min-p, top-k, top-p (over what min-p and top-k kept), then typical.
    A filter given here (even at its neutral value) is part of the compiled
    program and its value an input, so `top_k=0` and `top_k=40` share one
    program; a filter left at `None` costs nothing.

    Args:
        temperature: finite float >= 1e-5, logits are divided by it first.
        top_k: int >= 0 or `None`: keep the `k` most likely tokens (0 keeps
            all).
        top_p: float in (0, 1] or `None`: keep the smallest set whose mass
            reaches `p` (1 keeps all).
        min_p: float in [0, 1] or `None`: keep tokens at least `min_p` times
            as likely as the most likely one (0 keeps all).
        typical_p: float in (0, 1] or `None`: locally typical sampling (1
            keeps all).
        seed: int or `None`, the default seed of `generate`.

    Examples:
    >>> sampler = RandomSampler(temperature=0.7, top_k=40, top_p=0.9)
    >>> sampler.get_parameters()
    {'temperature': 0.7, 'top_k': 40, 'top_p': 0.9}
    """

    def __init__(
        self,
        temperature=1.0,
        top_k=None,
        top_p=None,
        min_p=None,
        typical_p=None,
        seed=None,
    ):
        self.top_k = top_k
        self.top_p = top_p
        self.min_p = min_p
        self.typical_p = typical_p
        super().__init__(temperature=temperature, seed=seed)

    def get_parameters(self):
        parameters = super().get_parameters()
        for name, check in FILTER_CHECKS.items():
            if getattr(self, name) is not None:
                parameters[name] = check(getattr(self, name))
        return parameters

    def filter_logits(self, logits):
        return filters.filter_logits(
            logits, **{name: getattr(self, name) for name in FILTER_CHECKS}
        )

    def get_next_token(self, logits, seed):
        return sample_from_logits(self.filter_logits(logits), seed)

    def get_config(self):
        config = super().get_config()
        for name in FILTER_CHECKS:
            if getattr(self, name) is not None:
                config[name] = getattr(self, name)
        return config
