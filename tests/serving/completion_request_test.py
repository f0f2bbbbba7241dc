import types

import pytest

from keras_gen import GenerationConfig
from keras_gen import processors
from keras_gen import samplers
from keras_gen.serving import APIError
from keras_gen.serving import ChatTemplate
from keras_gen.serving import CompletionRequest
from tests.text_models import tiny_tokenizer

pytest.importorskip("jinja2")


@pytest.fixture(scope="module")
def served():
    tokenizer = tiny_tokenizer()
    return types.SimpleNamespace(
        name="tiny",
        tokenizer=tokenizer,
        vocabulary_size=tokenizer.vocabulary_size,
        context_length=64,
        chat_template=ChatTemplate(),
        max_batch_size=4,
        defaults=GenerationConfig(temperature=1.0),
        end_token_ids=[0],
    )


def read(served, kind="completion", **fields):
    body = {"model": "tiny", "prompt": "The for", **fields}
    if kind == "chat":
        body.pop("prompt")
        body.setdefault("messages", [{"role": "user", "content": "Hi"}])
    return CompletionRequest(body, kind, served)


def test_defaults(served):
    request = read(served)
    assert request.prompts == [served.tokenizer.encode("The for")]
    assert request.max_tokens == 16 and request.n == 1 and not request.stream
    assert request.logprobs is None
    # OpenAI's default: sampling at temperature 1, with every filter and
    # penalty in the program (neutral), so that all requests share it.
    sampler = request.sampler
    assert isinstance(sampler, samplers.RandomSampler) and sampler.temperature == 1
    assert (sampler.top_k, sampler.top_p, sampler.min_p) == (0, 1.0, 0.0)
    assert [type(p) for p in request.processors] == [
        processors.RepetitionPenalty,
        processors.FrequencyPenalty,
        processors.PresencePenalty,
    ]


def test_chat_prompt_and_default_length(served):
    request = read(served, "chat")
    prompt = served.tokenizer.encode("User: Hi\nAssistant:")
    assert request.prompts == [prompt]
    assert request.max_tokens == served.context_length - len(prompt)
    assert "\nUser:" in request.stop


def test_sampler_choice(served):
    assert isinstance(
        read(served, temperature=0, top_k=3).sampler, samplers.GreedySampler
    )
    # top_k, top_p and min_p all apply together (vLLM's order).
    sampler = read(served, temperature=0.5, top_p=0.8, top_k=3, min_p=0.1).sampler
    assert isinstance(sampler, samplers.RandomSampler)
    assert (sampler.temperature, sampler.top_k, sampler.top_p, sampler.min_p) == (
        0.5, 3, 0.8, 0.1
    )
    assert read(served, top_k=-1).sampler.top_k == 0
    structures = {
        read(served, **fields).sampler.get_structure()
        for fields in ({}, {"top_k": 5}, {"top_p": 0.5, "min_p": 0.2}, {"temperature": 2})
    }
    assert len(structures) == 1


def test_penalties_and_biases_become_processors(served):
    request = read(
        served,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        repetition_penalty=1.3,
        logit_bias={"5": -100, "7": 2.5},
        min_tokens=3,
    )
    assert [type(p) for p in request.processors] == [
        processors.MinLength,
        processors.LogitBias,
        processors.RepetitionPenalty,
        processors.FrequencyPenalty,
        processors.PresencePenalty,
    ]
    assert request.processors[1].bias == {5: -100.0, 7: 2.5}
    neutral = read(served).processors
    assert [p.get_structure() for p in neutral] == [
        p.get_structure() for p in request.processors[2:]
    ]


def test_stop_token_ids_and_ignore_eos(served):
    assert read(served).config.stop_token_ids is None  # the model's end tokens
    assert read(served, stop_token_ids=[4]).config.stop_token_ids == [0, 4]
    assert read(served, ignore_eos=True).config.stop_token_ids == []
    assert read(served, ignore_eos=True, stop_token_ids=[4]).config.stop_token_ids == [4]


def test_batch_keys(served):
    assert read(served).batch_key != read(served, temperature=0).batch_key
    greedy = read(served, temperature=0, prompt="A class").batch_key
    assert greedy == read(served, temperature=0, seed=3).batch_key
    assert greedy != read(served, temperature=0, max_tokens=5).batch_key
    # A seeded sampled request runs alone, so its text depends on the seed only.
    assert read(served, seed=1).batch_key != read(served, seed=1).batch_key


def test_prompt_forms(served):
    assert read(served, prompt=["a", "b"], n=2).rows == [
        served.tokenizer.encode("a"),
        served.tokenizer.encode("a"),
        served.tokenizer.encode("b"),
        served.tokenizer.encode("b"),
    ]
    assert read(served, prompt=[1, 2, 3]).prompts == [[1, 2, 3]]
    assert read(served, prompt=[[1], [2, 3]]).prompts == [[1], [2, 3]]


@pytest.mark.parametrize(
    "fields, param, status",
    [
        ({"model": "other"}, "model", 404),
        ({"prompt": None}, "prompt", 400),
        ({"prompt": ""}, "prompt", 400),
        ({"prompt": [1, "a"]}, "prompt", 400),
        ({"prompt": [10**6]}, "prompt", 400),
        ({"max_tokens": 0}, "max_tokens", 400),
        ({"max_tokens": 1.5}, "max_tokens", 400),
        ({"max_tokens": 64}, "max_tokens", 400),
        ({"temperature": "1"}, "temperature", 400),
        ({"top_p": 0}, "top_p", 400),
        ({"n": 5}, "n", 400),
        ({"prompt": ["a", "b", "c"], "n": 2}, "n", 400),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", 400),
        ({"stop": 3}, "stop", 400),
        ({"logprobs": 6}, "logprobs", 400),
        ({"stream": "yes"}, "stream", 400),
        ({"seed": 1.5}, "seed", 400),
        ({"presence_penalty": 3}, "presence_penalty", 400),
        ({"repetition_penalty": 0}, "repetition_penalty", 400),
        ({"repetition_penalty": 1e-45}, "repetition_penalty", 400),
        ({"frequency_penalty": -3e38}, "frequency_penalty", 400),
        ({"temperature": -1}, "temperature", 400),
        ({"temperature": float("nan")}, "temperature", 400),
        ({"temperature": float("inf")}, "temperature", 400),
        ({"top_k": -2}, "top_k", 400),
        ({"top_k": 2.5}, "top_k", 400),
        ({"min_p": 1.5}, "min_p", 400),
        ({"min_tokens": -1}, "min_tokens", 400),
        ({"logit_bias": {"5": 101}}, "logit_bias", 400),
        ({"logit_bias": {"5": float("nan")}}, "logit_bias", 400),
        ({"logit_bias": {"x": 1}}, "logit_bias", 400),
        ({"logit_bias": {"100000": 1}}, "logit_bias", 400),
        ({"stop_token_ids": ["a"]}, "stop_token_ids", 400),
    ],
)
def test_bad_fields(served, fields, param, status):
    with pytest.raises(APIError) as error:
        read(served, **fields)
    assert error.value.param == param and error.value.status == status


def test_bad_chat_fields(served):
    with pytest.raises(APIError, match="top_logprobs"):
        read(served, "chat", top_logprobs=2)
    assert read(served, "chat", logprobs=True, top_logprobs=2).logprobs == 2
    with pytest.raises(APIError) as error:
        read(served, "chat", messages=[{"role": "user", "content": 5}])
    assert error.value.param == "messages[0]"
