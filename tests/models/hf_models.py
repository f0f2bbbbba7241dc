"""Tiny random Hugging Face model folders, built locally for tests.

Each folder is what `transformers`' `save_pretrained` writes, plus a small
BPE tokenizer trained here with `tokenizers`. Weights are scaled up from
transformers' tiny initialisation so that greedy decoding is decided by
clear margins, not float noise.
"""

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a cat sat on the mat and the dog sat on the log",
    "hello world this is a tiny language model",
    "we train a small tokenizer for the tests",
    "text goes in and text comes out",
] * 4
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]
UNK, BOS, EOS, PAD = range(4)
VOCABULARY_SIZE = 64
# A second stop token: generation configs may list several end tokens.
EXTRA_EOS = 9

KINDS = ("gpt2", "llama", "qwen2", "mistral")
# The decoder families beyond Llama, each with a config that exercises its
# quirks: windows shorter than the prompts, soft-caps that bind, grouped
# queries, a head size apart from hidden / heads, experts.
DECODER_KINDS = (
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3",
    "phi3",
    "olmo2",
    "mixtral",
    "smollm3",
)
# RoPE scalings and partial rotation, tested past the trained length.
ROPE_KINDS = ("qwen3_yarn", "llama_dynamic", "phi3_partial")


def train_tokenizer(add_bos=True):
    """A sentencepiece-style BPE tokenizer with `VOCABULARY_SIZE` tokens."""
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
    tokenizer.decoder = tokenizers.decoders.Metaspace()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=VOCABULARY_SIZE, special_tokens=SPECIAL_TOKENS
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    if add_bos:
        tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", BOS)]
        )
    assert tokenizer.get_vocab_size() == VOCABULARY_SIZE
    return tokenizer


def _config(kind):
    ids = dict(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
    if kind == "gpt2":
        return transformers.GPT2Config(
            vocab_size=VOCABULARY_SIZE,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=128,
            **ids,
        )
    common = dict(
        vocab_size=VOCABULARY_SIZE,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        **ids,
    )
    if kind == "llama":
        # Grouped-query attention, untied output, Llama 3 rope scaling.
        return transformers.LlamaConfig(
            **common,
            tie_word_embeddings=False,
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        )
    if kind == "qwen2":
        # Attention bias, tied output, a sliding window on the second layer.
        return transformers.Qwen2Config(
            **common,
            tie_word_embeddings=True,
            use_sliding_window=True,
            sliding_window=4,
            max_window_layers=1,
        )
    if kind == "mistral":
        return transformers.MistralConfig(
            **common, tie_word_embeddings=False, sliding_window=4
        )
    return _decoder_config(kind, common)


def _decoder_config(kind, common):
    if kind == "qwen3":
        # Tied, a head size of 16 (hidden / heads is 8), a window on layer 1.
        return transformers.Qwen3Config(
            **common,
            head_dim=16,
            tie_word_embeddings=True,
            use_sliding_window=True,
            sliding_window=4,
            max_window_layers=1,
        )
    if kind == "qwen3_moe":
        # 4 experts, 2 per token, unnormalized weights; layer 1 is dense.
        return transformers.Qwen3MoeConfig(
            **common,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            norm_topk_prob=False,
            mlp_only_layers=[1],
        )
    if kind == "gemma":
        return transformers.GemmaConfig(**common, head_dim=8)
    if kind == "gemma2":
        # Soft-caps small enough to bind; a window shorter than the prompts
        # on layer 0; a query scalar apart from head_dim.
        return transformers.Gemma2Config(
            **common,
            head_dim=8,
            sliding_window=4,
            query_pre_attn_scalar=16,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=5.0,
        )
    if kind == "gemma3":
        # Two rope bases, the global one scaled; windowed layer 0.
        return transformers.Gemma3TextConfig(
            **common,
            head_dim=8,
            sliding_window=4,
            query_pre_attn_scalar=16,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={
                "full_attention": {
                    "rope_type": "linear",
                    "factor": 2.0,
                    "rope_theta": 1e6,
                },
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            },
        )
    if kind == "phi3":
        # LongRoPE past 16 positions: generation crosses into the long factors.
        return transformers.Phi3Config(
            **common,
            original_max_position_embeddings=16,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 1e4,
                "short_factor": [1.0, 1.5, 2.0, 3.0],
                "long_factor": [1.0, 2.0, 4.0, 8.0],
                "original_max_position_embeddings": 16,
            },
        )
    if kind == "qwen3_yarn":
        # YaRN from 16 trained positions to 64.
        return transformers.Qwen3Config(
            **{**common, "max_position_embeddings": 64},
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 1e4,
                "factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        )
    if kind == "llama_dynamic":
        # Dynamic NTK past 16 positions.
        return transformers.LlamaConfig(
            **{**common, "max_position_embeddings": 16},
            rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0},
        )
    if kind == "phi3_partial":
        # Half of each 8-wide head rotates (Phi-4-mini: 0.75), with LongRoPE
        # past 16 positions.
        return transformers.Phi3Config(
            **common,
            original_max_position_embeddings=16,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 1e4,
                "short_factor": [1.0, 2.0],
                "long_factor": [1.5, 4.0],
                "original_max_position_embeddings": 16,
                "partial_rotary_factor": 0.5,
            },
        )
    if kind == "olmo2":
        return transformers.Olmo2Config(**common)
    if kind == "smollm3":
        # Layer 1 without RoPE (every 2nd), and windowed: transformers
        # windows only NoPE layers.
        return transformers.SmolLM3Config(
            **common,
            no_rope_layer_interval=2,
            use_sliding_window=True,
            sliding_window=4,
        )
    if kind == "mixtral":
        return transformers.MixtralConfig(
            **common, num_local_experts=4, num_experts_per_tok=2, sliding_window=4
        )
    raise ValueError(kind)


def scale_weights(model, seed=0):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if parameter.ndim == 1 and ("norm" in name or "ln_" in name):
                if name.endswith("weight"):
                    parameter.copy_(1.0 + 0.1 * noise)
                else:
                    parameter.copy_(0.1 * noise)
            else:
                parameter.copy_(0.3 * noise)
    return model


def make_model(kind, seed=0):
    model = transformers.AutoModelForCausalLM.from_config(_config(kind))
    scale_weights(model, seed).eval()
    model.generation_config.eos_token_id = [EOS, EXTRA_EOS]
    model.generation_config.pad_token_id = PAD
    return model


def save_tokenizer(folder, add_bos=True):
    train_tokenizer(add_bos).save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "unk_token": "<unk>",
            },
            f,
        )


def save_model_folder(kind, folder, seed=0, **save_kwargs):
    """Save a tiny `kind` model and a tokenizer to `folder`; return the model."""
    model = make_model(kind, seed)
    model.save_pretrained(folder, **save_kwargs)
    save_tokenizer(folder, add_bos=kind != "gpt2")
    return model


def logits(model, token_ids):
    with torch.no_grad():
        output = model(torch.as_tensor(np.asarray(token_ids)))
    return output.logits.numpy()


def greedy(model, prompts, max_new_tokens=20, stop_token_ids=(EOS, EXTRA_EOS)):
    """transformers' greedy tokens for ragged prompts, left-padded there.

    Each row is cut after its first generated stop token, as keras-gen cuts.
    """
    width = max(map(len, prompts))
    token_ids = np.full((len(prompts), width), PAD, "int64")
    mask = np.zeros((len(prompts), width), "int64")
    for i, prompt in enumerate(prompts):
        token_ids[i, width - len(prompt) :] = prompt
        mask[i, width - len(prompt) :] = 1
    with torch.no_grad():
        outputs = model.generate(
            input_ids=torch.as_tensor(token_ids),
            attention_mask=torch.as_tensor(mask),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=PAD,
        ).numpy()
    rows = []
    for prompt, row in zip(prompts, outputs):
        new = [int(t) for t in row[width:]]
        for position, token in enumerate(new):
            if token in stop_token_ids:
                new = new[: position + 1]
                break
        rows.append(list(prompt) + new)
    return rows


# Prompts of three lengths: every row starts with the tokenizer's <s>.
RAGGED_PROMPTS = [[BOS, 5, 9, 12, 30], [BOS, 7], [BOS, 20, 21, 22, 23, 24, 25, 26]]
FULL_BATCH = [[BOS, 5, 9, 12, 30, 40, 22, 7, 13], [BOS, 3, 3, 50, 60, 2, 8, 11, 63]]


@pytest.fixture(scope="module")
def model_folder(request, tmp_path_factory):
    """`(transformers model, folder)` for the `kind` the test is parametrized with."""
    kind = request.param
    folder = tmp_path_factory.mktemp(kind)
    return save_model_folder(kind, str(folder)), str(folder)
