"""Every processor compiles with torch.compile(fullgraph=True), once."""

import numpy as np
import pytest
from keras import ops

from keras_gen import processors as P
from tests.processors import helpers


@pytest.mark.only_backend("torch")
def test_chain_compiles_once_with_advancing_indices():
    import torch

    chain = [
        P.RepetitionPenalty(1.3),
        P.PresencePenalty(0.2),
        P.FrequencyPenalty(0.1),
        P.NoRepeatNGram(2),
        P.BadWords([[3], [1, 2]]),
        P.LogitBias({4: 1.0, (0, 1): -2.0}),
        P.SuppressTokens([5]),
        P.MinLength(min_length=9, stop_token_ids=[6]),
        P.ForcedEOS(7, max_length=11),
        P.TopK(12),
        P.TopP(0.95),
        P.MinP(0.01),
        P.Typical(0.95),
    ]
    compiles = []

    def counting(graph_module, example_inputs):
        compiles.append(1)
        return graph_module.forward

    def apply(logits, prompt, index, mask, parameters):
        # As in the generate loop: copies bound to the program's inputs,
        # one value per row.
        rows = logits.shape[0]
        for processor, values in zip(chain, parameters):
            logits = processor.with_parameters(values, rows)(
                logits, prompt, index, mask
            )
        return logits

    compiled = torch.compile(apply, fullgraph=True, dynamic=False, backend=counting)
    logits, prompt, _, mask = helpers.random_case(0)
    parameters = [processor.get_parameter_tensors() for processor in chain]
    tensors = [ops.convert_to_tensor(x) for x in (logits, prompt, mask)]
    for index in range(4, 11):
        index_tensor = ops.convert_to_tensor(index, "int32")
        arguments = (tensors[0], tensors[1], index_tensor, tensors[2], parameters)
        np.testing.assert_allclose(
            ops.convert_to_numpy(compiled(*arguments)),
            ops.convert_to_numpy(apply(*arguments)),
        )
    # New tunable values (same shapes) reuse the graph too.
    parameters = [
        {name: value.clone() + 1 for name, value in values.items()}
        for values in parameters
    ]
    compiled(
        tensors[0],
        tensors[1],
        ops.convert_to_tensor(5, "int32"),
        tensors[2],
        parameters,
    )
    assert len(compiles) == 1
