"""`CausalLM.generate` and `stream` on conversations."""

import pytest

import keras_gen
from keras_gen.streaming import GenerationOutput
from keras_gen.tokenizers import Tokenizer
from tests.tokenizers import family_templates

QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
TURNS = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "What is the weather today?"},
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def chat_lm(kind, folder, max_sequence_length=256):
    tokenizer = Tokenizer.from_pretrained(family_templates.folder(kind, folder))
    backbone = keras_gen.models.GPT2Backbone(
        vocabulary_size=tokenizer.vocabulary_size,
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=max_sequence_length,
    )
    return keras_gen.models.GPT2CausalLM(backbone, tokenizer=tokenizer)


@pytest.fixture(scope="module")
def llama3_lm(tmp_path_factory):
    return chat_lm("llama3", tmp_path_factory.mktemp("llama3"))


def test_a_conversation_answers_with_the_reply(llama3_lm):
    lm = llama3_lm
    ids = lm.tokenizer.apply_chat_template(QUESTION)
    assert ids.count(lm.tokenizer.bos_token_id) == 1  # the template's only
    reply = lm.generate(QUESTION, max_new_tokens=8, stop_token_ids=None)
    record = lm.generate(ids, max_new_tokens=8, stop_token_ids=None, return_dict=True)
    assert isinstance(reply, str)
    assert reply == record.text[0]
    same = lm.generate(
        QUESTION, max_new_tokens=8, stop_token_ids=None, return_dict=True
    )
    assert same.sequences[0] == record.sequences[0]  # the prompt is the template's


def test_a_batch_of_conversations_and_its_stream(llama3_lm):
    lm = llama3_lm
    batch = [QUESTION, TURNS]
    options = dict(max_new_tokens=8, stop_token_ids=None)
    replies = lm.generate(batch, **options)  # greedy: each row as alone
    assert replies == [lm.generate(QUESTION, **options), lm.generate(TURNS, **options)]
    sampled = dict(options, do_sample=True, seed=3)
    joined = GenerationOutput.join(list(lm.stream(batch, **sampled)))
    assert joined.text == lm.generate(batch, **sampled)
    two = lm.generate(batch, num_return_sequences=2, **sampled)
    assert [len(answers) for answers in two] == [2, 2]
    assert all(isinstance(answer, str) for answers in two for answer in answers)


def test_tools_and_template_keywords_reach_the_template(tmp_path):
    lm = chat_lm("qwen", tmp_path)
    for arguments in (
        # "none": the calls are not constrained (that needs a stop token).
        {"tools": [WEATHER], "tool_choice": "none"},
        {"chat_template_kwargs": {"enable_thinking": False}},
    ):
        record = lm.generate(
            QUESTION,
            max_new_tokens=2,
            stop_token_ids=None,
            return_dict=True,
            **arguments,
        )
        keywords = arguments.get("chat_template_kwargs", {})
        ids = lm.tokenizer.apply_chat_template(
            QUESTION, tools=arguments.get("tools"), **keywords
        )
        assert record.sequences[0][: len(ids)] == ids
        assert ids != lm.tokenizer.apply_chat_template(QUESTION)


def test_the_default_template_stops_at_the_next_turn():
    lm = keras_gen.CausalLM.from_preset("demo")
    reply = lm.generate(QUESTION, max_new_tokens=64, seed=0)
    assert "\nUser:" not in reply
    assert (
        lm.generate(QUESTION, max_new_tokens=64, seed=0, stop_strings=["the"])
        == reply.split("the")[0]
    )


def test_chat_arguments_need_a_conversation(llama3_lm):
    with pytest.raises(ValueError, match="`tools` apply to chat `inputs`"):
        llama3_lm.generate("Hi", max_new_tokens=2, tools=[WEATHER])
    with pytest.raises(
        ValueError, match="`tools` and `enable_thinking` apply to chat `inputs`"
    ):
        llama3_lm.generate(
            [1, 2],
            max_new_tokens=2,
            tools=[WEATHER],
            chat_template_kwargs={"enable_thinking": False},
        )
    no_tokenizer = keras_gen.models.GPT2CausalLM(llama3_lm.backbone)
    with pytest.raises(ValueError, match="need a tokenizer with a chat template"):
        no_tokenizer.generate(QUESTION, max_new_tokens=2)


def test_a_forced_tool_call_parses_and_validates(tmp_path):
    from keras_gen.streaming.tool_call_parser import ToolCallParser

    jsonschema = pytest.importorskip("jsonschema")
    lm = chat_lm("qwen", tmp_path, max_sequence_length=512)
    parser = ToolCallParser.for_template(lm.tokenizer.chat_template.source)
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 6}},
        "required": ["city"],
    }
    tools = [{"type": "function", "function": {"name": "w", "parameters": schema}}]
    options = dict(tools=tools, max_new_tokens=80, do_sample=True, temperature=1.0)
    options.update(chat_template_kwargs={"enable_thinking": False})
    for seed in range(3):  # one call (`parallel_tool_calls=False`)
        record = lm.generate(
            QUESTION, tool_choice="required", seed=seed, parallel_tool_calls=False,
            return_dict=True, **options,
        )  # fmt: skip
        content, (call,) = parser.parse(record.text[0])
        assert content is None and call["name"] == "w"
        jsonschema.validate(call["arguments"], schema)
        assert record.messages == [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": call}],
            }
        ]
    named = {"type": "function", "function": {"name": "w"}}
    chunks = list(lm.stream(QUESTION, tool_choice=named, seed=0, **options))
    assert parser.parse("".join(c.text[0] for c in chunks))[1]
    (message,) = GenerationOutput.join(chunks).messages
    assert message["tool_calls"] and message["tool_calls"][0]["function"]["name"] == "w"
    with pytest.raises(ValueError, match="names no tool of `tools`"):
        lm.generate(
            QUESTION,
            tool_choice={"type": "function", "function": {"name": "x"}},
            **options,
        )
    with pytest.raises(ValueError, match="give it or `response_format`, not both"):
        lm.generate(
            QUESTION, tool_choice="required", response_format={"regex": "a"}, **options
        )
    demo = keras_gen.CausalLM.from_preset("demo")
    with pytest.raises(ValueError, match="writes no tool calls that keras-gen reads"):
        demo.generate(QUESTION, tools=tools, tool_choice="required", max_new_tokens=4)
    with pytest.raises(TypeError, match="`chat_template_kwargs` must be a dict"):
        demo.generate(QUESTION, chat_template_kwargs=[1], max_new_tokens=4)


def test_the_reply_message_holds_reasoning_and_calls_apart(tmp_path):
    # The reply is scripted up to the call the model opens (the model is
    # random); the call's arguments are its own, held to the schema.
    from tests.script_processor import Script

    lm = chat_lm("qwen", tmp_path, max_sequence_length=512)
    opening = Script(
        lm.tokenizer.encode("<think>\nLet me see.</think>\n\nSure.\n<tool_call>")
    )
    tools = [{"type": "function", "function": {"name": "w", "parameters": {
        "type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
        "required": ["city"],
    }}}]  # fmt: skip
    record = lm.generate(
        QUESTION, tools=tools, processors=[opening], parallel_tool_calls=False,
        do_sample=True, seed=0, max_new_tokens=120, return_dict=True,
    )  # fmt: skip
    (message,) = record.messages
    (call,) = message.pop("tool_calls")
    assert call["function"]["name"] == "w"
    assert call["function"]["arguments"]["city"] in ("Paris", "Rome")
    assert message == {
        "role": "assistant",
        "reasoning_content": "Let me see.",
        "content": "Sure.\n",
    }
    # Not a conversation: no messages.
    assert lm.generate("Hi", max_new_tokens=2, return_dict=True).messages is None
