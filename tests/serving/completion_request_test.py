import types

import pytest

from keras_gen.serving import APIError
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
        max_batch_size=4,
        end_token_ids=[0],
        processors={},
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
    # Only what the request sets: the engine's defaults fill in the rest.
    assert request.config.to_dict() == {"max_new_tokens": 16}


def test_chat_prompt_and_default_length(served):
    request = read(served, "chat")
    prompt = served.tokenizer.encode("User: Hi\nAssistant:")
    assert request.prompts == [prompt]
    assert request.max_tokens == served.context_length - len(prompt)
    assert "\nUser:" in request.stop


def test_sampling_fields(served):
    config = read(served, temperature=0.5, top_p=0.8, top_k=3, min_p=0.1, seed=4).config
    assert (config.temperature, config.top_k, config.top_p, config.min_p) == (
        0.5,
        3,
        0.8,
        0.1,
    )
    assert config.seed == 4 and config.mode == "sample"
    assert read(served, temperature=0, top_k=3).config.mode == "greedy"
    assert read(served, top_k=-1).config.top_k == 0  # vLLM's "no top-k"


def test_penalties_biases_and_logprobs(served):
    config = read(
        served,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        repetition_penalty=1.3,
        logit_bias={"5": -100, "7": 2.5},
        min_tokens=3,
        logprobs=2,
    ).config
    assert (
        config.presence_penalty,
        config.frequency_penalty,
        config.repetition_penalty,
        config.min_new_tokens,
    ) == (0.5, -0.5, 1.3, 3)
    assert config.logit_bias == {5: -100.0, 7: 2.5}
    assert config.output_log_probs and config.top_logprobs == 2
    chat = read(served, "chat", logprobs=True, top_logprobs=4).config
    assert chat.output_log_probs and chat.top_logprobs == 4
    assert read(served, "chat", logprobs=True).config.top_logprobs is None


def test_stop_token_ids_and_ignore_eos(served):
    assert read(served).config.stop_token_ids is None  # the model's end tokens
    assert read(served, stop_token_ids=[4]).config.stop_token_ids == [0, 4]
    assert read(served, ignore_eos=True).config.stop_token_ids == []
    assert read(served, ignore_eos=True, stop_token_ids=[4]).config.stop_token_ids == [
        4
    ]


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
        ({"temperature": 1e300}, "temperature", 400),
        ({"use_beam_search": True, "n": 2}, "use_beam_search", 400),
        ({"use_beam_search": "yes"}, "use_beam_search", 400),
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
    assert error.value.param == "messages[0].content"
