"""Reading the JSON files of a model or adapter folder, with errors that
name the file."""

import json
import os


def parse_json(text, name):
    """`text` (a str or bytes) parsed as JSON; a `ValueError` naming `name`
    when it is not JSON (or nests deeper than Python's recursion limit)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"{name} is not valid JSON: {error}") from None


def read_json_object(path, missing=None):
    """The JSON object (a dict) in the file `path`.

    Args:
        path: the file.
        missing: returned (a new copy) when the file does not exist; `None`:
            a missing file is a `FileNotFoundError`.

    Raises:
        ValueError: the file is not UTF-8 JSON, or holds something other
            than an object; the message names the file.
    """
    path = os.fspath(path)
    if missing is not None and not os.path.isfile(path):
        return dict(missing)
    with open(path, "rb") as f:
        data = parse_json(f.read(), path)
    if not isinstance(data, dict):
        raise ValueError(
            f"{path} must hold a JSON object. Received a {type(data).__name__}."
        )
    return data
