"""Progress of long library work (loading weights).

`track(items, description)` yields `items` and shows how far it got: a
`tqdm` bar on stderr when stderr is a terminal (nothing otherwise, so
logs and pipes stay clean), or, inside `reporting(callback)`, calls to
`callback(done, total, description)` instead, for a caller that draws its
own progress line (the `keras-gen` command's).
"""

import contextlib
import contextvars

from tqdm import tqdm

_CALLBACK = contextvars.ContextVar("keras_gen_progress_callback", default=None)


@contextlib.contextmanager
def reporting(callback):
    """Within the block, `track` reports to `callback(done, total,
    description)` instead of drawing a bar."""
    token = _CALLBACK.set(callback)
    try:
        yield
    finally:
        _CALLBACK.reset(token)


def track(items, description, unit="weight"):
    """Yield each of `items` (a sized iterable), showing the progress.

    Examples:
    >>> seen = []
    >>> with reporting(lambda done, total, what: seen.append((done, total))):
    ...     list(track(["a", "b"], "loading"))
    ['a', 'b']
    >>> seen
    [(0, 2), (1, 2), (2, 2)]
    """
    items = list(items)
    callback = _CALLBACK.get()
    if callback is None:
        yield from tqdm(items, desc=description, unit=unit, disable=None, leave=False)
        return
    for done, item in enumerate(items):
        callback(done, len(items), description)
        yield item
    callback(len(items), len(items), description)
