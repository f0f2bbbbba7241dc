"""Adapters in PEFT's format: written here and loaded by `peft` onto the
transformers model, written by `peft` and loaded here; merged models loaded
by transformers. Logits compared on tiny random checkpoints."""

import json
import os

import keras
import numpy as np
import pytest

peft = pytest.importorskip("peft")

from keras_gen.models import CausalLM  # noqa: E402
from keras_gen.training import lora  # noqa: E402
from tests.models import hf_models  # noqa: E402

transformers = hf_models.transformers
TOKENS = np.array(hf_models.FULL_BATCH)
# Logits of these checkpoints are large (weights scaled up): 1e-4 is tight.
ATOL = 1e-4
# Families and their targets. Mixture-of-experts models adapt attention:
# experts take no adapters, and peft maps their dense MLP's names onto the
# experts of transformers' fused expert weights.
CASES = {
    "gpt2": "all-linear",
    "llama": "all-linear",
    "phi3": "all-linear",
    "gemma2": ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj"],
    "olmo2": "all-linear",
    "qwen3_moe": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mixtral": None,
}


@pytest.fixture(scope="module", params=sorted(CASES))
def checkpoint(request, tmp_path_factory):
    kind = request.param
    folder = tmp_path_factory.mktemp(kind)
    hf_models.save_model_folder(kind, str(folder))
    return kind, str(folder)


def _logits(lm):
    return keras.ops.convert_to_numpy(lm(TOKENS))


def test_saved_adapters_load_in_peft_and_merge_for_transformers(checkpoint, tmp_path):
    kind, folder = checkpoint
    lm = CausalLM.from_pretrained(folder)
    lm.backbone.enable_lora(4, target_modules=CASES[kind], lora_alpha=6)
    # Only the adapters train: r * (in + out) numbers per projection.
    layers = lora.adapted(lm.backbone)
    expected = sum(4 * sum(layer.kernel.shape) for layer in layers)
    assert sum(int(np.prod(v.shape)) for v in lm.trainable_weights) == expected
    rng = np.random.default_rng(0)
    for layer in lora.adapted(lm.backbone):
        shape = layer.lora_kernel_b.shape
        layer.lora_kernel_b.assign(0.1 * rng.standard_normal(shape).astype("float32"))
    ours = _logits(lm)
    base = hf_models.make_model(kind)
    assert np.abs(ours - hf_models.logits(base, TOKENS)).max() > 10 * ATOL
    lm.save_lora(tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert (
        config["peft_type"] == "LORA" and config["r"] == 4 and config["lora_alpha"] == 6
    )
    assert config["fan_in_fan_out"] == (kind == "gpt2")
    adapted = peft.PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
    np.testing.assert_allclose(hf_models.logits(adapted, TOKENS), ours, atol=ATOL)
    # `save_pretrained` writes the kernels merged.
    lm.save_pretrained(tmp_path / "merged")
    merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    np.testing.assert_allclose(hf_models.logits(merged.eval(), TOKENS), ours, atol=ATOL)


def test_adapters_peft_wrote_load_here(checkpoint, tmp_path):
    kind, folder = checkpoint
    targets = CASES[kind]
    config = peft.LoraConfig(
        r=3,
        lora_alpha=5,
        target_modules=targets
        if targets == "all-linear"
        else list(targets or ["q_proj", "v_proj"]),
        # Random A and B: a non-zero adapter to compare.
        init_lora_weights=False,
        # rsLoRA scales by alpha / sqrt(r): read as such.
        use_rslora=kind == "llama",
        rank_pattern={"o_proj": 2} if kind == "llama" else {},
    )
    adapted = peft.get_peft_model(hf_models.make_model(kind), config).eval()
    adapted.save_pretrained(tmp_path / "adapter")
    lm = CausalLM.from_pretrained(folder)
    count = lm.load_lora(tmp_path / "adapter")
    assert count == len(lora.adapted(lm.backbone)) > 0
    np.testing.assert_allclose(
        _logits(lm), hf_models.logits(adapted, TOKENS), atol=ATOL
    )
    # Only the adapters train.
    assert all("lora_kernel" in v.path for v in lm.trainable_weights)
    # Saved back, the same adapter.
    lm.save_lora(tmp_path / "again")
    again = peft.PeftModel.from_pretrained(
        hf_models.make_model(kind), str(tmp_path / "again")
    ).eval()
    np.testing.assert_allclose(hf_models.logits(again, TOKENS), _logits(lm), atol=ATOL)


def test_adapters_that_cannot_load_say_why(tmp_path):
    folder = tmp_path / "llama"
    hf_models.save_model_folder("llama", str(folder))
    lm = CausalLM.from_pretrained(folder)
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        lm.load_lora(tmp_path)
    for change, message in [
        ({"peft_type": "IA3"}, "LoRA adapters only"),
        ({"use_dora": True}, "use_dora"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    ]:
        adapter = tmp_path / f"adapter_{message[:4]}"
        config = peft.LoraConfig(r=2, target_modules=["q_proj"])
        peft.get_peft_model(hf_models.make_model("llama"), config).save_pretrained(
            adapter
        )
        written = json.loads((adapter / "adapter_config.json").read_text())
        (adapter / "adapter_config.json").write_text(json.dumps({**written, **change}))
        with pytest.raises(ValueError, match=message):
            lm.load_lora(adapter)
    # An adapter of the embedding: its targets name no projection.
    adapter = tmp_path / "embedding"
    config = peft.LoraConfig(r=2, target_modules=["embed_tokens"])
    peft.get_peft_model(hf_models.make_model("llama"), config).save_pretrained(adapter)
    with pytest.raises(
        ValueError, match="match none of this LlamaBackbone's projections"
    ):
        lm.load_lora(adapter)
    os.remove(adapter / "adapter_model.safetensors")
    with pytest.raises(FileNotFoundError, match="never pickle"):
        lm.load_lora(adapter)
