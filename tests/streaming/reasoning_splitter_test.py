import pytest

from keras_gen.streaming.reasoning_splitter import ReasoningSplitter
from keras_gen.streaming.reasoning_splitter import reply_thinking

CASES = [
    # (reply, thinking in the prompt, reasoning, content)
    ("<think>\nfirst, 2 + 2</think>\n\nIt is 4.", False, "first, 2 + 2", "It is 4."),
    ("I opened it.\n</think>\n\nDone.", True, "I opened it.\n", "Done."),
    (
        "No thinking here: <think> is text.",
        False,
        "",
        "No thinking here: <think> is text.",
    ),
    (
        "<think>\nstill thinking when the length ran out <",
        False,
        "still thinking when the length ran out <",
        "",
    ),
    ("<think></think>Fast.", False, "", "Fast."),
    ("<thin", False, "", "<thin"),  # ended before the tag could be told
    ("a < b and </thinker>", True, "a < b and </thinker>", ""),
]


def split(reply, thinking, sizes):
    splitter = ReasoningSplitter(thinking)
    reasoning = content = ""
    at = 0
    for size in sizes:
        r, c = splitter.feed(reply[at : at + size])
        reasoning, content, at = reasoning + r, content + c, at + size
    r, c = splitter.finish()
    return reasoning + r, content + c


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize("reply, thinking, reasoning, content", CASES)
def test_any_chunking_splits_alike(reply, thinking, reasoning, content):
    assert split(reply, thinking, [len(reply)]) == (reasoning, content)
    for size in (1, 2, 3, 5, 7):
        assert split(reply, thinking, [size] * len(reply)) == (reasoning, content)
    for cut in range(len(reply) + 1):
        assert split(reply, thinking, [cut, len(reply)]) == (reasoning, content)


@pytest.mark.only_backend("jax")
def test_the_prompt_says_whether_the_reply_starts_thinking():
    template = "{% if add_generation_prompt %}<think>\n{% endif %}... </think>"
    assert reply_thinking("no tags", "x") is None
    assert reply_thinking(template, "Q<think>\n") is True
    assert reply_thinking(template, "Q") is False  # the reply may open them
    closed = "Q<think>\n\n</think>\n\n"  # Qwen3 with enable_thinking=False
    assert reply_thinking(template, closed) is None
