"""Host-side preparation of `generate` inputs and outputs.

`generate` accepts one prompt or a batch in several forms and answers in the
form it was given. Everything here is plain Python and numpy: it runs before
and after the compiled program, never inside it.
"""

import numpy as np

from keras_gen.tokenizers import chat_template

SINGLE = "single"  # one list of ids in, one list out
BATCH = "batch"  # a list of lists in, a list of lists out
DICT = "dict"  # keras-hub's {"token_ids", "padding_mask"} in and out
TEXT = "text"  # one string in, one string out
TEXTS = "texts"  # a list of strings in, a list of strings out
CHAT = "chat"  # one conversation (message dicts) in, the reply's text out
CHATS = "chats"  # a list of conversations in, a list of replies out


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _ids(row, where):
    row = np.asarray(row)
    if row.ndim != 1 or (row.size and not np.issubdtype(row.dtype, np.integer)):
        raise TypeError(
            f"`inputs` {where} must be a list of int token ids. Received: {row!r}"
        )
    return [int(t) for t in row]


def read_prompts(inputs, tokenizer=None, chat=None):
    """`(prompts, form, width)`: a list of token id lists and the input form.

    `width` is the width of a dict input's buffer (else `None`).
    Conversations are rendered with the tokenizer's chat template, with
    the generation prompt and `chat`'s arguments (`tools`, template
    keywords).
    """
    chat = {key: value for key, value in (chat or {}).items() if value is not None}
    conversation = chat_template.is_conversation(inputs)
    if conversation or chat_template.is_conversations(inputs):
        if tokenizer is None:
            raise ValueError(
                "Chat `inputs` (lists of messages) need a tokenizer with a "
                "chat template, and this model has none."
            )
        conversations = [inputs] if conversation else list(inputs)
        prompts = [
            tokenizer.apply_chat_template(messages, add_generation_prompt=True, **chat)
            for messages in conversations
        ]
        return prompts, CHAT if conversation else CHATS, None
    if chat:
        raise ValueError(
            f"{' and '.join(f'`{key}`' for key in chat)} apply to chat `inputs` "
            "(a list of message dicts, or a list of such lists). Received "
            f"inputs: {inputs!r:.200}"
        )
    if isinstance(inputs, str) or (
        isinstance(inputs, (list, tuple))
        and inputs
        and all(isinstance(x, str) for x in inputs)
    ):
        if tokenizer is None:
            raise ValueError(
                "String `inputs` need a tokenizer, and this model has none. "
                "Pass token ids, or load the model with its tokenizer."
            )
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        prompts = [list(tokenizer.encode(text)) for text in texts]
        return prompts, TEXT if isinstance(inputs, str) else TEXTS, None
    if isinstance(inputs, dict):
        if "token_ids" not in inputs:
            raise ValueError(
                "A dict `inputs` must have a 'token_ids' key (and optionally "
                f"'padding_mask'). Received keys: {sorted(inputs)}"
            )
        token_ids = np.asarray(inputs["token_ids"])
        mask = inputs.get("padding_mask")
        mask = np.ones(token_ids.shape, bool) if mask is None else np.asarray(mask)
        if token_ids.ndim == 1:
            token_ids, mask = token_ids[None], mask[None]
        if token_ids.ndim != 2 or mask.shape != token_ids.shape:
            raise ValueError(
                "`inputs['token_ids']` and `inputs['padding_mask']` must have "
                f"the same 1D or 2D shape. Received: {token_ids.shape} and "
                f"{mask.shape}"
            )
        prompts = [
            _ids(row[row_mask.astype(bool)], f"row {i}")
            for i, (row, row_mask) in enumerate(zip(token_ids, mask))
        ]
        return prompts, DICT, token_ids.shape[1]
    if isinstance(inputs, np.ndarray) and inputs.ndim == 2:
        inputs = inputs.tolist()
    if isinstance(inputs, (list, tuple, np.ndarray)):
        if len(inputs) and all(_is_int(x) for x in inputs):
            return [_ids(inputs, "prompt")], SINGLE, None
        if len(inputs) and not any(_is_int(x) for x in inputs):
            return [_ids(x, f"row {i}") for i, x in enumerate(inputs)], BATCH, None
    raise TypeError(
        "`inputs` must be a list of token ids, a list of such lists, a dict "
        "with 'token_ids' and 'padding_mask', or text when the model has a "
        f"tokenizer. Received: {inputs!r}"
    )


def check_prompts(prompts, vocabulary_size):
    for i, prompt in enumerate(prompts):
        if not prompt:
            raise ValueError(
                f"`inputs` has an empty prompt (row {i}); every prompt needs "
                "at least one token."
            )
        bad = [t for t in prompt if not 0 <= t < vocabulary_size]
        if bad:
            raise ValueError(
                f"`inputs` row {i} has token ids outside the vocabulary "
                f"[0, {vocabulary_size}): {bad[:5]}"
            )


def row_ends(prompts, max_length, max_new_tokens, width, limit):
    """Where each row stops at the latest: prompt plus new tokens."""
    if max_length is not None and max_new_tokens is not None:
        raise ValueError(
            "Give `max_length` (prompt plus new tokens) or `max_new_tokens`, "
            f"not both. Received: max_length={max_length}, "
            f"max_new_tokens={max_new_tokens}"
        )
    for name, value in (("max_length", max_length), ("max_new_tokens", max_new_tokens)):
        if value is not None and (not _is_int(value) or value < 1):
            raise ValueError(f"`{name}` must be an int >= 1. Received: {value!r}")
    lengths = [len(p) for p in prompts]
    if max_new_tokens is not None:
        ends = [n + max_new_tokens for n in lengths]
    else:
        if max_length is None:
            if width is None:
                raise ValueError(
                    "Give `max_length` (prompt plus new tokens) or "
                    "`max_new_tokens` to say how long to generate."
                )
            max_length = width
        longest = max(lengths)
        if longest > max_length:
            raise ValueError(
                f"A prompt has {longest} tokens, more than "
                f"`max_length`={max_length}. Raise `max_length` or use "
                "`max_new_tokens`."
            )
        ends = [max_length] * len(prompts)
    if limit is not None and max(ends) > limit:
        raise ValueError(
            f"Generation would reach {max(ends)} tokens, beyond the model's "
            f"{limit} positions. Lower `max_length` or `max_new_tokens`."
        )
    return ends


def bucket(n, minimum, limit=None):
    """The padded size that serves every `n` up to it: a power of two."""
    size = max(minimum, 1 << max(n - 1, 0).bit_length())
    return size if limit is None else max(n, min(size, limit))


def pack(prompts, width):
    """Left-aligned `(batch, width)` token ids and their mask."""
    token_ids = np.zeros((len(prompts), width), "int32")
    mask = np.zeros((len(prompts), width), bool)
    for i, prompt in enumerate(prompts):
        token_ids[i, : len(prompt)] = prompt
        mask[i, : len(prompt)] = True
    return token_ids, mask


def plural(form):
    """The form that answers each prompt of `form` with a list entry."""
    return {SINGLE: BATCH, TEXT: TEXTS, CHAT: CHATS}.get(form, form)


def per_prompt(values, form, n):
    """Group the answer's `n` consecutive entries per prompt.

    `values` answers every row in the `plural` of `form`. One prompt gets
    its entry (`n == 1`) or a list of `n`; a batch, a list with one such
    item per prompt. A dict answer (or a numpy array of scores for one)
    stays flat: prompt `b`'s rows are `b * n` to `b * n + n - 1`.
    """
    if form == DICT:
        return values
    if isinstance(values, np.ndarray):
        values = values.tolist()
    groups = [
        values[i : i + n] if n > 1 else values[i] for i in range(0, len(values), n)
    ]
    return groups[0] if form in (SINGLE, TEXT, CHAT) else groups
