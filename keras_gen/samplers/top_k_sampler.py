"""Top-k sampling."""

from keras import ops

from keras_gen.samplers.random_sampler import sample_from_logits
from keras_gen.samplers.sampler import Sampler
from keras_gen.samplers.sampler import check_count


def top_k_filter(logits, k):
    """Set all but the `k` largest logits of each row to `-inf`.

    `k` may be a tensor: the threshold is read from the sorted logits at a
    data-dependent position, so the program does not depend on `k`'s value.
    Ties with the k-th logit are kept.
    """
    vocabulary_size = ops.shape(logits)[-1]
    k = ops.clip(ops.cast(k, "int32"), 1, vocabulary_size)
    ascending = ops.sort(logits, axis=-1)
    position = ops.full((ops.shape(logits)[0], 1), vocabulary_size - k, "int32")
    threshold = ops.take_along_axis(ascending, position, axis=-1)
    return ops.where(logits >= threshold, logits, float("-inf"))


class TopKSampler(Sampler):
    """Samples from the `k` most likely tokens.

    Args:
        k: int >= 1, how many tokens to keep. `k=1` is greedy.
        temperature: float > 0, logits are divided by it first.
        seed: int or `None`, the default seed of `generate`.

    Examples:
    >>> sampler = TopKSampler(k=3)
    >>> sampler.get_parameters()
    {'temperature': 1.0, 'k': 3}
    """

    def __init__(self, k=5, temperature=1.0, seed=None):
        self.k = k
        super().__init__(temperature=temperature, seed=seed)

    def get_parameters(self):
        return {**super().get_parameters(), "k": check_count("k", self.k)}

    def filter_logits(self, logits):
        return top_k_filter(logits, self.k)

    def get_next_token(self, logits, seed):
        return sample_from_logits(self.filter_logits(logits), seed)

    def get_config(self):
        return {**super().get_config(), "k": self.k}
