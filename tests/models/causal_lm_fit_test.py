"""`CausalLM` as a Keras task model: padding in `call`, `fit` on text, and
`compile` for generation keeping the optimizer."""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_gen.models import GPT2CausalLM
from keras_gen.models import LlamaCausalLM
from tests.conftest import tiny_gpt2_backbone
from tests.models.llama.llama_backbone_test import tiny_llama_backbone
from tests.text_models import TEXT
from tests.text_models import tiny_text_lm

ROOT = pathlib.Path(__file__).parents[2]


def _loss(lm, token_ids, mask):
    """The loss `fit` computes for next-token prediction on one batch."""
    token_ids, mask = np.asarray(token_ids, "int32"), np.asarray(mask, "int32")
    inputs = {"token_ids": token_ids[:, :-1], "padding_mask": mask[:, :-1]}
    weights = (mask[:, 1:] * mask[:, :-1]).astype("float32")
    return lm.evaluate(
        inputs, token_ids[:, 1:], sample_weight=weights, verbose=0, return_dict=True
    )["loss"]


@pytest.mark.parametrize(
    "make", [tiny_gpt2_backbone, tiny_llama_backbone], ids=["gpt2", "llama"]
)
def test_a_padded_row_has_the_loss_of_the_row_alone(make):
    lm = (GPT2CausalLM if make is tiny_gpt2_backbone else LlamaCausalLM)(make())
    row = [5, 9, 12, 30, 7, 3]
    alone = _loss(lm, [row], [[1] * 6])
    left = _loss(lm, [[0, 0, 0] + row], [[0, 0, 0] + [1] * 6])
    right = _loss(lm, [row + [0, 0, 0]], [[1] * 6 + [0, 0, 0]])
    np.testing.assert_allclose([left, right], [alone, alone], rtol=1e-5)
    # Logits of the real tokens too, not only their mean.
    logits = keras.ops.convert_to_numpy(lm(np.array([row])))
    padded = lm(
        {
            "token_ids": np.array([[0, 0, 0] + row]),
            "padding_mask": np.array([[0] * 3 + [1] * 6]),
        }
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(padded)[:, 3:], logits, atol=1e-5
    )
    # Two rows of two lengths: the mean over every real token of both.
    short = [40, 41, 42]
    both = _loss(lm, [row, short + [0, 0, 0]], [[1] * 6, [1] * 3 + [0] * 3])
    expected = (alone * 5 + _loss(lm, [short], [[1] * 3]) * 2) / 7
    np.testing.assert_allclose(both, expected, rtol=1e-5)


def test_fit_on_text_memorizes_a_sentence():
    lm = tiny_text_lm()
    lm.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = lm.fit([TEXT[0]] * 8, epochs=40, batch_size=8, verbose=0)
    assert history.history["loss"][-1] < 0.1 * history.history["loss"][0]
    assert history.history["accuracy"][-1] > 0.9
    # It learnt the end token too: generation stops there.
    assert lm.generate("The for", max_new_tokens=60, do_sample=False) == TEXT[0]


def test_fit_takes_validation_text_and_preprocessing_options():
    lm = tiny_text_lm()
    lm.compile(optimizer=keras.optimizers.Adam(1e-2))
    pairs = [(text[:12], text[12:]) for text in TEXT]
    history = lm.fit(
        pairs,
        validation_data=TEXT[:2],
        epochs=2,
        batch_size=4,
        sequence_length=16,
        verbose=0,
    )
    assert set(history.history) >= {"loss", "val_loss", "accuracy", "val_accuracy"}
    # `sequence_length` applied to this call only.
    assert lm.preprocessor.sequence_length == 256
    assert np.isfinite(lm.evaluate(TEXT, verbose=0)[0])
    with pytest.raises(ValueError, match="Text is its own label"):
        lm.fit(TEXT, np.zeros((4, 3)))
    with pytest.raises(ValueError, match="`x` is empty"):
        lm.fit([])
    with pytest.raises(ValueError, match="apply to text"):
        lm.fit(np.zeros((2, 4), "int32"), np.zeros((2, 4), "int32"), packing=True)


def test_fit_on_chats_learns_the_replies():
    lm = tiny_text_lm()
    lm.compile(optimizer=keras.optimizers.Adam(1e-2))
    chat = [
        {"role": "user", "content": "A class"},
        {"role": "assistant", "content": "definition defines a class object."},
    ]
    lm.fit([chat] * 4, epochs=40, batch_size=4, verbose=0)
    # The default template's prompt; the reply and its line end were learnt.
    prompt = "User: A class\nAssistant:"
    reply = lm.generate(prompt, max_new_tokens=20, do_sample=False, strip_prompt=True)
    assert reply.startswith(" definition defines a class object.")
    # NumPy arrays of strings read as lists.
    assert np.isfinite(lm.evaluate(np.array(TEXT), verbose=0)[0])


def test_fit_on_a_dataset_of_strings():
    tf = pytest.importorskip("tensorflow")
    lm = tiny_text_lm()
    lm.compile(optimizer=keras.optimizers.Adam(1e-2))
    dataset = tf.data.Dataset.from_tensor_slices(TEXT).repeat(2)
    history = lm.fit(dataset, epochs=2, batch_size=4, sequence_length=24, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_compile_for_generation_keeps_the_optimizer_and_its_state():
    lm = tiny_text_lm()
    lm.compile(optimizer=keras.optimizers.AdamW(1e-3))
    lm.fit(TEXT, epochs=2, batch_size=2, verbose=0)
    optimizer = lm.optimizer
    before = [keras.ops.convert_to_numpy(v) for v in optimizer.variables]
    assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == 4
    lm.compile(sampler="top_k")
    lm.compile(processors=["repetition_penalty"])
    assert lm.optimizer is optimizer
    after = [keras.ops.convert_to_numpy(v) for v in optimizer.variables]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    assert len(before) > 2  # the moments, not only the counters
    lm.fit(TEXT, epochs=1, batch_size=2, verbose=0)
    assert int(keras.ops.convert_to_numpy(lm.optimizer.iterations)) == 6
    # Naming a training setting compiles training again, still keeping
    # the optimizer unless one is given.
    lm.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert lm.optimizer is optimizer
    lm.compile(optimizer="sgd")
    assert isinstance(lm.optimizer, keras.optimizers.SGD)


def test_a_new_trainable_set_asks_for_a_new_optimizer():
    lm = tiny_text_lm()
    lm.fit(TEXT, epochs=1, batch_size=4, verbose=0)
    lm.backbone.enable_lora(2)
    with pytest.raises(ValueError, match="lm.compile\\(optimizer=...\\)"):
        lm.fit(TEXT, epochs=1, batch_size=4, verbose=0)
    lm.compile(optimizer=keras.optimizers.Adam(1e-3))
    lm.fit(TEXT, epochs=1, batch_size=4, verbose=0)


@pytest.mark.only_backend("jax")
@pytest.mark.slow
def test_data_parallel_fit_matches_one_device(tmp_path):
    out = tmp_path / "report.json"
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
    }
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "models" / "data_parallel_fit.py"),
            str(out),
        ],
        env=env,
        check=True,
        timeout=600,
    )
    report = json.loads(out.read_text())
    assert report["devices"] == 8 and report["replicated"]
    np.testing.assert_allclose(report["parallel_losses"], report["losses"], rtol=1e-5)
    assert report["losses"][-1] < report["losses"][0]
    assert report["weight_difference"] < 1e-5
