import numpy as np
import pytest

from keras_gen.training import CausalLMPreprocessor
from keras_gen.training.causal_lm_preprocessor import is_text
from tests.text_models import TEXT
from tests.text_models import tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _check(arrays, rows):
    """`arrays` hold `rows`: `(tokens, learnt)` per example, shifted by one
    and padded on the right."""
    inputs, labels, weights = arrays
    width = labels.shape[1]
    for i, (tokens, learnt) in enumerate(rows):
        n = len(tokens)
        assert inputs["token_ids"][i, : n - 1].tolist() == tokens[:-1]
        assert inputs["padding_mask"][i].tolist() == [1] * min(n, width) + [0] * (
            width - n
        )
        assert labels[i, : n - 1].tolist() == tokens[1:]
        assert weights[i].tolist() == learnt[1:] + [0.0] * (width - n + 1)


def test_strings_learn_every_token_and_the_end(tokenizer):
    arrays = CausalLMPreprocessor(tokenizer, sequence_length=64)(TEXT[:2])
    end = tokenizer.eos_token_id
    rows = [tokenizer.encode(text) + [end] for text in TEXT[:2]]
    _check(arrays, [(row, [1.0] * len(row)) for row in rows])
    # Padded to the longest row, a multiple of 8.
    inputs, labels, weights = arrays
    assert labels.shape[1] % 8 == 0 and labels.shape[1] >= max(map(len, rows)) - 1
    assert inputs["token_ids"].shape == labels.shape == weights.shape
    assert weights.dtype == np.float32


def test_pairs_mask_the_prompt_unless_asked_not_to(tokenizer):
    pairs = [("The for statement", " is used to iterate."), ("A class", " definition.")]
    arrays = CausalLMPreprocessor(tokenizer)(pairs)
    rows = []
    for prompt, completion in pairs:
        prompt_ids = tokenizer.encode(prompt)
        completion_ids = tokenizer.encode(completion, add_special_tokens=False)
        completion_ids.append(tokenizer.eos_token_id)
        rows.append(
            (
                prompt_ids + completion_ids,
                [0.0] * len(prompt_ids) + [1.0] * len(completion_ids),
            )
        )
    _check(arrays, rows)
    columns = {"prompts": [p for p, _ in pairs], "responses": [c for _, c in pairs]}
    np.testing.assert_array_equal(
        CausalLMPreprocessor(tokenizer)(columns)[2], arrays[2]
    )
    unmasked = CausalLMPreprocessor(tokenizer, mask_prompt=False)(pairs)
    _check(unmasked, [(tokens, [1.0] * len(tokens)) for tokens, _ in rows])


def test_conversations_learn_the_replies_only(tokenizer):
    conversation = [
        {"role": "user", "content": "What is a class?"},
        {"role": "assistant", "content": "A class definition."},
        {"role": "user", "content": "And while?"},
        {"role": "assistant", "content": "Repeated execution."},
    ]
    inputs, labels, weights = CausalLMPreprocessor(tokenizer)([conversation])
    # The default template: "Role: text" lines; replies follow "Assistant:".
    real = int(inputs["padding_mask"].sum())
    text = tokenizer.decode(list(inputs["token_ids"][0, :real]) + [labels[0, real - 1]])
    assert text == (
        "User: What is a class?\nAssistant: A class definition.\n"
        "User: And while?\nAssistant: Repeated execution.\n"
    )
    learnt = [int(t) for t in labels[0][weights[0] > 0]]
    assert tokenizer.decode(learnt) == " A class definition.\n Repeated execution.\n"
    records = CausalLMPreprocessor(tokenizer)([{"messages": conversation}])
    np.testing.assert_array_equal(records[2], weights)


def test_a_template_that_rewrites_history_asks_for_mask_prompt_false(tokenizer):
    tokenizer = tiny_tokenizer()
    # Drops every reply but the last: earlier renders are not prefixes.
    tokenizer.config["chat_template"] = (
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "{{ m['role'] }}: {{ m['content'] }}\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    conversation = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d"},
    ]
    with pytest.raises(ValueError, match="mask_prompt=False"):
        CausalLMPreprocessor(tokenizer)([conversation])
    unmasked = CausalLMPreprocessor(tokenizer, mask_prompt=False)([conversation])
    tokens = tokenizer.encode(
        "user: a\nuser: c\nassistant: d\n", add_special_tokens=False
    )
    _check(unmasked, [(tokens, [1.0] * len(tokens))])


def test_long_examples_are_cut_with_a_warning(tokenizer):
    preprocessor = CausalLMPreprocessor(tokenizer, sequence_length=5)
    with pytest.warns(UserWarning, match="2 of 2 examples.*sequence_length=5"):
        inputs, labels, _ = preprocessor(TEXT[:2])
    assert inputs["token_ids"].shape == labels.shape == (2, 5)
    np.testing.assert_array_equal(inputs["token_ids"][0], tokenizer.encode(TEXT[0])[:5])


def test_packing_learns_every_token_once_in_full_rows(tokenizer):
    preprocessor = CausalLMPreprocessor(tokenizer, sequence_length=16, packing=True)
    inputs, labels, weights = preprocessor(TEXT)
    stream = [
        t for text in TEXT for t in tokenizer.encode(text) + [tokenizer.eos_token_id]
    ]
    assert inputs["token_ids"].shape[1] == 16
    assert inputs["padding_mask"][:-1].all()
    learnt = [int(t) for y, w in zip(labels, weights) for t in y[w > 0]]
    assert learnt == stream[1:]


def test_numpy_and_datasets_read_as_lists(tokenizer):
    tf = pytest.importorskip("tensorflow")
    preprocessor = CausalLMPreprocessor(tokenizer, sequence_length=24)
    from_list = preprocessor(TEXT)
    from_numpy = preprocessor(np.array(TEXT))
    np.testing.assert_array_equal(from_list[1], from_numpy[1])
    for dataset in (
        tf.data.Dataset.from_tensor_slices(TEXT),
        tf.data.Dataset.from_tensor_slices(TEXT).batch(4),
    ):
        ((inputs, labels, weights),) = list(preprocessor.dataset(dataset, batch_size=4))
        assert labels.shape == (4, 24)
        assert weights.numpy().sum() == from_list[2].sum()
        # Padded to `sequence_length`, the same tokens.
        width = from_list[1].shape[1]
        np.testing.assert_array_equal(labels.numpy()[:, :width], from_list[1])
        assert "padding_mask" in inputs
    pairs = tf.data.Dataset.from_tensor_slices(
        (["The for", "A"], [" statement", " class"])
    )
    ((_, labels, weights),) = list(preprocessor.dataset(pairs.batch(2)))
    expected = preprocessor([("The for", " statement"), ("A", " class")])
    np.testing.assert_array_equal(
        weights.numpy()[:, : expected[2].shape[1]], expected[2]
    )


def test_what_is_text():
    assert is_text(["a", "b"]) and is_text("a") and is_text(np.array(["a"]))
    assert is_text([("a", "b")]) and is_text({"prompts": ["a"], "responses": ["b"]})
    assert is_text([[{"role": "user", "content": "hi"}]])
    assert not is_text(np.zeros((2, 3), "int32"))
    assert not is_text([[1, 2, 3]])
    assert not is_text({"token_ids": np.zeros((1, 2))})


def test_bad_arguments_are_named(tokenizer):
    with pytest.raises(ValueError, match="needs a tokenizer"):
        CausalLMPreprocessor(None)
    with pytest.raises(ValueError, match="sequence_length"):
        CausalLMPreprocessor(tokenizer, sequence_length=0)
    with pytest.raises(TypeError, match="packing"):
        CausalLMPreprocessor(tokenizer, packing="yes")
    with pytest.raises(TypeError, match="Expected text"):
        CausalLMPreprocessor(tokenizer)([1, 2])
    with pytest.raises(TypeError, match="Example 1 is 3"):
        CausalLMPreprocessor(tokenizer)(["a", 3])
    with pytest.raises(TypeError, match="Example 0 is"):
        CausalLMPreprocessor(tokenizer)([[{"role": "user"}]])
    with pytest.raises(ValueError, match="as long"):
        CausalLMPreprocessor(tokenizer)({"prompts": ["a", "b"], "responses": ["c"]})
