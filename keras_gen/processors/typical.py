"""Locally typical filter."""

from keras_gen.kernels.filters import typical_filter
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.utils.checks import check_probability


class Typical(LogitsProcessor):
    """Keeps the tokens whose surprise is closest to the row's entropy.

    Locally typical sampling (Meister et al., 2022), as transformers'
    `TypicalLogitsWarper`: tokens are ranked by `|-log p - entropy|` and the
    best ones are kept until their mass reaches `mass`.

    Args:
        mass: float in (0, 1].

    Call arguments:
        See `LogitsProcessor`.

    Examples:
    >>> import numpy as np
    >>> logits = np.log(np.array([[0.5, 0.3, 0.2]], "float32"))
    >>> np.isinf(np.asarray(Typical(0.2)(logits, None, 0, None))).tolist()
    [[True, False, True]]
    """

    def __init__(self, mass=0.9):
        self.mass = mass
        self.get_parameters()

    def get_parameters(self):
        return {"mass": check_probability("mass", self.mass)}

    def __call__(self, logits, prompt, index, mask):
        return typical_filter(logits, self.mass)

    def get_config(self):
        return {"mass": self.mass}
