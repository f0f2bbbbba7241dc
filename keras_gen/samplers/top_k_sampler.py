"""Top-k sampling."""

from keras_gen.kernels.filters import top_k_filter
from keras_gen.samplers.random_sampler import sample_from_logits
from keras_gen.samplers.sampler import Sampler
from keras_gen.utils.checks import check_count


class TopKSampler(Sampler):
    """Samples from the `k` most likely tokens.

    Args:
        k: int >= 1, how many tokens to keep. `k=1` is greedy.
        temperature: finite float >= 1e-5, logits are divided by it first.
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
