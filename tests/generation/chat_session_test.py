import pytest

import keras_gen
from keras_gen.generation.chat_session import ChatSession
from tests.markers import ON_TORCH_ONLY

OPTIONS = dict(max_new_tokens=12, seed=0)


@pytest.fixture(scope="module")
def lm():
    return keras_gen.CausalLM.from_preset("demo")


@ON_TORCH_ONLY
def test_each_reply_answers_the_whole_history(lm):
    session = ChatSession(lm, system="Be brief.", **OPTIONS)
    first = session.send("What is a class?")
    second = session.send("And a function?")
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is a class?"},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "And a function?"},
    ]
    assert first == lm.generate(history[:2], **OPTIONS)
    assert second == lm.generate(history, **OPTIONS)
    assert session.messages == [*history[1:], {"role": "assistant", "content": second}]
    session.clear()
    assert session.messages == []
    assert session.send("What is a class?") == first


def test_a_stream_left_early_keeps_what_was_said(lm):
    session = ChatSession(lm, max_new_tokens=40, seed=0)
    stream = session.stream("What is a class?")
    said = next(stream).text[0] + next(stream).text[0]
    stream.close()
    assert session.messages[-1] == {"role": "assistant", "content": said}


def test_old_turns_make_room_for_the_reply(lm):
    session = ChatSession(lm, max_new_tokens=60, seed=0)
    for _ in range(8):
        session.send("What is a class? " * 6)
    assert session.dropped > 0 and session.dropped % 2 == 0
    prompt = lm.tokenizer.apply_chat_template(session.messages[:-1])
    assert len(prompt) + 60 <= lm.backbone.max_sequence_length
    # Without a length option a reply takes what the context leaves (<= 256).
    unbounded = ChatSession(lm, seed=0)
    unbounded.send("What is a class?")
    assert len(lm.tokenizer.encode(unbounded.messages[-1]["content"])) <= 256


def test_a_message_too_long_leaves_the_history_alone(lm):
    session = ChatSession(lm, **OPTIONS)
    session.send("Hi")
    before = list(session.messages)
    with pytest.raises(ValueError, match="leaving no room for a reply"):
        session.send("word " * 300)
    assert session.messages == before and session.dropped == 0


def test_bad_arguments(lm):
    with pytest.raises(ValueError, match="needs a model with a tokenizer"):
        ChatSession(keras_gen.models.GPT2CausalLM(lm.backbone))
    with pytest.raises(TypeError, match="`system` must be a string"):
        ChatSession(lm, system=["Be brief."])
    with pytest.raises(TypeError, match="Unknown keyword arguments"):
        ChatSession(lm, temprature=0.5)
    with pytest.raises(ValueError, match="must be non-empty text"):
        ChatSession(lm).send("")


def test_a_thinking_template_keeps_the_reasoning_apart(tmp_path):
    from tests.models.causal_lm_chat_test import chat_lm

    session = ChatSession(chat_lm("qwen", tmp_path), max_new_tokens=6, seed=0)
    reply = session.send("Hi")
    message = session.messages[-1]
    assert set(message) == {"role", "reasoning_content", "content"}
    if not reply.startswith("<think>"):  # the (random) reply did not think
        assert message["reasoning_content"] == "" and message["content"] == reply
    session.send("And then?")  # the history with the message renders
    assert len(session.messages) == 4
