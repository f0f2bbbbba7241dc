"""Locally typical filter."""

from keras import ops

from keras_gen.processors.logits_processor import NEG_INF
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.samplers.sampler import check_probability


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
        log_probs = ops.log_softmax(logits, axis=-1)
        probs = ops.exp(log_probs)
        # 0 * -inf is NaN: tokens with no mass add nothing to the entropy.
        entropy = -ops.sum(
            ops.where(probs > 0, probs * log_probs, 0.0), axis=-1, keepdims=True
        )
        surprise = ops.abs(-log_probs - entropy)  # (batch, vocab)
        order = ops.argsort(surprise, axis=-1)
        sorted_surprise = ops.take_along_axis(surprise, order, axis=-1)
        mass = ops.cumsum(ops.take_along_axis(probs, order, axis=-1), axis=-1)
        last = ops.sum(ops.cast(mass < self.mass, "int32"), axis=-1, keepdims=True)
        last = ops.minimum(last, ops.shape(logits)[-1] - 1)
        threshold = ops.take_along_axis(sorted_surprise, last, axis=-1)
        # An all `-inf` row has NaN surprise: it stays all `-inf`.
        return ops.where(surprise <= threshold, logits, NEG_INF)

    def get_config(self):
        return {"mass": self.mass}
