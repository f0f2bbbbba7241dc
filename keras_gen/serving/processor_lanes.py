"""The processors an engine's decode step runs, and each slot's numbers."""

import numpy as np

from keras_gen.utils.tunable import parameter_dtype

# The most entries one processor number of one request may hold (a
# `logit_bias` of this many tokens, say): the engine's arrays hold every
# slot's, and grow to the largest seen.
MAX_ENTRIES = 4096


def _config_structure(processor):
    """A processor's structure apart from the shapes of its numbers."""
    return processor.get_structure()[:2]


def _fits(shape, capacity):
    return len(shape) == len(capacity) and all(a <= b for a, b in zip(shape, capacity))


class ProcessorLanes:
    """A fixed chain of processors ("lanes") and, per slot, their numbers.

    The engine's decode program runs every lane on every slot, bound to
    each slot's numbers; a slot's lane flag says whether its request uses
    the lane (the others keep their logits, see `Sampler.process_logits`).
    A request's processors are matched to lanes by class and structure, in
    the lanes' order: the order `generate` applies them in.

    A lane's numbers are arrays of `(slots, *shape)`. A processor whose
    arrays may be padded (`resizable`: ints with -1, floats with 0, which
    mean nothing) may bring larger ones than the lane holds: the lane's
    arrays grow to hold them (a new program: one compile per size bucket
    first seen); any other must match the lane's shapes.

    Args:
        templates: a list of processors, one per lane, in order: what each
            lane runs, and its numbers for slots that do not use it.
        slots: int, the engine's slots.
    """

    def __init__(self, templates, slots):
        self.templates = list(templates)
        self.slots = slots
        self.arrays = []
        for template in self.templates:
            values = template.get_parameters()
            self.arrays.append(
                {
                    name: np.broadcast_to(
                        _row(value), (slots, *_row(value).shape)
                    ).copy()
                    for name, value in values.items()
                }
            )
        self.rows = np.zeros((len(self.templates), slots), bool)

    @property
    def structure(self):
        """The shapes of every lane's arrays: part of the program's key."""
        return tuple(
            tuple((name, array.shape) for name, array in arrays.items())
            for arrays in self.arrays
        )

    def match(self, processors):
        """`[(lane, processor), ...]` for a request's processors, in lane
        order; a `ValueError` naming a processor that no lane runs."""
        matched, start = [], 0
        for processor in processors:
            lane = next(
                (
                    i
                    for i in range(start, len(self.templates))
                    if _config_structure(self.templates[i])
                    == _config_structure(processor)
                ),
                None,
            )
            if lane is None:
                raise ValueError(self._unmatched(processor, matched))
            self._check_shapes(lane, processor)
            matched.append((lane, processor))
            start = lane + 1
        return matched

    def _unmatched(self, processor, matched):
        name = type(processor).__name__
        if any(
            _config_structure(t) == _config_structure(processor) for t in self.templates
        ):
            return (
                f"The engine runs its processors in one order "
                f"({[type(t).__name__ for t in self.templates]}): {name} comes "
                f"after {type(matched[-1][1]).__name__} in this request."
            )
        return (
            f"The engine does not run {name} with this configuration "
            f"({processor.get_config()}): it runs "
            f"{sorted({type(t).__name__ for t in self.templates})}, each with "
            "the configuration it was registered with. Register it with "
            "`Engine(lm, processors={name: ...})`."
        )

    def _check_shapes(self, lane, processor):
        template = self.templates[lane]
        for name, value in processor.get_parameters().items():
            shape = _row(value).shape
            capacity = self.arrays[lane][name].shape[1:]
            if int(np.prod(shape)) > MAX_ENTRIES:
                raise ValueError(
                    f"{type(processor).__name__}'s `{name}` holds "
                    f"{int(np.prod(shape))} entries; the engine takes at most "
                    f"{MAX_ENTRIES}."
                )
            if not template.resizable and shape != capacity:
                raise ValueError(
                    f"{type(processor).__name__}'s `{name}` has shape {shape}; "
                    f"the engine's lane holds {capacity}. Its numbers must keep "
                    "the shapes of the registered processor's."
                )

    def assign(self, slot, matched):
        """Give `slot` the numbers of its request's `matched` processors
        (growing lanes whose arrays are too small); its other lanes off.
        Returns whether a lane grew (the program changes)."""
        grew = False
        self.rows[:, slot] = False
        for lane, processor in matched:
            self.rows[lane, slot] = True
            for name, value in processor.get_parameters().items():
                value = _row(value)
                array = self.arrays[lane][name]
                if not _fits(value.shape, array.shape[1:]):
                    array = self._grow(lane, name, value.shape)
                    grew = True
                padded = np.full(array.shape[1:], _padding(array.dtype), array.dtype)
                padded[tuple(slice(0, n) for n in value.shape)] = value
                array[slot] = padded
        return grew

    def release(self, slot):
        self.rows[:, slot] = False

    def _grow(self, lane, name, shape):
        array = self.arrays[lane][name]
        capacity = tuple(max(a, b) for a, b in zip(array.shape[1:], shape))
        grown = np.full((self.slots, *capacity), _padding(array.dtype), array.dtype)
        grown[tuple(slice(0, n) for n in array.shape)] = array
        self.arrays[lane][name] = grown
        return grown

    def inputs(self, rows):
        """The first `rows` slots' numbers, one dict per lane, and their
        `(rows,)` lane flags."""
        parameters = [
            {name: array[:rows] for name, array in arrays.items()}
            for arrays in self.arrays
        ]
        return parameters, [flags[:rows] for flags in self.rows]


def _row(value):
    """One slot's value of a number: a number as `(1,)`, arrays as they are."""
    value = np.asarray(value, parameter_dtype(value))
    return value.reshape(value.shape or (1,))


def _padding(dtype):
    return -1 if np.issubdtype(dtype, np.integer) else 0
