"""Shared checks for logits processors: transformers parity and contracts."""

import numpy as np
import torch
from keras import ops

VOCAB = 24


def random_case(seed=0, batch=4, length=12, index=8, prompt_lengths=(3, 5, 8, 2)):
    """Random logits and a token buffer with repeats; junk after `index`."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(batch, VOCAB)).astype("float32") * 3
    prompt = rng.integers(0, 6, size=(batch, length)).astype("int32")
    # Positions at and after `index` must be ignored: fill them with ids
    # that never occur before it.
    prompt[:, index:] = VOCAB - 1
    mask = np.arange(length)[None, :] < np.asarray(prompt_lengths)[:, None]
    return logits, prompt, index, mask


def run(processor, logits, prompt, index, mask, **kwargs):
    outputs = processor(
        ops.convert_to_tensor(logits),
        ops.convert_to_tensor(prompt),
        ops.convert_to_tensor(index, "int32"),
        ops.convert_to_tensor(mask),
        **kwargs,
    )
    return ops.convert_to_numpy(outputs)


def run_hf(hf_processor, logits, prompt, index):
    history = torch.as_tensor(prompt[:, :index], dtype=torch.long)
    return hf_processor(history, torch.as_tensor(logits)).numpy()


def assert_parity(processor, hf_processor, seeds=range(4), **kwargs):
    for seed in seeds:
        logits, prompt, index, mask = random_case(seed)
        ours = run(processor, logits, prompt, index, mask, **kwargs)
        theirs = run_hf(hf_processor, logits, prompt, index)
        np.testing.assert_array_equal(np.isinf(ours), np.isinf(theirs))
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


def assert_contracts(processor, **kwargs):
    """No in-place change, same shape, no NaN on an all `-inf` row."""
    logits, prompt, index, mask = random_case(1)
    logits[0] = -np.inf
    copies = logits.copy(), prompt.copy(), mask.copy()
    tensor = ops.convert_to_tensor(logits)
    outputs = ops.convert_to_numpy(
        processor(
            tensor,
            ops.convert_to_tensor(prompt),
            index,
            ops.convert_to_tensor(mask),
            **kwargs,
        )
    )
    np.testing.assert_array_equal(ops.convert_to_numpy(tensor), copies[0])
    np.testing.assert_array_equal(prompt, copies[1])
    assert outputs.shape == logits.shape
    assert not np.isnan(outputs).any()
    assert type(processor).from_config(processor.get_config()).get_config() == (
        processor.get_config()
    )
