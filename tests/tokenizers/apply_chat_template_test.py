"""`Tokenizer.apply_chat_template` gives transformers' text and ids."""

import pytest

from keras_gen.tokenizers import Tokenizer
from tests.tokenizers import family_templates

transformers = pytest.importorskip("transformers")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": 'The weather in a city <today> & "now"',
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
SYSTEM = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
]
TURNS = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "What is the weather in Paris today?"},
]
TOOL_TURNS = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,  # as OpenAI's clients send it: dropped
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_0", "content": "sunny, 24 C"},
]
CASES = {
    "system": (SYSTEM, None, {}),
    "turns": (TURNS, None, {}),
    "tools": (TOOL_TURNS, [WEATHER], {}),
    "no thinking": (SYSTEM, None, {"enable_thinking": False}),
}
# Gemma refuses a system message and a tool role (its template raises).
REFUSED = {("gemma", "system"), ("gemma", "tools"), ("gemma", "no thinking")}


@pytest.fixture(scope="module", params=sorted(family_templates.FAMILIES))
def tokenizers_pair(request, tmp_path_factory):
    path = family_templates.folder(
        request.param, tmp_path_factory.mktemp(request.param)
    )
    ours = Tokenizer.from_pretrained(path)
    theirs = transformers.AutoTokenizer.from_pretrained(path)
    return request.param, ours, theirs


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_text_and_ids_equal_transformers(tokenizers_pair, case, add_generation_prompt):
    kind, ours, theirs = tokenizers_pair
    messages, tools, keywords = CASES[case]
    arguments = dict(
        add_generation_prompt=add_generation_prompt, tools=tools, **keywords
    )
    if (kind, case) in REFUSED:
        with pytest.raises(ValueError, match="The chat template failed"):
            ours.apply_chat_template(messages, **arguments)
        return
    text = theirs.apply_chat_template(messages, tokenize=False, **arguments)
    assert ours.apply_chat_template(messages, tokenize=False, **arguments) == text
    ids = theirs.apply_chat_template(messages, return_dict=False, **arguments)
    assert ours.apply_chat_template(messages, **arguments) == list(ids)
    # The template writes the BOS; encoding adds none (no doubled BOS).
    if ours.bos_token_id is not None:
        assert ids[1] != ours.bos_token_id


@pytest.mark.only_backend("jax")
def test_a_batch_of_conversations(tokenizers_pair):
    kind, ours, theirs = tokenizers_pair
    batch = [TURNS, TURNS[:1]]
    assert ours.apply_chat_template(batch) == [
        list(ids)
        for ids in theirs.apply_chat_template(
            batch, add_generation_prompt=True, return_dict=False
        )
    ]


@pytest.mark.only_backend("jax")
def test_bad_messages_and_tools_are_named(tokenizers_pair):
    _, ours, _ = tokenizers_pair
    with pytest.raises(
        TypeError, match=r"`messages`\[0\] must be a dict with a 'role'"
    ):
        ours.apply_chat_template([{"content": "no role"}])
    with pytest.raises(TypeError, match="`messages` must be a non-empty list"):
        ours.apply_chat_template([])
    with pytest.raises(TypeError, match="`tools` must be a list of JSON schema dicts"):
        ours.apply_chat_template(TURNS, tools=[print])
    with pytest.raises(TypeError, match="must hold JSON values"):
        ours.apply_chat_template([{"role": "user", "content": object()}])
