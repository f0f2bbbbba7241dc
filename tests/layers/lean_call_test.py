import keras
import numpy as np
import pytest

from keras_gen.models import GPT2CausalLM
from tests.conftest import tiny_gpt2_backbone

PROMPTS = [[5, 9, 2, 33, 61], [7], [1, 2, 3]]


@pytest.mark.only_backend("torch")
@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_a_traced_step_skips_keras_call_machinery_and_computes_the_same(
    monkeypatch, dtype
):
    from keras_gen.backend import torch_backend

    lm = GPT2CausalLM(tiny_gpt2_backbone(dtype=dtype))
    kwargs = dict(max_new_tokens=6, return_dict=True, output_log_probs=True)
    eager = lm.generate(PROMPTS, **kwargs)
    calls = []
    keras_call = keras.layers.Layer.__call__

    def counted(layer, *args, **kw):
        calls.append(type(layer).__name__)
        return keras_call(layer, *args, **kw)

    monkeypatch.setattr(keras.layers.Layer, "__call__", counted)
    monkeypatch.setattr(torch_backend, "COMPILER", "aot_eager")
    lm.compile()
    compiled = lm.generate(PROMPTS, **kwargs)
    assert compiled.token_ids == eager.token_ids
    for a, b in zip(compiled.log_probs, eager.log_probs):
        np.testing.assert_allclose(a, b, atol=0.05 if "bfloat16" in dtype else 1e-5)
    # The prefill runs eagerly, through Keras' `__call__`; the traced step
    # did not: an eager run, whose every step goes through it, calls more.
    compiled_calls = len(calls)
    monkeypatch.setattr(torch_backend, "COMPILER", "none")
    lm.compile()
    lm.generate(PROMPTS, **kwargs)
    assert compiled_calls > 0 and len(calls) - compiled_calls > 2 * compiled_calls
