"""Top-p (nucleus) filter."""

from keras_gen.kernels.filters import top_p_filter
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.utils.checks import check_probability


class TopP(LogitsProcessor):
    """Keeps the smallest set of most likely tokens whose mass reaches `p`.

    Composes with any sampler; `p` reaches the program as a tensor.

    Args:
        p: float in (0, 1].

    Call arguments:
        See `LogitsProcessor`.

    Examples:
    >>> import numpy as np
    >>> logits = np.log(np.array([[0.5, 0.3, 0.2]], "float32"))
    >>> np.isinf(np.asarray(TopP(0.7)(logits, None, 0, None))).tolist()
    [[False, False, True]]
    """

    def __init__(self, p=0.9):
        self.p = p
        self.get_parameters()

    def get_parameters(self):
        return {"p": check_probability("p", self.p)}

    def __call__(self, logits, prompt, index, mask):
        return top_p_filter(logits, self.p)

    def get_config(self):
        return {"p": self.p}
