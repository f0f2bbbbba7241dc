"""Min-p sampling."""

from keras_gen.kernels.filters import min_p_filter
from keras_gen.samplers.random_sampler import sample_from_logits
from keras_gen.samplers.sampler import Sampler
from keras_gen.utils.checks import check_probability


class MinPSampler(Sampler):
    """Samples from the tokens at least `p` times as likely as the top one.

    Args:
        p: float in (0, 1], the relative probability floor.
        temperature: finite float >= 1e-5, logits are divided by it first.
        seed: int or `None`, the default seed of `generate`.

    Examples:
    >>> sampler = MinPSampler(p=0.1)
    >>> sampler.get_parameters()
    {'temperature': 1.0, 'p': 0.1}
    """

    def __init__(self, p=0.1, temperature=1.0, seed=None):
        self.p = p
        super().__init__(temperature=temperature, seed=seed)

    def get_parameters(self):
        return {**super().get_parameters(), "p": check_probability("p", self.p)}

    def filter_logits(self, logits):
        return min_p_filter(logits, self.p)

    def get_next_token(self, logits, seed):
        return sample_from_logits(self.filter_logits(logits), seed)

    def get_config(self):
        return {**super().get_config(), "p": self.p}
