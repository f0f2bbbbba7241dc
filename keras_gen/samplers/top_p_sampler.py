"""Top-p (nucleus) sampling."""

from keras import ops

from keras_gen.samplers.random_sampler import sample_from_logits
from keras_gen.samplers.sampler import Sampler
from keras_gen.samplers.sampler import check_count
from keras_gen.samplers.sampler import check_probability
from keras_gen.samplers.top_k_sampler import top_k_filter


def top_p_filter(logits, p):
    """Keep the smallest set of most likely tokens whose mass reaches `p`.

    As transformers: the least likely tokens whose total mass is at most
    `1 - p` are removed, so `p=1` keeps every token (a "mass before < p"
    test would drop tiny ones to float rounding) and the most likely token
    always stays.
    """
    ascending = ops.sort(logits, axis=-1)
    mass = ops.cumsum(ops.softmax(ascending, axis=-1), axis=-1)
    removed = ops.sum(ops.cast(mass <= 1 - p, "int32"), axis=-1, keepdims=True)
    removed = ops.minimum(removed, ops.shape(logits)[-1] - 1)
    threshold = ops.take_along_axis(ascending, removed, axis=-1)
    return ops.where(logits >= threshold, logits, float("-inf"))


class TopPSampler(Sampler):
    """Samples from the smallest set of tokens whose probability reaches `p`.

    Args:
        p: float in (0, 1], the probability mass to keep.
        k: int >= 1 or `None`. If set, only the `k` most likely tokens are
            considered before the `p` cut.
        temperature: float > 0, logits are divided by it first.
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
        vocabulary_size = ops.shape(logits)[-1]
        k = ops.where(self.k > 0, self.k, vocabulary_size)
        return top_p_filter(top_k_filter(logits, k), self.p)

    def get_next_token(self, logits, seed):
        return sample_from_logits(self.filter_logits(logits), seed)

    def get_config(self):
        return {**super().get_config(), "p": self.p, "k": self.k}
