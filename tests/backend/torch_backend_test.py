import warnings

import pytest

from keras_gen.models import GPT2CausalLM
from tests.conftest import tiny_gpt2_backbone

PROMPTS = [[5, 9, 2, 33, 61], [7], [1, 2, 3]]


@pytest.mark.slow
@pytest.mark.only_backend("torch")
def test_inductor_compiled_step_equals_eager_and_compiles_once(
    monkeypatch, traces
):
    from keras_gen.backend import torch_backend

    lm = GPT2CausalLM(tiny_gpt2_backbone())
    monkeypatch.setattr(torch_backend, "COMPILER", "none")
    eager = lm.generate(PROMPTS, max_new_tokens=10)
    monkeypatch.setattr(torch_backend, "COMPILER", "inductor")
    assert lm.generate(PROMPTS, max_new_tokens=10) == eager
    assert traces() == 1
    # Other prompts and lengths in the same bucket reuse the compiled step.
    lm.generate([[4, 4, 4], [1, 2], [9]], max_new_tokens=12)
    assert traces() == 1


@pytest.mark.only_backend("torch")
def test_jit_compile_false_runs_the_step_eagerly(traces):
    lm = GPT2CausalLM(tiny_gpt2_backbone())
    lm.compile(jit_compile=False)
    lm.generate(PROMPTS, max_new_tokens=4)
    assert traces() == 0


@pytest.mark.only_backend("torch")
def test_a_step_dynamo_cannot_capture_runs_eagerly_with_a_warning(traces):
    lm = GPT2CausalLM(tiny_gpt2_backbone())
    # Keras' int8 Dense multiplies through a custom-gradient autograd
    # Function, which Dynamo cannot trace inside a fullgraph step.
    lm.quantize("int8")
    lm.compile(jit_compile=False)
    expected = lm.generate(PROMPTS, max_new_tokens=6)
    lm.compile()
    with pytest.warns(UserWarning, match="runs eagerly"):
        assert lm.generate(PROMPTS, max_new_tokens=6) == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # decided once per program
        assert lm.generate(PROMPTS, max_new_tokens=6) == expected
