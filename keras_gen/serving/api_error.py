"""An error answered to the client in the OpenAI error shape."""


class APIError(Exception):
    """A client-facing error: HTTP status plus OpenAI's error object.

    The body is `{"error": {"message", "type", "param", "code"}}`, as the
    OpenAI API writes it, so OpenAI clients raise their usual exceptions.

    Args:
        message: str, what went wrong, for a person.
        status: int, the HTTP status (4xx for the client's mistakes).
        param: the request field at fault, or `None`.
        code: a short machine-readable code, or `None`.
        type: OpenAI's error type; `"invalid_request_error"` by default.

    Examples:
    >>> APIError("`prompt` is required.", param="prompt").to_dict()["error"]["param"]
    'prompt'
    """

    def __init__(
        self, message, status=400, param=None, code=None, type="invalid_request_error"
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.type = type

    def to_dict(self):
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }
