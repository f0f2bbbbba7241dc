"""Fine-tune with LoRA on text, then save the adapter in PEFT's format.

The demo model learnt the Python language reference; here it learns the
style of the standard library's docstrings. Training and validation texts
come from different modules.

python examples/finetune_lora.py [MODEL] [--steps N] [--texts N] [--out FOLDER]
"""

import argparse
import importlib
import inspect
import os
import tempfile

import keras

import keras_gen

TRAIN_MODULES = (
    "collections",
    "itertools",
    "functools",
    "textwrap",
    "string",
    "json",
    "csv",
    "random",
    "statistics",
    "heapq",
    "bisect",
)
VALIDATION_MODULES = ("shutil", "fnmatch", "glob")


def docstrings(modules):
    """The docstrings of each module's public functions and classes."""
    texts = []
    for name in modules:
        module = importlib.import_module(name)
        for attribute in sorted(dir(module)):
            doc = inspect.getdoc(getattr(module, attribute))
            if not attribute.startswith("_") and doc and len(doc) > 80:
                texts.append(f"{name}.{attribute}: {doc}")
    return sorted(set(texts))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="demo")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", default=None, help="where the adapter goes")
    parser.add_argument("--texts", type=int, default=None, help="train on the first N")
    args = parser.parse_args(argv)

    lm = keras_gen.CausalLM.from_preset(args.model)
    train, validation = docstrings(TRAIN_MODULES), docstrings(VALIDATION_MODULES)
    train = train[: args.texts]
    # Rows of 128 tokens, the texts packed end to end: no padding.
    lm.preprocessor = lm.preprocessor.replace(sequence_length=128, packing=True)

    lm.backbone.enable_lora(8, target_modules="all-linear")
    trainable = sum(int(keras.ops.size(v)) for v in lm.trainable_weights)
    total = sum(int(keras.ops.size(v)) for v in lm.weights)
    print(f"training {trainable:,} of {total:,} weights")
    lm.compile(optimizer=keras.optimizers.Adam(2e-3))

    before = lm.evaluate(validation, batch_size=8, verbose=0)[0]
    rows = len(lm.preprocessor(train)[1])
    epochs = max(1, round(args.steps * 8 / rows))
    lm.fit(train, epochs=epochs, batch_size=8)  # Keras shows its progress
    after = lm.evaluate(validation, batch_size=8, verbose=0)[0]
    print(
        f"validation loss {before:.3f} -> {after:.3f} ({epochs} epochs of {rows} rows)"
    )

    out = args.out or tempfile.mkdtemp()
    lm.save_lora(os.path.join(out, "adapter"))
    print("adapter:", sorted(os.listdir(os.path.join(out, "adapter"))))
    # Merged, generation costs what it cost before the adapter.
    lm.backbone.merge_lora()
    print(lm.generate("shutil.copy: ", max_new_tokens=40, do_sample=False))


if __name__ == "__main__":
    main()
