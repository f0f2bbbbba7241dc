import json
import os
import subprocess
import sys
import warnings

import pytest

from keras_gen.models import GPT2CausalLM
from keras_gen.processors import LogitsProcessor
from tests.conftest import tiny_gpt2_backbone

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = [[5, 9, 2, 33, 61], [7], [1, 2, 3]]


def _llama_with_long_rope_tables():
    from keras_gen.models import LlamaCausalLM
    from tests.models.llama.llama_backbone_test import tiny_llama_backbone

    # 64 frequencies a head (head_dim 128): Inductor left rope tables made
    # inside the step's block region unbound ("non-tensor input"); the 4
    # of tiny heads it inlined.
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}
    return LlamaCausalLM(tiny_llama_backbone(head_dim=128, rope_scaling=yarn))


@pytest.mark.slow
@pytest.mark.only_backend("torch")
@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_inductor_compiled_step_equals_eager_and_compiles_once(
    monkeypatch, traces, model
):
    from keras_gen.backend import torch_backend

    if model == "gpt2":
        lm = GPT2CausalLM(tiny_gpt2_backbone())
    else:
        lm = _llama_with_long_rope_tables()
    monkeypatch.setattr(torch_backend, "COMPILER", "none")
    eager = lm.generate(PROMPTS, max_new_tokens=10)
    monkeypatch.setattr(torch_backend, "COMPILER", "inductor")
    assert lm.generate(PROMPTS, max_new_tokens=10) == eager
    assert traces() == 1
    # Other prompts and lengths in the same bucket reuse the compiled step.
    lm.generate([[4, 4, 4], [1, 2], [9]], max_new_tokens=12)
    assert traces() == 1


@pytest.mark.only_backend("torch")
def test_jit_compile_false_runs_the_step_eagerly(traces):
    lm = GPT2CausalLM(tiny_gpt2_backbone())
    lm.compile(jit_compile=False)
    lm.generate(PROMPTS, max_new_tokens=4)
    assert traces() == 0


class _HostProcessor(LogitsProcessor):
    # A Python branch on a tensor: Dynamo cannot keep that in one graph.
    def __call__(self, logits, prompt, index, mask):
        if bool(logits.sum() > 1e30):
            return logits * 2.0
        return logits


@pytest.mark.only_backend("torch")
def test_a_step_dynamo_cannot_capture_runs_eagerly_with_a_warning(traces):
    lm = GPT2CausalLM(tiny_gpt2_backbone())
    lm.compile(jit_compile=False, processors=[_HostProcessor()])
    expected = lm.generate(PROMPTS, max_new_tokens=6)
    lm.compile(processors=[_HostProcessor()])
    with pytest.warns(UserWarning, match="runs eagerly"):
        assert lm.generate(PROMPTS, max_new_tokens=6) == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # decided once per program
        assert lm.generate(PROMPTS, max_new_tokens=6) == expected


@pytest.mark.only_backend("torch")
@pytest.mark.parametrize("quantize_activations", [True, False])
def test_an_int8_step_compiles(traces, quantize_activations):
    lm = GPT2CausalLM(tiny_gpt2_backbone())
    lm.quantize("int8", quantize_activations=quantize_activations)
    lm.compile(jit_compile=False)
    expected = lm.generate(PROMPTS, max_new_tokens=6)
    lm.compile()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert lm.generate(PROMPTS, max_new_tokens=6) == expected
    assert traces() == 1
    # Its int8 kernels are laid out output-major, as float ones are.
    kernel = lm.backbone.transformer_layers[0].c_fc._kernel.value
    assert kernel.stride() == (1, kernel.shape[0])


@pytest.mark.only_backend("torch")
def test_kernels_are_laid_out_output_major_with_their_values_and_parameters():
    import numpy as np

    lm = GPT2CausalLM(tiny_gpt2_backbone())
    kernels = [v for v in lm.variables if v.path.endswith("kernel")]
    parameters = [v.value for v in kernels]
    before = [np.array(v) for v in kernels]
    expected = lm.generate(PROMPTS, max_new_tokens=4)
    for variable, parameter, values in zip(kernels, parameters, before):
        assert variable.value is parameter
        assert variable.value.stride() == (1, variable.shape[0])
        np.testing.assert_array_equal(np.array(variable), values)
    # A later assign keeps the layout.
    kernels[0].assign(before[0] * 2)
    assert kernels[0].value.stride() == (1, kernels[0].shape[0])
    kernels[0].assign(before[0])
    assert lm.generate(PROMPTS, max_new_tokens=4) == expected


@pytest.mark.only_backend("torch")
def test_the_product_forms_are_timed_once_per_row_class_and_agree(monkeypatch):
    import numpy as np

    from keras_gen.backend import torch_backend

    # Time even this tiny model's kernels, in a fresh process-wide choice.
    monkeypatch.setattr(torch_backend, "_TIMED_BYTES", 0)
    monkeypatch.setattr(torch_backend, "_FORMS", {})
    lm = GPT2CausalLM(tiny_gpt2_backbone())
    kwargs = dict(max_new_tokens=6, return_dict=True, output_log_probs=True)
    # One row, two, and eight (prefill: more).
    batches = [PROMPTS[:1], PROMPTS[:2], (PROMPTS * 3)[:8]]
    chosen = [lm.generate(batch, **kwargs) for batch in batches]
    assert torch_backend._FORMS.pop("timed")
    assert set(torch_backend._FORMS) == set(torch_backend._ROW_CLASSES)
    assert set(torch_backend._FORMS.values()) <= {"linear", "product", "onednn"}
    for form in ("linear", "product", "onednn"):
        torch_backend._FORMS.update(dict.fromkeys(torch_backend._ROW_CLASSES, form))
        lm.compile()
        for batch, expected in zip(batches, chosen):
            other = lm.generate(batch, **kwargs)
            assert other.token_ids == expected.token_ids, form
            for a, b in zip(other.log_probs, expected.log_probs):
                np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.only_backend("torch")
def test_the_forms_chosen_are_kept_for_the_next_process(monkeypatch, tmp_path):
    from keras_gen.backend import torch_backend

    path = tmp_path / "forms.json"
    monkeypatch.setattr(torch_backend, "_forms_path", lambda: str(path))
    monkeypatch.setattr(torch_backend, "_TIMED_BYTES", 0)
    variables = GPT2CausalLM(tiny_gpt2_backbone()).backbone.weights
    timed = []

    def time_forms(kernels):
        timed.append(len(kernels))
        return dict.fromkeys(torch_backend._ROW_CLASSES, "onednn")

    monkeypatch.setattr(torch_backend, "_time_forms", time_forms)
    for _ in range(2):  # two processes: each starts with no choice
        monkeypatch.setattr(torch_backend, "_FORMS", {})
        torch_backend._choose_forms(variables)
        assert torch_backend._FORMS == {
            **dict.fromkeys(torch_backend._ROW_CLASSES, "onednn"),
            "timed": True,
        }
    assert len(timed) == 1
    # Other kernels are timed for themselves; a file that is not a choice
    # is timed over and rewritten.
    monkeypatch.setattr(torch_backend, "_FORMS", {})
    torch_backend._choose_forms(GPT2CausalLM(tiny_gpt2_backbone(hidden_dim=32)).weights)
    assert len(timed) == 2 and len(json.loads(path.read_text())) == 2
    for junk in ("[1, 2]", "{not json", '{"k": {"1": "fastest"}}'):
        path.write_text(junk)
        monkeypatch.setattr(torch_backend, "_FORMS", {})
        torch_backend._choose_forms(variables)
        assert torch_backend._FORMS[1] == "onednn"
    assert len(timed) == 5 and len(json.loads(path.read_text())) == 1


@pytest.mark.only_backend("torch")
def test_the_onednn_form_is_not_used_where_gradients_flow(monkeypatch):
    import torch

    from keras_gen.backend import torch_backend

    monkeypatch.setattr(torch_backend, "_FORMS", {**torch_backend._FORMS, 8: "onednn"})
    x = torch.randn(8, 4, requires_grad=True)
    w = torch.randn(3, 4)
    torch_backend.matmul_transposed(x, w).sum().backward()
    torch.testing.assert_close(x.grad, w.sum(0).expand(8, 4))


@pytest.mark.slow
@pytest.mark.only_backend("torch")
@pytest.mark.parametrize("form", ["linear", "product", "onednn"])
def test_the_compiled_step_reads_logits_of_every_product_form(monkeypatch, form):
    # The `(w @ x.T).T` form leaves the logits transposed in Inductor's
    # program, and the sampler's `torch.cond` branches were compiled for
    # row-major ones (the step failed on its input's strides).
    from keras_gen.backend import torch_backend

    forms = dict.fromkeys(torch_backend._ROW_CLASSES, form)
    monkeypatch.setattr(torch_backend, "_FORMS", {**forms, "timed": True})
    lm = GPT2CausalLM(tiny_gpt2_backbone(vocabulary_size=1000))
    # Greedy, and sampled through processors (a cond inside a cond reads
    # a broadcast operand).
    calls = [{}, dict(repetition_penalty=1.3, top_k=5, seed=0)]
    monkeypatch.setattr(torch_backend, "COMPILER", "none")
    eager = [lm.generate(PROMPTS[:2], max_new_tokens=6, **c) for c in calls]
    monkeypatch.setattr(torch_backend, "COMPILER", "inductor")
    lm.compile()
    assert [lm.generate(PROMPTS[:2], max_new_tokens=6, **c) for c in calls] == eager


# Generates with processors (a `torch.cond` inside the step) in a process of
# its own; prints the tokens and Inductor's cache counts.
_CACHED_RUN = """
import json
from torch._dynamo.utils import counters
from keras_gen.models import GPT2CausalLM
from tests.conftest import tiny_gpt2_backbone
lm = GPT2CausalLM(tiny_gpt2_backbone())
tokens = lm.generate(
    [[5, 9, 2], [7]], max_new_tokens=6, repetition_penalty=1.3, top_k=5, seed=0
)
print(json.dumps({"tokens": tokens, "counts": dict(counters["inductor"])}))
"""


@pytest.mark.slow
@pytest.mark.only_backend("torch")
def test_a_later_process_reads_the_compiled_step_from_the_cache(tmp_path):
    # The sampler's branches are `torch.cond`s, whose graphs Inductor keeps
    # only when told it may: without that every start compiled the step
    # again (the demo's Engine: 55-60 s against 19 s).
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "KERAS_GEN_TORCH_COMPILER": "inductor",
        "KERAS_GEN_COMPILATION_CACHE": str(tmp_path / "cache"),
    }
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", _CACHED_RUN],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    first, second = runs
    assert first["counts"].get("fxgraph_cache_miss", 0) >= 1
    assert second["counts"].get("fxgraph_cache_miss", 0) == 0
    assert second["counts"].get("fxgraph_cache_hit", 0) >= 1
    assert "fxgraph_cache_bypass" not in second["counts"]
    assert second["tokens"] == first["tokens"]


def _step_graphs(monkeypatch):
    """The graphs the compiled steps run, recorded (and run as traced)."""
    from keras_gen.backend import torch_backend

    graphs = []

    def record(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    monkeypatch.setattr(torch_backend, "COMPILER", record)
    return graphs


def _block_subgraphs(graph_module):
    """The subgraph each `invoke_subgraph` of the step calls, in order."""
    return [
        node.args[0].target
        for node in graph_module.graph.nodes
        if node.op == "call_function" and "invoke_subgraph" in str(node.target)
    ]


@pytest.mark.only_backend("torch")
@pytest.mark.parametrize(
    "overrides",
    [{}, {"sliding_window": 2, "sliding_window_layers": [1]}],
    ids=["alike", "one_windowed"],
)
def test_the_step_traces_a_block_once_for_the_blocks_alike(monkeypatch, overrides):
    from keras_gen.backend import torch_backend
    from keras_gen.models import LlamaCausalLM
    from tests.models.llama.llama_backbone_test import tiny_llama_backbone

    lm = LlamaCausalLM(tiny_llama_backbone(num_layers=3, **overrides))
    monkeypatch.setattr(torch_backend, "COMPILER", "none")
    eager = lm.generate(PROMPTS, max_new_tokens=8)
    graphs = _step_graphs(monkeypatch)
    assert lm.generate(PROMPTS, max_new_tokens=8) == eager
    (step,) = graphs
    called = _block_subgraphs(step)
    if not overrides:
        assert len(called) == 3 and len(set(called)) == 1
    else:
        # The windowed block reads another window: it is traced on its
        # own, and the first and last blocks share one graph.
        assert len(called) >= 2 and called[0] == called[-1]
