"""Tensor helpers that match token sequences inside the compiled loop."""

import numpy as np
from keras import ops

from keras_gen import backend


def _per_row(index):
    return len(getattr(index, "shape", ())) == 1


def _token_at(token_ids, position):
    """`(batch,)` tokens at a scalar position or at `(batch,)` positions."""
    if _per_row(position):
        position = ops.cast(position, "int32")[:, None]
        return ops.take_along_axis(token_ids, position, axis=1)[:, 0]
    return backend.slice(token_ids, position, 1, axis=1)[:, 0]


def suffix_match(token_ids, last, sequences, lengths):
    """Whether the tokens ending at position `last` spell each sequence.

    Args:
        token_ids: `(batch, length)` int token buffer.
        last: scalar int tensor, the position of the last token to compare,
            or one such position per row (`(batch,)` or `(batch, 1)`).
        sequences: `(slots, width)` int ids, padded with -1, for every row,
            or `(batch, slots, width)`: each row's own.
        lengths: `(slots,)` (or `(batch, slots)`) int, how many leading ids
            of each slot count. A length of 0 matches everywhere.

    Returns:
        `(batch, slots)` bool. Sequences that would start before position 0
        do not match. The loop over `width` is unrolled: `width` is static.
    """
    batch, length = ops.shape(token_ids)
    sequences = ops.cast(sequences, "int32")
    lengths = ops.cast(lengths, "int32")
    if len(ops.shape(sequences)) == 2:
        sequences, lengths = sequences[None], lengths[None]
    slots, width = ops.shape(sequences)[1:]
    last = ops.reshape(ops.cast(last, "int32"), (-1, 1))  # (batch or 1, 1)
    match = ops.ones((batch, slots), "bool")
    for t in range(width):
        positions = ops.broadcast_to(last - lengths + 1 + t, (batch, slots))
        clipped = ops.clip(positions, 0, length - 1)
        tokens = ops.take_along_axis(token_ids, clipped, axis=1)
        same = ops.logical_and(tokens == sequences[:, :, t], positions >= 0)
        used = t < lengths
        match = ops.logical_and(match, ops.logical_or(same, ops.logical_not(used)))
    return match


def _bucket(n, minimum):
    return max(minimum, 1 << max(n - 1, 0).bit_length())


def sequence_tensors(stop_sequences, minimum=4):
    """Stop sequences as fixed-shape numpy arrays: the loop's inputs.

    `{"sequences": (slots, width) int32 padded with -1, "lengths":
    (slots,)}`; both sizes are powers of two, so a new set of similar size
    reuses the compiled program. No sequences gives one empty slot.
    """
    stop_sequences = [list(s) for s in stop_sequences or []]
    slots = _bucket(len(stop_sequences), minimum)
    width = _bucket(max([len(s) for s in stop_sequences] + [1]), minimum)
    sequences = np.full((slots, width), -1, "int32")
    lengths = np.zeros((slots,), "int32")
    for i, sequence in enumerate(stop_sequences):
        sequences[i, : len(sequence)] = sequence
        lengths[i] = len(sequence)
    return {"sequences": sequences, "lengths": lengths}


def string_tables(pieces, stop_strings, minimum=4):
    """Per-token tables that let the loop match `stop_strings` on any split.

    `pieces[t]` is the text of token `t`. A stop string of `c` characters
    ends the text when the last token contains its last character with the
    characters before it matching (the token may run past the string), and
    the earlier tokens each cover a piece of the rest (the earliest may
    start before the string), as in transformers' `StopStringCriteria`.
    The loop tracks `a`, how many leading characters remain to be covered:

    - `final[t, s, a]`: the last token `t` leaves `a` characters of string
      `s` uncovered (`a = 0`: a match within one token).
    - `fits[t, s, a]`: an earlier token `t` covers the end of `s[:a]`
      (leaving `max(a - len(t), 0)`).
    - `piece_lengths[t]`: the length of `pieces[t]`.
    """
    slots = _bucket(len(stop_strings), 2)
    width = _bucket(max(len(s) for s in stop_strings), minimum)
    final = np.zeros((len(pieces), slots, width + 1), bool)
    fits = np.zeros((len(pieces), slots, width + 1), bool)
    for s, stop in enumerate(stop_strings):
        c = len(stop)
        # `stop[:a].endswith(piece)`: the piece is the substring of `stop`
        # that ends at `a`; found by a lookup, not by trying every `a`.
        inside = {}
        for a in range(1, c + 1):
            for start in range(a):
                inside.setdefault(stop[start:a], []).append(a)
        for t, piece in enumerate(pieces):
            if not piece:
                continue
            i = piece.find(stop[-1])
            while i >= 0:
                overlap = min(i + 1, c)
                if piece[i + 1 - overlap : i + 1] == stop[c - overlap :]:
                    final[t, s, c - overlap] = True
                i = piece.find(stop[-1], i + 1)
            fits[t, s, inside.get(piece, [])] = True
            # `piece.endswith(stop[:a])`: `a` up to the piece's length.
            for a in range(1, min(len(piece), c) + 1):
                if piece[-a:] == stop[:a]:
                    fits[t, s, a] = True
    lengths = np.asarray([len(p) for p in pieces], "int32")
    return {"final": final, "fits": fits, "piece_lengths": lengths}


def string_match(token_ids, index, tables):
    """`(batch,)` bool: the tokens up to `index` (a scalar or `(batch,)`)
    end with a stop string.

    Walks back one token per loop step (a loop, not unrolled: the program
    does not grow with the strings' length)."""
    width = ops.shape(tables["final"])[-1] - 1
    token = _token_at(token_ids, index)
    alive = ops.take(tables["final"], token, axis=0)  # (batch, slots, width + 1)
    hit = alive[..., 0]
    uncovered = ops.arange(width + 1, dtype="int32")[None, :]

    def back(step, carried):
        # Each earlier token covers at least one character: `width` tokens
        # back at most.
        alive, hit = carried
        position = index - step
        token = _token_at(token_ids, ops.maximum(position, 0))
        pieces = ops.cast(ops.take(tables["piece_lengths"], token, axis=0), "int32")
        fits = ops.take(tables["fits"], token, axis=0)
        started = position >= 0
        if _per_row(position):
            started = started[:, None, None]
        moved = ops.logical_and(ops.logical_and(alive, fits), started)
        covered = (uncovered <= pieces[:, None])[:, None, :]
        hit = ops.logical_or(hit, ops.any(ops.logical_and(moved, covered), axis=-1))
        source = uncovered + pieces[:, None]  # (batch, width + 1)
        source = ops.broadcast_to(
            ops.minimum(source, width)[:, None, :], ops.shape(moved)
        )
        alive = ops.logical_and(
            ops.take_along_axis(moved, source, axis=-1),
            (uncovered + pieces[:, None] <= width)[:, None, :],
        )
        return alive, hit

    _, hit = ops.fori_loop(1, width, back, (alive, hit))
    return ops.any(hit, axis=-1)


def stop_match(token_ids, index, stop):
    """`(batch,)` bool: the row ends at `index` with a stop sequence or string.

    `index` is a scalar or a `(batch,)` tensor (one position per row).

    `stop` holds `sequences` and `lengths` (see `sequence_tensors`) and
    optionally the stop string tables of `string_tables`.
    """
    lengths = ops.cast(stop["lengths"], "int32")
    match = suffix_match(token_ids, index, stop["sequences"], lengths)
    hit = ops.any(ops.logical_and(match, (lengths > 0)[None, :]), axis=-1)
    if "final" in stop:
        hit = ops.logical_or(hit, string_match(token_ids, index, stop))
    return hit
