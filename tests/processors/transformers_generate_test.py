"""Greedy generation with processors equals transformers' on the same GPT-2."""

import numpy as np
import pytest
import torch
import transformers

from keras_gen import processors as P
from keras_gen.models import GPT2Backbone
from keras_gen.models import GPT2CausalLM

HF_NAMES = {
    "wte/embeddings": "wte.weight",
    "wpe/embeddings": "wpe.weight",
    "ln_1/gamma": "ln_1.weight",
    "ln_1/beta": "ln_1.bias",
    "c_attn/kernel": "attn.c_attn.weight",
    "c_attn/bias": "attn.c_attn.bias",
    "c_proj/kernel": "attn.c_proj.weight",
    "c_proj/bias": "attn.c_proj.bias",
    "ln_2/gamma": "ln_2.weight",
    "ln_2/beta": "ln_2.bias",
    "c_fc/kernel": "mlp.c_fc.weight",
    "c_fc/bias": "mlp.c_fc.bias",
    "mlp_c_proj/kernel": "mlp.c_proj.weight",
    "mlp_c_proj/bias": "mlp.c_proj.bias",
    "ln_f/gamma": "ln_f.weight",
    "ln_f/beta": "ln_f.bias",
}


def copy_weights(hf_model, backbone):
    """HF GPT-2 weights into our backbone (Conv1D weights are (in, out))."""
    state = {k: v.numpy() for k, v in hf_model.transformer.state_dict().items()}
    for variable in backbone.weights:
        path = variable.path.split("/", 1)[1]  # drop "gpt2_backbone/"
        block, _, rest = path.partition("/")
        if block.startswith("h_"):
            name = f"h.{block[2:]}.{HF_NAMES[rest]}"
        else:
            name = HF_NAMES[path]
        variable.assign(state[name])


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=64,
        n_positions=64,
        n_embd=16,
        n_layer=2,
        n_head=2,
        n_inner=32,
        resid_pdrop=0,
        embd_pdrop=0,
        attn_pdrop=0,
    )
    hf_model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # larger weights: logits far apart, greedy is robust
        for parameter in hf_model.parameters():
            parameter.mul_(8.0)
    backbone = GPT2Backbone(
        vocabulary_size=64,
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=64,
    )
    copy_weights(hf_model, backbone)
    return hf_model, GPT2CausalLM(backbone)


def test_greedy_with_processors_matches_transformers(models):
    hf_model, lm = models
    prompt = [5, 9, 5, 9, 12]
    bad_words = [[7], [12, 30], [3, 4, 5]]
    with torch.no_grad():
        expected = hf_model.generate(
            torch.tensor([prompt]),
            max_new_tokens=20,
            do_sample=False,
            repetition_penalty=1.3,
            no_repeat_ngram_size=2,
            bad_words_ids=bad_words,
            pad_token_id=0,
            eos_token_id=None,
        )[0].tolist()
    ours = lm.generate(
        prompt,
        max_new_tokens=20,
        stop_token_ids=None,
        processors=[
            P.RepetitionPenalty(1.3),
            P.NoRepeatNGram(2),
            P.BadWords(bad_words),
        ],
    )
    assert ours == expected
    plain = lm.generate(prompt, max_new_tokens=20, stop_token_ids=None)
    assert plain != ours  # the processors changed something


def test_logits_match_transformers(models):
    hf_model, lm = models
    tokens = np.asarray([[5, 9, 5, 9, 12]])
    with torch.no_grad():
        expected = hf_model(torch.tensor(tokens)).logits.numpy()
    from keras import ops

    np.testing.assert_allclose(
        ops.convert_to_numpy(lm(tokens)), expected, rtol=1e-3, atol=1e-3
    )
