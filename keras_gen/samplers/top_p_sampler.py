"""Top-p (nucleus) sampling."""

from keras_gen.kernels.filters import filter_logits
from keras_gen.samplers.random_sampler import sample_from_logits
from keras_gen.samplers.sampler import Sampler
from keras_gen.utils.checks import check_count
from keras_gen.utils.checks import check_probability


class TopPSampler(Sampler):
    """Samples from the smallest set of tokens whose probability reaches `p`.

    Args:
        p: float in (0, 1], the probability mass to keep.
        k: int >= 1 or `None`. If set, only the `k` most likely tokens are
            considered before the `p` cut.
        temperature: finite float >= 1e-5, logits are divided by it first.
        seed: int or `None`, the default seed of `generate`.

    Examples:
    >>> sampler = TopPSampler(p=0.9)
    >>> sampler.get_parameters()
    {'temperature': 1.0, 'p': 0.9, 'k': 0}
    """

    def __init__(self, p=0.9, k=None, temperature=1.0, seed=None):
        self.p = p
        self.k = k
        super().__init__(temperature=temperature, seed=seed)

    def get_parameters(self):
        k = check_count("k", self.k, allow_none=True)
        return {
            **super().get_parameters(),
            "p": check_probability("p", self.p),
            # k=0 means "no top-k cut": one program serves both.
            "k": 0 if k is None else k,
        }

    def filter_logits(self, logits):
        return filter_logits(logits, top_k=self.k, top_p=self.p)

    def get_next_token(self, logits, seed):
        return sample_from_logits(self.filter_logits(logits), seed)

    def get_config(self):
        return {**super().get_config(), "p": self.p, "k": self.k}
