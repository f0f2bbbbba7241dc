"""The `/tokenize` and `/detokenize` requests (as vLLM names them)."""

from keras_gen.serving import chat_tools
from keras_gen.serving.api_error import APIError
from keras_gen.serving.completion_request import _field
from keras_gen.serving.completion_request import _is_int


def _is_ids(value):
    return isinstance(value, list) and all(_is_int(t) for t in value)


class TokenizeRequest:
    """One `/tokenize` or `/detokenize` request, read and answered.

    `/tokenize` takes `prompt` (text; `add_special_tokens`, default true)
    or chat `messages` (rendered with the model's chat template, with
    `add_generation_prompt` (default true), `tools` and
    `chat_template_kwargs`), and answers `{"count", "max_model_len",
    "tokens"}`, with `"token_strs"` when `return_token_strs` is true.
    `/detokenize` takes `tokens` (ids within the vocabulary) and answers
    `{"prompt": text}`. Both are bounded by the server's body size.

    Args:
        body: the decoded JSON object.
        kind: `"tokenize"` or `"detokenize"`.
        model: the served model's context (`name`, `tokenizer`,
            `vocabulary_size`, `context_length`).
    """

    def __init__(self, body, kind, model):
        if not isinstance(body, dict):
            raise APIError("The request body must be a JSON object.")
        name = _field(body, "model", lambda v: isinstance(v, str), "a string")
        if name is not None and name != model.name:
            raise APIError(
                f"The model '{name}' does not exist. This server serves "
                f"'{model.name}'.",
                status=404,
                param="model",
                code="model_not_found",
            )
        self.kind, self.model, self.body = kind, model, body

    def answer(self):
        if self.kind == "detokenize":
            return {"prompt": self.model.tokenizer.decode(self._tokens())}
        tokens = self._tokenize()
        answer = {
            "count": len(tokens),
            "max_model_len": self.model.context_length,
            "tokens": tokens,
        }
        if _field(self.body, "return_token_strs", _is_bool, "a boolean", False):
            answer["token_strs"] = [self.model.tokenizer.id_to_token(t) for t in tokens]
        return answer

    def _tokens(self):
        tokens = self.body.get("tokens")
        if tokens is None:
            raise APIError("Missing required parameter: 'tokens'.", param="tokens")
        size = self.model.vocabulary_size
        if not _is_ids(tokens) or any(not 0 <= t < size for t in tokens):
            raise APIError(
                f"'tokens' must be an array of token ids in [0, {size}).",
                param="tokens",
            )
        return tokens

    def _tokenize(self):
        body, tokenizer = self.body, self.model.tokenizer
        if "messages" in body:
            add = _field(body, "add_generation_prompt", _is_bool, "a boolean", True)
            keywords = _field(body, "chat_template_kwargs", _is_dict, "an object", {})
            try:
                return tokenizer.apply_chat_template(
                    chat_tools.read_messages(body["messages"]),
                    add_generation_prompt=add,
                    tools=body.get("tools"),
                    **keywords,
                )
            except (TypeError, ValueError) as error:
                raise APIError(str(error), param="messages") from None
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise APIError(
                "'prompt' (a string) or 'messages' (a chat) is required.",
                param="prompt",
            )
        special = _field(body, "add_special_tokens", _is_bool, "a boolean", True)
        try:
            return tokenizer.encode(prompt, add_special_tokens=special)
        except ValueError as error:
            raise APIError(str(error), param="prompt") from None


def _is_bool(value):
    return isinstance(value, bool)


def _is_dict(value):
    return isinstance(value, dict)
