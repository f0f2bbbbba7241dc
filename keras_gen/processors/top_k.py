"""Top-k filter."""

from keras_gen.kernels.filters import top_k_filter
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.utils.checks import check_count


class TopK(LogitsProcessor):
    """Keeps the `k` largest logits of each row (ties included), `-inf` the rest.

    Composes with any sampler; `k` reaches the program as a tensor.

    Args:
        k: int >= 1.

    Call arguments:
        See `LogitsProcessor`.

    Examples:
    >>> import numpy as np
    >>> logits = np.array([[1.0, 3.0, 2.0]], "float32")
    >>> np.asarray(TopK(2)(logits, None, 0, None)).tolist()
    [[-inf, 3.0, 2.0]]
    """

    def __init__(self, k=50):
        self.k = k
        self.get_parameters()

    def get_parameters(self):
        return {"k": check_count("k", self.k)}

    def __call__(self, logits, prompt, index, mask):
        return top_k_filter(logits, self.k)

    def get_config(self):
        return {"k": self.k}
