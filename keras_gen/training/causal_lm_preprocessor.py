"""Text to the arrays a `CausalLM` trains on."""

import dataclasses
import warnings

import numpy as np

from keras_gen.tokenizers.chat_template import ChatTemplate
from keras_gen.utils.checks import check_bool
from keras_gen.utils.checks import check_count

# Keras' batch size when `fit` is given none.
DEFAULT_BATCH_SIZE = 32
# In-memory data is padded to its longest row, rounded up to this.
LENGTH_MULTIPLE = 8
# keras-hub's names for prompt/completion pairs in a dict of columns.
PAIR_KEYS = ("prompts", "responses")


def _is_string(x):
    return isinstance(x, (str, np.str_, bytes))


def _text(x):
    return x.decode("utf-8") if isinstance(x, bytes) else str(x)


def _is_conversation(x):
    return (
        isinstance(x, (list, tuple))
        and len(x) > 0
        and all(isinstance(m, dict) and "role" in m and "content" in m for m in x)
    )


def _is_pair(x):
    return isinstance(x, (list, tuple)) and len(x) == 2 and all(map(_is_string, x))


def _examples(x):
    """`x` as a list of strings, pairs or conversations; `None` when it is
    not text (token ids, for instance)."""
    if isinstance(x, dict):
        if set(x) == set(PAIR_KEYS):
            prompts, responses = (list(np.asarray(x[k]).reshape(-1)) for k in PAIR_KEYS)
            if len(prompts) != len(responses):
                raise ValueError(
                    f"{PAIR_KEYS[0]!r} and {PAIR_KEYS[1]!r} must be as long. "
                    f"Received: {len(prompts)} and {len(responses)}"
                )
            return list(zip(map(_text, prompts), map(_text, responses)))
        if "messages" in x and _is_conversation(x["messages"]):
            return [list(x["messages"])]
        return None
    if _is_string(x):
        return [_text(x)]
    if _is_conversation(x):
        return [list(x)]
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "USO" or x.size == 0:
            return None
        x = list(x.reshape(-1)) if x.dtype.kind in "US" else list(x)
    if not isinstance(x, (list, tuple)) or not x:
        return None
    # A list with some text in it is text: its other examples must be too.
    texty = any(
        _is_string(e)
        or isinstance(e, dict)
        or (isinstance(e, (list, tuple)) and any(isinstance(m, (dict, str)) for m in e))
        for e in x
    )
    examples = []
    for i, example in enumerate(x):
        if _is_string(example):
            examples.append(_text(example))
        elif _is_pair(example):
            examples.append(tuple(map(_text, example)))
        elif isinstance(example, dict) and _is_conversation(example.get("messages")):
            examples.append(list(example["messages"]))
        elif _is_conversation(example):
            examples.append(list(example))
        elif texty:
            raise TypeError(
                f"Example {i} is {example!r}: text examples are strings, "
                "(prompt, completion) pairs or conversations of "
                "{'role': ..., 'content': ...} messages."
            )
        else:
            return None
    kinds = {type(example): i for i, example in enumerate(examples)}
    if len(kinds) > 1:
        first, second = sorted(kinds.values())[:2]
        raise TypeError(
            f"Examples {first} and {second} are of different kinds "
            f"({x[first]!r:.80} and {x[second]!r:.80}): give strings, "
            "(prompt, completion) pairs or conversations, one kind per call "
            "(they weigh the loss differently)."
        )
    return examples


def is_text(x):
    """Whether `fit` reads `x` as text (see `CausalLMPreprocessor`)."""
    return is_dataset(x) or _examples(x) is not None


def is_dataset(x):
    return type(x).__module__.startswith("tensorflow") and hasattr(x, "element_spec")


@dataclasses.dataclass(frozen=True)
class CausalLMPreprocessor:
    """Turns text into `(inputs, labels, sample_weight)` for `CausalLM.fit`.

    Each example becomes token ids; the model reads positions `0..L-1`
    and learns to predict positions `1..L`. The loss counts only real
    tokens: padding is weighed 0, and so are prompts when `mask_prompt`.

    Examples may be:

    - strings (the whole text is learnt);
    - `(prompt, completion)` pairs, or a dict of columns `{"prompts": [...],
      "responses": [...]}` (keras-hub's names);
    - chat conversations: lists of `{"role": ..., "content": ...}` messages
      (or `{"messages": [...]}` records), rendered with the tokenizer's chat
      template; the assistant's replies are what is learnt.

    given as a Python list, a NumPy array of strings, or a `tf.data.Dataset`
    of strings, `(prompt, completion)` tuples or `{"prompts", "responses"}`
    dicts (batched or not).

    Args:
        tokenizer: a `keras_gen.tokenizers.Tokenizer`.
        sequence_length: int, the most tokens a row holds; longer examples
            are cut (with a warning saying how many). In-memory data is
            padded to its longest row (a multiple of 8) up to this;
            datasets always to this.
        add_start_token: bool, encode with the tokenizer's special tokens
            (its start token, where it adds one), as `generate` encodes
            prompts. Conversations take theirs from the chat template.
        add_end_token: bool, end each string or completion with the
            tokenizer's end token, so the model learns to stop.
        mask_prompt: bool, weigh prompts (and everything in a conversation
            but the assistant's replies) 0 in the loss.
        packing: bool, concatenate the examples and cut the stream into
            full rows of `sequence_length` (no padding; attention runs
            across the boundaries between examples). In-memory data only.

    Examples:
    >>> preprocessor = CausalLMPreprocessor(tokenizer, sequence_length=64)  # doctest: +SKIP
    >>> inputs, labels, weights = preprocessor(["some text", "more text"])  # doctest: +SKIP
    >>> inputs["token_ids"].shape  # doctest: +SKIP
    (2, 8)
    """

    tokenizer: object
    sequence_length: int = 1024
    add_start_token: bool = True
    add_end_token: bool = True
    mask_prompt: bool = True
    packing: bool = False

    def __post_init__(self):
        if self.tokenizer is None:
            raise ValueError(
                "Training on text needs a tokenizer: load the model with "
                "`from_pretrained`, or give `CausalLM(tokenizer=...)`."
            )
        check_count("sequence_length", self.sequence_length)
        for name in ("add_start_token", "add_end_token", "mask_prompt", "packing"):
            check_bool(name, getattr(self, name))

    def replace(self, **options):
        """A copy with some options changed."""
        return dataclasses.replace(self, **options)

    @property
    def pad_token_id(self):
        pad = getattr(self.tokenizer, "pad_token_id", None)
        return 0 if pad is None else pad

    def tokenize(self, example):
        """`(token_ids, learnt)`: one example's ids, and whether each is a
        token the loss counts."""
        tokenizer = self.tokenizer
        end = getattr(tokenizer, "eos_token_id", None)
        end = [end] if self.add_end_token and end is not None else []
        if isinstance(example, str):
            ids = (
                tokenizer.encode(example, add_special_tokens=self.add_start_token) + end
            )
            return ids, [True] * len(ids)
        if isinstance(example, tuple):
            prompt, completion = example
            prompt = tokenizer.encode(prompt, add_special_tokens=self.add_start_token)
            completion = tokenizer.encode(completion, add_special_tokens=False) + end
            learnt = [not self.mask_prompt] * len(prompt) + [True] * len(completion)
            return prompt + completion, learnt
        template = ChatTemplate.from_tokenizer(tokenizer)
        if not self.mask_prompt:
            ids = tokenizer.encode(
                template.render(example, add_generation_prompt=False),
                add_special_tokens=False,
            )
            return ids, [True] * len(ids)
        ids, learnt = [], []
        for text, is_reply in template.segments(example):
            piece = tokenizer.encode(text, add_special_tokens=False)
            ids += piece
            learnt += [is_reply] * len(piece)
        return ids, learnt

    def __call__(self, x):
        """`(inputs, labels, sample_weight)` NumPy arrays for in-memory text:
        `inputs` holds `token_ids` and `padding_mask`, all `(rows, length)`."""
        examples = _examples(x)
        if examples is None:
            raise TypeError(
                "Expected text: strings, (prompt, completion) pairs, a dict of "
                f"{list(PAIR_KEYS)} or chat conversations. Received: {_describe(x)}"
            )
        rows = [self.tokenize(example) for example in examples]
        if self.packing:
            return self._pack(rows)
        longest = max(len(ids) for ids, _ in rows) - 1
        length = min(
            self.sequence_length,
            max(LENGTH_MULTIPLE, -(-longest // LENGTH_MULTIPLE) * LENGTH_MULTIPLE),
        )
        return self._pad(rows, length)

    def _pad(self, rows, length):
        """Rows of `length + 1` tokens (cut or padded), shifted by one."""
        token_ids = np.full((len(rows), length + 1), self.pad_token_id, "int32")
        weights = np.zeros((len(rows), length + 1), "float32")
        mask = np.zeros((len(rows), length + 1), "int32")
        cut = 0
        for i, (ids, learnt) in enumerate(rows):
            cut += len(ids) > length + 1
            ids, learnt = ids[: length + 1], learnt[: length + 1]
            token_ids[i, : len(ids)] = ids
            weights[i, : len(ids)] = learnt
            mask[i, : len(ids)] = 1
        if cut and length == self.sequence_length:
            warnings.warn(
                f"{cut} of {len(rows)} examples are longer than "
                f"`sequence_length={self.sequence_length}` tokens and were cut.",
                stacklevel=3,
            )
        return _shifted(token_ids, mask, weights)

    def _pack(self, rows):
        ids = np.concatenate([np.asarray(r[0], "int32") for r in rows])
        learnt = np.concatenate([np.asarray(r[1], "float32") for r in rows])
        length = self.sequence_length
        # Row k holds tokens k*L .. k*L + L: it predicts each of its last L
        # tokens, so every token but the first is learnt exactly once.
        count = max(1, -(-(len(ids) - 1) // length))
        token_ids = np.full((count, length + 1), self.pad_token_id, "int32")
        weights = np.zeros((count, length + 1), "float32")
        mask = np.zeros((count, length + 1), "int32")
        for k in range(count):
            part = slice(k * length, k * length + length + 1)
            n = len(ids[part])
            token_ids[k, :n], weights[k, :n], mask[k, :n] = ids[part], learnt[part], 1
        return _shifted(token_ids, mask, weights)

    def dataset(self, dataset, batch_size=None):
        """A `tf.data.Dataset` of text mapped to batches of arrays, padded to
        `sequence_length`. Unbatched datasets are batched by `batch_size`."""
        import tensorflow as tf

        if self.packing:
            raise ValueError(
                "`packing=True` needs the examples in memory (a list or a NumPy "
                "array): a `tf.data.Dataset` is tokenized a batch at a time."
            )
        spec = dataset.element_spec
        specs = (
            list(spec.values())
            if isinstance(spec, dict)
            else (list(spec) if isinstance(spec, tuple) else [spec])
        )
        if (
            not all(getattr(s, "dtype", None) == tf.string for s in specs)
            or (isinstance(spec, (tuple, dict)) and len(specs) != 2)
            or (isinstance(spec, dict) and set(spec) != set(PAIR_KEYS))
        ):
            raise TypeError(
                "A text dataset holds strings, (prompt, completion) string "
                f"tuples or {{{', '.join(map(repr, PAIR_KEYS))}}} dicts. "
                f"Received elements: {spec}"
            )
        if specs[0].shape.rank == 0:
            dataset = dataset.batch(batch_size or DEFAULT_BATCH_SIZE)
        length = self.sequence_length

        def tokenize(*columns):
            texts = [[_text(t) for t in column] for column in columns]
            examples = texts[0] if len(texts) == 1 else list(zip(*texts))
            return self._pad([self.tokenize(e) for e in examples], length)

        def to_arrays(*element):
            if isinstance(element[0], dict):
                element = tuple(element[0][k] for k in PAIR_KEYS)
            outputs = tf.numpy_function(
                lambda *c: _flat(tokenize(*c)),
                list(element),
                ["int32", "int32", "int32", "float32"],
            )
            for output in outputs:
                output.set_shape((None, length))
            token_ids, mask, labels, weights = outputs
            return {"token_ids": token_ids, "padding_mask": mask}, labels, weights

        return dataset.map(to_arrays, num_parallel_calls=tf.data.AUTOTUNE)


def _shifted(token_ids, mask, weights):
    """The model reads `[:, :-1]` and predicts `[:, 1:]`."""
    inputs = {"token_ids": token_ids[:, :-1], "padding_mask": mask[:, :-1]}
    # A label counts where it is a real, learnt token.
    return inputs, token_ids[:, 1:], weights[:, 1:] * mask[:, 1:].astype("float32")


def _flat(arrays):
    inputs, labels, weights = arrays
    return inputs["token_ids"], inputs["padding_mask"], labels, weights


def _describe(x):
    if isinstance(x, (list, tuple)) and x:
        return f"a {type(x).__name__} of {type(x[0]).__name__}"
    return type(x).__name__


# The options `fit` and `evaluate` take for one call.
OPTIONS = tuple(f.name for f in dataclasses.fields(CausalLMPreprocessor))[1:]
