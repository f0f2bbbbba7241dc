import keras
import numpy as np
import pytest

from keras_gen.models import GPT2CausalLM
from keras_gen.models import LlamaCausalLM
from keras_gen.training import lora
from tests.conftest import tiny_gpt2_backbone
from tests.models.llama.llama_backbone_test import tiny_llama_backbone
from tests.text_models import TEXT
from tests.text_models import tiny_text_lm

TOKENS = np.array([[5, 9, 12, 30, 7, 3, 21, 40]], "int32")


def _logits(lm, tokens=TOKENS):
    return keras.ops.convert_to_numpy(lm(tokens))


def _randomize(layers, seed=0):
    # Both factors: `lora_kernel_a` is drawn from Keras' global generator,
    # whose state depends on the tests run before in the process.
    rng = np.random.default_rng(seed)
    for layer in layers:
        for factor in (layer.lora_kernel_a, layer.lora_kernel_b):
            factor.assign(0.5 * rng.standard_normal(factor.shape).astype("float32"))


def _size(variables):
    return sum(int(np.prod(v.shape)) for v in variables)


@pytest.mark.parametrize(
    "make, target_modules, named",
    [
        # GPT-2 by default: its fused query/key/value projection.
        (lambda: GPT2CausalLM(tiny_gpt2_backbone()), None, ("c_attn",)),
        (
            lambda: LlamaCausalLM(tiny_llama_backbone()),
            "all-linear",
            (
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
            ),
        ),
    ],
    ids=["gpt2_default", "llama_all_linear"],
)
def test_only_the_adapters_train_and_merging_keeps_the_function(
    make, target_modules, named
):
    lm = make()
    trainable = _size(lm.trainable_weights)
    before = _logits(lm)
    rank = 3
    lm.backbone.enable_lora(rank, target_modules=target_modules)
    layers = lora.adapted(lm.backbone)
    assert {layer.name for layer in layers} == set(named)
    assert len(layers) == len(named) * lm.backbone.num_layers
    # r * (in + out) per adapted projection, and nothing else.
    expected = sum(rank * sum(layer.kernel.shape) for layer in layers)
    assert _size(lm.trainable_weights) == expected == lora.parameter_count(layers)
    assert all("lora_kernel" in v.path for v in lm.trainable_weights)
    # B starts at 0: the model is unchanged until it trains.
    np.testing.assert_allclose(_logits(lm), before, atol=1e-5)
    _randomize(layers)
    adapted = _logits(lm)
    assert np.abs(adapted - before).max() > 1e-2
    assert lm.backbone.merge_lora() == len(layers)
    np.testing.assert_allclose(_logits(lm), adapted, atol=1e-4)
    assert _size(lm.trainable_weights) == trainable
    assert not any("lora" in v.path for v in lm.weights)


def test_generation_uses_the_adapters_and_compiles_once(traces):
    lm = tiny_text_lm()
    prompt = "The for"
    options = dict(max_new_tokens=12, do_sample=False, stop_token_ids=None)
    plain = lm.generate(prompt, **options)
    assert traces() == 1
    lm.backbone.enable_lora(4, target_modules="all-linear")
    _randomize(lora.adapted(lm.backbone))
    adapted = lm.generate(prompt, **options)
    # The adapters add weights: one new program.
    assert traces() == 2 and adapted != plain
    lm.compile(optimizer=keras.optimizers.Adam(1e-2))
    lm.fit([TEXT[0]] * 4, epochs=3, batch_size=4, verbose=0)
    trained = lm.generate(prompt, **options)
    # New values in the same weights: the program stays.
    assert traces() == 2 and trained != adapted
    lm.backbone.merge_lora()
    assert lm.generate(prompt, **options) == trained


def test_bad_arguments_are_named():
    lm = LlamaCausalLM(tiny_llama_backbone())
    with pytest.raises(ValueError, match="c_attn.*projections are \\['down_proj'"):
        lm.backbone.enable_lora(2, target_modules=["c_attn"])
    with pytest.raises(TypeError, match="target_modules"):
        lm.backbone.enable_lora(2, target_modules="q_proj")
    with pytest.raises(ValueError, match="rank"):
        lm.backbone.enable_lora(0)
    with pytest.raises(ValueError, match="lora_alpha"):
        lm.backbone.enable_lora(2, lora_alpha=-1)
    lm.backbone.enable_lora(2)
    with pytest.raises(ValueError, match="already have adapters"):
        lm.backbone.enable_lora(2)
    with pytest.raises(ValueError, match="no adapters to save"):
        LlamaCausalLM(tiny_llama_backbone()).save_lora("unused")
