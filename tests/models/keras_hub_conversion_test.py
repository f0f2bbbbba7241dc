"""keras-hub models to keras-gen and back: logits, tokens, tokenizers,
samplers, presets, and the errors.

Every keras-hub model here is built in the test with random weights (no
download): the tiny families' logits must equal keras-hub's, and greedy
tokens keras-hub's `generate`.
"""

import json

import keras
import numpy as np
import pytest

from keras_gen import CausalLM
from keras_gen import samplers

keras_hub = pytest.importorskip("keras_hub")

SMALL = dict(vocabulary_size=64, num_layers=2, hidden_dim=16, intermediate_dim=32)
HEADS = dict(num_query_heads=4, num_key_value_heads=2)
# One tiny random model per family keras-gen converts, with the options that
# change what the model computes (rope scalings, windows, caps, experts).
FAMILIES = {
    "gpt2": lambda: keras_hub.models.GPT2Backbone(
        vocabulary_size=64,
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=32,
    ),
    "llama": lambda: keras_hub.models.LlamaBackbone(
        **HEADS, rope_position_scaling_factor=2.0, **SMALL
    ),
    "llama3": lambda: keras_hub.models.Llama3Backbone(
        **HEADS,
        rope_frequency_adjustment_factor=8.0,
        rope_low_freq_factor=1.0,
        rope_high_freq_factor=4.0,
        rope_pretraining_sequence_length=16,
        tie_word_embeddings=True,
        **SMALL,
    ),
    "mistral": lambda: keras_hub.models.MistralBackbone(
        **HEADS, sliding_window=4, **SMALL
    ),
    "mixtral": lambda: keras_hub.models.MixtralBackbone(
        **HEADS, num_experts=4, top_k=2, **SMALL
    ),
    # keras-hub 0.32's Qwen drops its window where a fused attention op
    # runs (on some backends): no window here.
    "qwen": lambda: keras_hub.models.QwenBackbone(**HEADS, **SMALL),
    "qwen3": lambda: keras_hub.models.Qwen3Backbone(**HEADS, head_dim=8, **SMALL),
    "qwen3_moe": lambda: keras_hub.models.Qwen3MoeBackbone(
        **HEADS,
        head_dim=8,
        num_experts=4,
        top_k=2,
        moe_intermediate_dim=8,
        norm_top_k_prob=True,
        **SMALL,
    ),
    "gemma": lambda: keras_hub.models.GemmaBackbone(**HEADS, head_dim=8, **SMALL),
    "gemma2": lambda: keras_hub.models.GemmaBackbone(
        **HEADS,
        head_dim=8,
        use_post_ffw_norm=True,
        use_post_attention_norm=True,
        attention_logit_soft_cap=5.0,
        final_logit_soft_cap=3.0,
        use_sliding_window_attention=True,
        sliding_window_size=4,
        **SMALL,
    ),
    "gemma3": lambda: keras_hub.models.Gemma3Backbone(
        **HEADS,
        head_dim=8,
        image_size=16,
        use_post_ffw_norm=True,
        use_post_attention_norm=True,
        use_sliding_window_attention=True,
        sliding_window_size=4,
        global_rope_scaling_factor=2.0,
        **{**SMALL, "num_layers": 7},  # a global layer after six windowed
    ),
    "phi3": lambda: keras_hub.models.Phi3Backbone(**HEADS, **SMALL),
}
IDS = np.random.RandomState(1).randint(1, 64, (2, 14)).astype("int32")
PROMPTS = [[5, 9, 2, 33, 61, 7, 12], [40, 3, 3, 17]]


def random_weights(backbone, seed=0):
    """Weights large enough that a wrong layout changes every logit."""
    rng = np.random.RandomState(seed)
    for variable in backbone.weights:
        variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))
    return backbone


def task(family, preprocessor=None):
    backbone = random_weights(FAMILIES[family]())
    task_class = next(
        getattr(keras_hub.models, name)
        for name in dir(keras_hub.models)
        if getattr(getattr(keras_hub.models, name), "backbone_cls", None)
        is type(backbone)
        and name.endswith("CausalLM")
    )
    return task_class(backbone=backbone, preprocessor=preprocessor)


def hub_logits(hub):
    inputs = {"token_ids": IDS, "padding_mask": np.ones(IDS.shape, bool)}
    return keras.ops.convert_to_numpy(hub(inputs))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_equal_keras_hub_both_ways(family):
    hub = task(family)
    expected = hub_logits(hub)
    lm = CausalLM.from_keras_hub(hub)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(lm(IDS)), expected, atol=1e-4, rtol=0
    )
    back = lm.to_keras_hub()
    assert type(back.backbone) is type(hub.backbone)
    np.testing.assert_allclose(hub_logits(back), expected, atol=1e-5, rtol=0)


# keras-hub's `generate` compiles for seconds per model: one family on
# every backend, the others on jax.
JAX_ONLY = pytest.mark.only_backend("jax")


@pytest.mark.parametrize(
    "family",
    [
        "gemma2",
        *(pytest.param(f, marks=JAX_ONLY) for f in ("gpt2", "mistral", "qwen3_moe")),
    ],
)
def test_greedy_tokens_equal_keras_hub_generate(family):
    hub = task(family)
    hub.compile(sampler="greedy")
    length = 16
    token_ids = np.zeros((len(PROMPTS), length), "int32")
    padding_mask = np.zeros((len(PROMPTS), length), bool)
    for row, prompt in enumerate(PROMPTS):
        token_ids[row, : len(prompt)] = prompt
        padding_mask[row, : len(prompt)] = True
    # keras-hub generates until `max_length` (no end token without a
    # preprocessor's tokenizer).
    out = hub.generate(
        {"token_ids": token_ids, "padding_mask": padding_mask},
        max_length=length,
        stop_token_ids=None,
    )
    expected = [
        list(keras.ops.convert_to_numpy(out["token_ids"])[row, len(prompt) :])
        for row, prompt in enumerate(PROMPTS)
    ]
    lm = CausalLM.from_keras_hub(hub)
    got = lm.generate(PROMPTS, max_new_tokens=length - min(map(len, PROMPTS)))
    for row, prompt in enumerate(PROMPTS):
        assert got[row][len(prompt) : length] == expected[row]


def bpe_files():
    """A byte-level BPE vocabulary and merges trained on a few texts."""
    import tokenizers

    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(
        add_prefix_space=False
    )
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=330,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    model = json.loads(tokenizer.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return model["vocab"], merges


CORPUS = [
    "The quick brown fox jumps over the lazy dog 12345 times.",
    "Hello   world!\n\nnew lines  and  spaces",
    "it's 2026, don't you know?",
] * 10
TEXTS = CORPUS[:3] + ["  leading spaces", "héllo wörld ✓", "a\tb", ""]


def gpt2_task():
    vocabulary, merges = bpe_files()
    tokenizer = keras_hub.models.GPT2Tokenizer(vocabulary=vocabulary, merges=merges)
    backbone = random_weights(
        keras_hub.models.GPT2Backbone(
            vocabulary_size=len(vocabulary),
            num_layers=2,
            num_heads=2,
            hidden_dim=16,
            intermediate_dim=32,
            max_sequence_length=64,
        )
    )
    preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(
        tokenizer, sequence_length=64
    )
    return keras_hub.models.GPT2CausalLM(backbone, preprocessor=preprocessor)


def gemma_task(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS),
        model_prefix=str(tmp_path / "tokenizer"),
        vocab_size=340,
        hard_vocab_limit=False,
        character_coverage=1.0,
        model_type="bpe",
        byte_fallback=True,
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        eos_piece="<eos>",
        bos_piece="<bos>",
        minloglevel=2,
    )
    with open(tmp_path / "tokenizer.model", "rb") as f:
        proto = f.read()
    tokenizer = keras_hub.models.GemmaTokenizer(proto=proto)
    backbone = random_weights(
        keras_hub.models.GemmaBackbone(
            **HEADS,
            head_dim=8,
            **{**SMALL, "vocabulary_size": tokenizer.vocabulary_size()},
        )
    )
    preprocessor = keras_hub.models.GemmaCausalLMPreprocessor(
        tokenizer, sequence_length=64
    )
    return keras_hub.models.GemmaCausalLM(backbone, preprocessor=preprocessor)


def hub_ids(preprocessor, text):
    """The ids keras-hub's preprocessor gives `generate` for `text`."""
    packed = preprocessor.generate_preprocess([text])
    ids = keras.ops.convert_to_numpy(packed["token_ids"])[0]
    mask = keras.ops.convert_to_numpy(packed["padding_mask"])[0]
    return [int(t) for t, m in zip(ids, mask) if m]


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize("kind", ["byte_pair", "sentencepiece"])
def test_tokenizer_encodes_as_keras_hub_preprocessor(kind, tmp_path):
    hub = gpt2_task() if kind == "byte_pair" else gemma_task(tmp_path)
    tokenizer = CausalLM.from_keras_hub(hub).tokenizer
    detokenize = hub.preprocessor.tokenizer.detokenize
    for text in TEXTS:
        ids = tokenizer.encode(text)
        assert ids == hub_ids(hub.preprocessor, text), text
        expected = keras.ops.convert_to_numpy(detokenize([ids[1:]]))[0]
        expected = expected.decode() if isinstance(expected, bytes) else expected
        assert tokenizer.decode(ids) == expected
    assert tokenizer.eos_token_ids == [hub.preprocessor.tokenizer.end_token_id]


@pytest.mark.parametrize(
    "kind", ["byte_pair", pytest.param("sentencepiece", marks=JAX_ONLY)]
)
def test_text_generation_and_preset_round_trip(kind, tmp_path):
    hub = gpt2_task() if kind == "byte_pair" else gemma_task(tmp_path)
    # A keras-hub preset folder in, a keras-hub preset folder out. (Presets
    # keep no sampler: loaded, both are compiled with keras-hub's default.)
    hub.save_to_preset(tmp_path / "hub")
    lm = CausalLM.from_keras_hub(tmp_path / "hub")
    loaded = keras_hub.models.CausalLM.from_preset(str(tmp_path / "hub"))
    assert type(lm.sampler).__name__ == type(loaded.sampler).__name__
    lm.to_keras_hub(tmp_path / "back")
    back = keras_hub.models.CausalLM.from_preset(str(tmp_path / "back"))
    for model in (lm, hub, back):
        model.compile(sampler="greedy")
    assert type(back.preprocessor.tokenizer) is type(hub.preprocessor.tokenizer)
    prompt, length = "the quick brown", 16
    ids = lm.tokenizer.encode(prompt)
    # Random weights rarely make text: compare the ids, all `length` of them.
    got = lm.generate([ids], max_new_tokens=length - len(ids), min_new_tokens=99)[0]
    for model in (hub, back):
        packed = model.preprocessor.generate_preprocess([prompt], length)
        assert hub_ids(model.preprocessor, prompt) == ids
        model.preprocessor = None
        out = model.generate(
            {k: keras.ops.convert_to_numpy(v) for k, v in packed.items()},
            stop_token_ids=None,
        )
        assert list(keras.ops.convert_to_numpy(out["token_ids"])[0]) == got


@pytest.mark.only_backend("jax")
def test_keras_file_and_dtype(tmp_path):
    hub = task("qwen3")
    hub.save(tmp_path / "model.keras")
    lm = CausalLM.from_keras_hub(tmp_path / "model.keras")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(lm(IDS)), hub_logits(hub), atol=1e-4, rtol=0
    )
    assert lm.tokenizer is None
    half = CausalLM.from_keras_hub(hub, dtype="bfloat16")
    assert keras.backend.standardize_dtype(half.backbone.variable_dtype) == "bfloat16"
    hub_half = keras_hub.models.Qwen3Backbone(
        **HEADS, head_dim=8, **SMALL, dtype="bfloat16"
    )
    assert CausalLM.from_keras_hub(hub_half).backbone.variable_dtype == "bfloat16"


@pytest.mark.only_backend("jax")
def test_sampler_comes_along_both_ways():
    hub = task("llama")
    hub.compile(sampler=keras_hub.samplers.TopKSampler(k=7, temperature=0.5, seed=3))
    lm = CausalLM.from_keras_hub(hub)
    assert isinstance(lm.sampler, samplers.TopKSampler)
    assert (lm.sampler.k, lm.sampler.temperature, lm.sampler.seed) == (7, 0.5, 3)
    lm.compile(sampler=samplers.TopPSampler(p=0.8, temperature=0.7))
    back = lm.to_keras_hub()
    assert isinstance(back.sampler, keras_hub.samplers.TopPSampler)
    assert (back.sampler.p, back.sampler.temperature) == (0.8, 0.7)
    lm.compile(sampler=samplers.MinPSampler(p=0.1))
    with pytest.warns(UserWarning, match="MinPSampler"):
        lm.to_keras_hub()
    # Not compiled: the sampler `generate` takes from the generation config.
    lm.compile(sampler=None)
    assert isinstance(lm.to_keras_hub().sampler, keras_hub.samplers.GreedySampler)
    lm.generation_config = lm.generation_config.replace(
        do_sample=True, top_k=9, temperature=0.6
    )
    sampler = lm.to_keras_hub().sampler
    assert isinstance(sampler, keras_hub.samplers.TopKSampler)
    assert (sampler.k, sampler.temperature) == (9, 0.6)


@pytest.mark.only_backend("jax")
def test_bad_input_is_named(tmp_path):
    with pytest.raises(TypeError, match="keras-hub `CausalLM`"):
        CausalLM.from_keras_hub(42)
    with pytest.raises(FileNotFoundError, match="never downloads"):
        CausalLM.from_keras_hub(tmp_path / "missing")
    opt = keras_hub.models.OPTBackbone(
        vocabulary_size=32,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=16,
    )
    with pytest.raises(ValueError, match="OPTBackbone"):
        CausalLM.from_keras_hub(opt)
    quantized = task("qwen3")
    quantized.quantize("int8")
    with pytest.raises(ValueError, match="quantized"):
        CausalLM.from_keras_hub(quantized)
    with pytest.raises(ValueError, match="not a GemmaCausalLM"):
        from keras_gen.models.gemma.gemma_causal_lm import GemmaCausalLM

        GemmaCausalLM.from_keras_hub(task("phi3"))
    # keras-gen's Llama options that keras-hub's LlamaBackbone lacks.
    lm = CausalLM.from_keras_hub(task("llama"))
    config = lm.backbone.get_config()
    config["query_key_value_bias"] = config["attention_output_bias"] = True
    biased = type(lm)(type(lm.backbone).from_config(config))
    with pytest.raises(ValueError, match="attention_bias"):
        biased.to_keras_hub()
