"""A thin wrapper around a Hugging Face `tokenizers` tokenizer."""

import functools
import hashlib
import json
import os
import re

import tokenizers

from keras_gen.tokenizers.chat_template import ChatTemplate
from keras_gen.tokenizers.chat_template import is_conversations
from keras_gen.tokenizers.sentencepiece_model import tokenizer_from_sentencepiece
from keras_gen.utils.files import read_json_object

TOKENIZER_FILE = "tokenizer.json"
# A SentencePiece model, read when a folder has no `tokenizer.json`.
SENTENCEPIECE_FILE = "tokenizer.model"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
# transformers 4.43 and later save the chat template in a file of its own.
CHAT_TEMPLATE_FILE = "chat_template.jinja"
# Files that name special token ids, most specific for generation first.
ID_CONFIG_FILES = ("generation_config.json", "config.json")


def _token_content(token):
    # `tokenizer_config.json` writes a token as a string or as an
    # `AddedToken` dict with its text under "content".
    return token.get("content") if isinstance(token, dict) else token


def _byte_decoder():
    """GPT-2's byte-level alphabet: the byte each character stands for."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD)]
    printable += range(0xAE, 0x100)
    characters = {b: chr(b) for b in printable}
    others = [b for b in range(256) if b not in characters]
    characters.update({b: chr(256 + i) for i, b in enumerate(others)})
    return {c: b for b, c in characters.items()}


def _uses_byte_level(component):
    # A decoder is one component or a `Sequence` of them.
    if not isinstance(component, dict):
        return False
    return component.get("type") == "ByteLevel" or any(
        _uses_byte_level(c) for c in component.get("decoders", [])
    )


# SentencePiece's word boundary and byte-fallback tokens (Llama 2, Gemma).
_SPACE = "\u2581"
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _as_list(ids):
    if ids is None:
        return []
    return [int(i) for i in ids] if isinstance(ids, (list, tuple)) else [int(ids)]


class Tokenizer:
    """Text to token ids and back, with the model's special tokens.

    Wraps a `tokenizers.Tokenizer` (the Rust library behind Hugging Face's
    fast tokenizers, read from `tokenizer.json`) and knows the special
    token ids that generation needs: `bos_token_id`, `pad_token_id` and
    `eos_token_ids` (a list: some models stop on several tokens).
    `CausalLM.generate` uses `encode`, `decode` and `eos_token_ids`.

    Args:
        tokenizer: a `tokenizers.Tokenizer`, or the path of a
            `tokenizer.json` file.
        bos_token_id: `None` or int.
        eos_token_ids: `None`, an int or a list of ints.
        pad_token_id: `None` or int.
        config: dict, the `tokenizer_config.json` contents to write back
            on `save_pretrained`.
        sentencepiece_model: `None`, or the bytes of the SentencePiece
            model the tokenizer was made from: written back as
            `tokenizer.model`, and what keras-hub's SentencePiece
            tokenizers take (`CausalLM.to_keras_hub`).

    Examples:
    >>> tokenizer = Tokenizer.from_pretrained("path/to/model")  # doctest: +SKIP
    >>> tokenizer.decode(tokenizer.encode("hello world"))  # doctest: +SKIP
    'hello world'
    """

    def __init__(
        self,
        tokenizer,
        bos_token_id=None,
        eos_token_ids=None,
        pad_token_id=None,
        config=None,
        sentencepiece_model=None,
    ):
        if isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = tokenizers.Tokenizer.from_file(os.fspath(tokenizer))
        if not isinstance(tokenizer, tokenizers.Tokenizer):
            raise TypeError(
                "`tokenizer` must be a `tokenizers.Tokenizer` or the path of "
                f"a tokenizer.json file. Received: {tokenizer!r}"
            )
        self.tokenizer = tokenizer
        self.bos_token_id = bos_token_id
        self.eos_token_ids = _as_list(eos_token_ids)
        self.pad_token_id = pad_token_id
        self.config = dict(config or {})
        if sentencepiece_model is not None and not isinstance(
            sentencepiece_model, bytes
        ):
            raise TypeError(
                "`sentencepiece_model` must be None or bytes. Received: "
                f"{type(sentencepiece_model).__name__}"
            )
        self.sentencepiece_model = sentencepiece_model

    @classmethod
    def from_pretrained(cls, path):
        """Load `tokenizer.json` (or, without it, a SentencePiece
        `tokenizer.model`) and the special tokens from a model folder.

        A SentencePiece model is converted to the same `tokenizers` form
        (see `keras_gen.tokenizers.sentencepiece_model`), adding BOS and EOS
        as `tokenizer_config.json`'s `add_bos_token` (default true) and
        `add_eos_token` (default false) say. Special token ids come from
        `generation_config.json` and `config.json` (`eos_token_id` may be a
        list there), falling back on the token strings of
        `tokenizer_config.json`.

        Raises:
            FileNotFoundError: the folder has neither file.
        """
        path = os.fspath(path)
        tokenizer_file = os.path.join(path, TOKENIZER_FILE)
        sentencepiece_file = os.path.join(path, SENTENCEPIECE_FILE)
        config = read_json_object(os.path.join(path, TOKENIZER_CONFIG_FILE), missing={})
        if os.path.isfile(tokenizer_file):
            try:
                tokenizer = tokenizers.Tokenizer.from_file(tokenizer_file)
            except Exception as error:  # the Rust library raises plain Exception
                raise ValueError(
                    f"{tokenizer_file} is not a valid tokenizer file: {error}"
                ) from error
        elif os.path.isfile(sentencepiece_file):
            tokenizer = tokenizer_from_sentencepiece(
                sentencepiece_file,
                add_bos_token=config.get("add_bos_token", True) is not False,
                add_eos_token=config.get("add_eos_token", False) is True,
            )
        else:
            raise FileNotFoundError(
                f"No {TOKENIZER_FILE} or {SENTENCEPIECE_FILE} in {path!r}: "
                "keras-gen reads Hugging Face `tokenizers` files and "
                "SentencePiece models."
            )
        sentencepiece_model = None
        if os.path.isfile(sentencepiece_file):
            with open(sentencepiece_file, "rb") as f:
                sentencepiece_model = f.read()
        template_file = os.path.join(path, CHAT_TEMPLATE_FILE)
        if os.path.isfile(template_file):
            with open(template_file, encoding="utf-8") as f:
                config["chat_template"] = f.read()
        id_configs = [
            read_json_object(os.path.join(path, f), missing={}) for f in ID_CONFIG_FILES
        ]

        def special_id(name):
            token = _token_content(config.get(f"{name}_token"))
            if token is not None and tokenizer.token_to_id(token) is not None:
                return [tokenizer.token_to_id(token)]
            for id_config in id_configs:
                if id_config.get(f"{name}_token_id") is not None:
                    return _as_list(id_config[f"{name}_token_id"])
            return []

        eos_token_ids = []
        for id_config in id_configs:
            eos_token_ids = eos_token_ids or _as_list(id_config.get("eos_token_id"))
        bos, pad = special_id("bos"), special_id("pad")
        loaded = cls(
            tokenizer,
            bos_token_id=bos[0] if bos else None,
            eos_token_ids=eos_token_ids or special_id("eos"),
            pad_token_id=pad[0] if pad else None,
            config=config,
            sentencepiece_model=sentencepiece_model,
        )
        if "chat_template" in config:  # checked now, not at the first chat
            file = (
                CHAT_TEMPLATE_FILE
                if os.path.isfile(template_file)
                else TOKENIZER_CONFIG_FILE
            )
            ChatTemplate.from_tokenizer(loaded, origin=os.path.join(path, file))
        return loaded

    @functools.cached_property
    def chat_template(self):
        """The `keras_gen.tokenizers.ChatTemplate` of `config` (the
        default `User:` / `Assistant:` lines when it has none)."""
        return ChatTemplate.from_tokenizer(self)

    def apply_chat_template(
        self,
        messages,
        add_generation_prompt=True,
        tokenize=True,
        tools=None,
        documents=None,
        **template_kwargs,
    ):
        """A conversation (or a batch of them) as the model's prompt.

        Renders the model's chat template as transformers'
        `apply_chat_template` does and encodes the text without adding
        special tokens (the template writes them: no doubled BOS), so text
        and ids equal transformers'. Unlike transformers, the generation
        prompt is added by default: the result is ready for `generate`.

        Args:
            messages: a list of message dicts (`{"role": "user", "content":
                "Hi"}`, with `tool_calls` or a `tool` role where the template
                reads them), or a list of such lists.
            add_generation_prompt: bool, end with the start of the
                assistant's turn.
            tokenize: bool; `False` returns the text.
            tools: `None` or a list of tool JSON schemas (OpenAI's
                `{"type": "function", "function": {...}}`).
            documents: `None` or a list of dicts, for templates that read them.
            **template_kwargs: more template variables (`enable_thinking=False`).

        Returns:
            A list of token ids (or the text); a list of them for a batch.

        Examples:
        >>> import keras_gen
        >>> tokenizer = keras_gen.CausalLM.from_preset("demo").tokenizer
        >>> tokenizer.apply_chat_template(
        ...     [{"role": "user", "content": "Hi"}], tokenize=False)
        'User: Hi\\nAssistant:'
        """
        batch = is_conversations(messages)
        conversations = messages if batch else [messages]
        results = []
        for conversation in conversations:
            text = self.chat_template.render(
                conversation,
                add_generation_prompt=add_generation_prompt,
                tools=tools,
                documents=documents,
                **template_kwargs,
            )
            results.append(
                self.encode(text, add_special_tokens=False) if tokenize else text
            )
        return results if batch else results[0]

    @property
    def vocabulary_size(self):
        """Number of token ids, added special tokens included."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def eos_token_id(self):
        """The first end token id, or `None`."""
        return self.eos_token_ids[0] if self.eos_token_ids else None

    def encode(self, text, add_special_tokens=True):
        """Token ids of `text` (a string), with the model's special tokens."""
        if not isinstance(text, str):
            raise TypeError(f"`text` must be a string. Received: {text!r}")
        try:
            encoding = self.tokenizer.encode(
                text, add_special_tokens=add_special_tokens
            )
        except TypeError:  # what `tokenizers` says of a lone surrogate
            raise ValueError(
                "`text` is not valid Unicode: it holds a lone surrogate "
                f"(Received: {text[:200]!r})."
            ) from None
        return encoding.ids

    def decode(self, token_ids, skip_special_tokens=True):
        """The text of a list of token ids."""
        return self.tokenizer.decode(
            [int(t) for t in token_ids], skip_special_tokens=skip_special_tokens
        )

    @functools.cached_property
    def fingerprint(self):
        """A digest of the tokenizer's contents: equal tokenizers, equal
        fingerprints (caches of per-vocabulary work are keyed by it)."""
        return hashlib.sha256(self.tokenizer.to_str().encode()).hexdigest()

    @functools.cached_property
    def token_bytes(self):
        """The bytes each token id stands for (`None` for special tokens).

        Byte-level vocabularies (GPT-2, Llama 3, Qwen) map characters back
        to bytes; SentencePiece ones (Llama 2, Gemma) read the word
        boundary as a space and `<0xNN>` as byte `NN`; other tokens are
        their UTF-8. Structured output walks its automata over these bytes.
        """
        specification = json.loads(self.tokenizer.to_str())
        byte_level = _uses_byte_level(specification.get("decoder"))
        added = self.tokenizer.get_added_tokens_decoder()
        decoder = _byte_decoder()
        table = [None] * self.vocabulary_size
        for token, token_id in self.tokenizer.get_vocab(with_added_tokens=True).items():
            byte = _BYTE_TOKEN.fullmatch(token)
            if token_id in added:
                if not added[token_id].special:
                    table[token_id] = token.encode()
            elif byte_level and all(c in decoder for c in token):
                table[token_id] = bytes(decoder[c] for c in token)
            elif byte:
                table[token_id] = bytes([int(byte.group(1), 16)])
            else:
                table[token_id] = token.replace(_SPACE, " ").encode()
        return table

    def token_to_id(self, token):
        return self.tokenizer.token_to_id(token)

    def id_to_token(self, token_id):
        return self.tokenizer.id_to_token(int(token_id))

    def save_pretrained(self, path):
        """Write `tokenizer.json` and `tokenizer_config.json` (and
        `tokenizer.model`, when made from one) to a folder."""
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        self.tokenizer.save(os.path.join(path, TOKENIZER_FILE))
        if self.sentencepiece_model is not None:
            with open(os.path.join(path, SENTENCEPIECE_FILE), "wb") as f:
                f.write(self.sentencepiece_model)
        config = {"tokenizer_class": "PreTrainedTokenizerFast", **self.config}
        for name, token_id in (
            ("bos", self.bos_token_id),
            ("eos", self.eos_token_id),
            ("pad", self.pad_token_id),
        ):
            if token_id is not None and self.id_to_token(token_id) is not None:
                config[f"{name}_token"] = self.id_to_token(token_id)
        with open(os.path.join(path, TOKENIZER_CONFIG_FILE), "w") as f:
            json.dump(config, f, indent=2)
