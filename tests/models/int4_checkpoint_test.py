"""GPTQ and AWQ int4 folders, written by the test in those formats from a
tiny transformers model: keras-gen's logits equal transformers' on the
dequantized weights."""

import json

import keras
import numpy as np
import pytest
import safetensors.numpy

from keras_gen import CausalLM
from keras_gen.models import int4_checkpoint
from tests.models import hf_models

torch = pytest.importorskip("torch")

GROUP = 16
PROJECTIONS = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
AWQ_PACK = [0, 2, 4, 6, 1, 3, 5, 7]  # AutoAWQ's column order in an int32


def _pack(values, axis):
    """Eight 4-bit values per int32 along `axis` (GPTQ's layout)."""
    values = values.astype(np.uint32)
    if axis == 0:
        values = values.reshape(-1, 8, values.shape[1])
        packed = sum(values[:, j, :] << np.uint32(4 * j) for j in range(8))
    else:
        values = values.reshape(values.shape[0], -1, 8)
        packed = sum(values[:, :, j] << np.uint32(4 * j) for j in range(8))
    return packed.astype(np.uint32).view(np.int32)


def quantize_linear(weight, rng, act_order):
    """A `(out, in)` weight as 4-bit values, zeros, float16 scales and
    groups; and its dequantized float weight."""
    inputs = weight.shape[1]
    g_idx = np.arange(inputs) // GROUP
    if act_order:  # GPTQ's act-order: groups follow a permutation of inputs
        g_idx = g_idx[rng.permutation(inputs)]
    groups = inputs // GROUP
    w = weight.T  # (in, out)
    low = np.stack([w[g_idx == g].min(0) for g in range(groups)])
    high = np.stack([w[g_idx == g].max(0) for g in range(groups)])
    scale = ((high - low) / 15).astype(np.float16).astype(np.float32)
    zero = np.clip(np.round(-low / scale), 0, 15).astype(np.int64)
    values = np.clip(np.round(w / scale[g_idx] + zero[g_idx]), 0, 15).astype(np.int64)
    dequantized = (values - zero[g_idx]) * scale[g_idx]
    return values, zero, scale, g_idx, dequantized.T


def write_folder(folder, method, act_order=False):
    model = hf_models.save_model_folder("llama", folder)
    rng = np.random.default_rng(0)
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    tensors = {}
    for key, weight in state.items():
        prefix = key.removesuffix(".weight")
        if prefix.split(".")[-1] not in PROJECTIONS:
            tensors[key] = weight
            continue
        values, zero, scale, g_idx, dequantized = quantize_linear(
            weight, rng, act_order
        )
        state[key] = dequantized
        if method == "gptq":
            tensors[f"{prefix}.qweight"] = _pack(values, axis=0)
            tensors[f"{prefix}.qzeros"] = _pack(zero - 1, axis=1)  # stored minus one
            tensors[f"{prefix}.g_idx"] = g_idx.astype(np.int32)
        else:
            # Slot i of each int32 holds column AWQ_PACK[i] of its eight.
            columns = np.arange(values.shape[1]).reshape(-1, 8)[:, AWQ_PACK].ravel()
            tensors[f"{prefix}.qweight"] = _pack(values[:, columns], axis=1)
            tensors[f"{prefix}.qzeros"] = _pack(zero[:, columns], axis=1)
        tensors[f"{prefix}.scales"] = scale.astype(np.float16)
    model.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    # safetensors writes an array's memory as it lies: C order first.
    tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    safetensors.numpy.save_file(tensors, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = (
        {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": act_order}
        if method == "gptq"
        else {"quant_method": "awq", "bits": 4, "group_size": GROUP, "version": "gemm"}
    )
    (folder / "config.json").write_text(json.dumps(config))
    return model


@pytest.mark.parametrize(
    "method, act_order", [("gptq", False), ("gptq", True), ("awq", False)]
)
def test_logits_equal_transformers_on_the_dequantized_weights(
    method, act_order, tmp_path
):
    reference = write_folder(tmp_path, method, act_order)
    lm = CausalLM.from_pretrained(tmp_path)
    block = lm.backbone.transformer_layers[0]
    assert block.q_proj.quantization_mode == "int4"
    assert block.q_proj.kernel_scale.shape[0] > 1
    assert lm.backbone.embed_tokens.quantization_mode is None
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(lm(np.asarray(hf_models.FULL_BATCH, "int32"))),
        hf_models.logits(reference, hf_models.FULL_BATCH),
        atol=1e-4,
    )
    expected = hf_models.greedy(reference, hf_models.RAGGED_PROMPTS, 8)
    assert lm.generate(hf_models.RAGGED_PROMPTS, max_new_tokens=8) == expected


@pytest.mark.only_backend("jax")
@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"quant_method": "bitsandbytes"}, ValueError, "quant_method"),
        ({"bits": 8}, ValueError, "8-bit"),
        ({"group_size": "16"}, TypeError, "group_size"),
        ({"quant_method": "awq", "version": "gemv"}, ValueError, "GEMM"),
        ({"group_size": 8}, ValueError, "groups"),
    ],
)
def test_a_config_keras_gen_cannot_read_is_named(change, error, match, tmp_path):
    write_folder(tmp_path, "gptq")
    config = json.loads((tmp_path / "config.json").read_text())
    config["quantization_config"].update(change)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(error, match=match):
        CausalLM.from_pretrained(tmp_path)


@pytest.mark.only_backend("jax")
def test_unpacking_reverses_the_formats_packing():
    rng = np.random.default_rng(1)
    values = rng.integers(0, 16, (32, 24))
    np.testing.assert_array_equal(int4_checkpoint._unpack(_pack(values, 0), 0), values)
    np.testing.assert_array_equal(int4_checkpoint._unpack(_pack(values, 1), 1), values)
