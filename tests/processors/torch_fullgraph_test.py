"""Every processor compiles with torch.compile(fullgraph=True), once."""

import contextlib

import numpy as np
import pytest
from keras import ops

from keras_gen import processors as P
from tests.processors import helpers


@pytest.mark.only_backend("torch")
def test_chain_compiles_once_with_advancing_indices():
    import torch

    chain = [
        P.RepetitionPenalty(1.3), P.PresencePenalty(0.2), P.FrequencyPenalty(0.1),
        P.NoRepeatNGram(2), P.BadWords([[3], [1, 2]]), P.LogitBias({4: 1.0, (0, 1): -2.0}),
        P.SuppressTokens([5]), P.MinLength(min_length=9, stop_token_ids=[6]),
        P.ForcedEOS(7, max_length=11), P.TopK(12), P.TopP(0.95), P.MinP(0.01),
        P.Typical(0.95),
    ]
    compiles = []

    def counting(graph_module, example_inputs):
        compiles.append(1)
        return graph_module.forward

    def apply(logits, prompt, index, mask):
        for processor in chain:
            logits = processor(logits, prompt, index, mask)
        return logits

    compiled = torch.compile(apply, fullgraph=True, dynamic=False, backend=counting)
    logits, prompt, _, mask = helpers.random_case(0)
    # As in the generate loop: tunable numbers are bound as tensors.
    parameters = [processor.get_parameter_tensors() for processor in chain]
    stack = contextlib.ExitStack()
    for processor, values in zip(chain, parameters):
        stack.enter_context(processor.bind(values))
    tensors = [ops.convert_to_tensor(x) for x in (logits, prompt, mask)]
    for index in range(4, 11):
        index_tensor = ops.convert_to_tensor(index, "int32")
        outputs = compiled(tensors[0], tensors[1], index_tensor, tensors[2])
        expected = apply(tensors[0], tensors[1], index_tensor, tensors[2])
        np.testing.assert_allclose(
            ops.convert_to_numpy(outputs), ops.convert_to_numpy(expected)
        )
    # New tunable values (same shapes) reuse the graph too.
    for processor, values in zip(chain, parameters):
        new_values = {name: value.clone() + 1 for name, value in values.items()}
        stack.enter_context(processor.bind(new_values))
    compiled(tensors[0], tensors[1], ops.convert_to_tensor(5, "int32"), tensors[2])
    stack.close()
    assert len(compiles) == 1
