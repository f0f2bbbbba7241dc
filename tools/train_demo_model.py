"""Train the bundled demo model: a small GPT-2 on Python's own documentation.

The corpus is `pydoc_data.topics`, the help texts that every CPython
installation carries (what `help("if")` prints): about 460 KB of English
prose and code on the Python language. The tool trains a byte-level BPE
tokenizer on it with `tokenizers`, then a small GPT-2 with Keras `fit` on
the JAX backend, and writes a Hugging Face style folder that
`CausalLM.from_preset("demo")` loads:

    config.json, model.safetensors, generation_config.json,
    tokenizer.json, tokenizer_config.json, training.json

`training.json` records every setting, the corpus digest, the Python
version, the loss curve and the final validation loss.

Everything is seeded: the same Python version (same corpus) and the same
settings give the same tokenizer and, on CPU, the same weights.

Usage:
    python tools/train_demo_model.py                      # the bundled model
    python tools/train_demo_model.py --steps 50 --output /tmp/demo  # a quick try
"""

import argparse
import hashlib
import json
import os
import platform
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pydoc_data.topics  # noqa: E402

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUTPUT = os.path.join(HERE, "..", "keras_gen", "presets", "demo")
END_OF_TEXT = "<|endoftext|>"
# Every `VALIDATION_EVERY`-th paragraph of the corpus is held out.
VALIDATION_EVERY = 20

SETTINGS = dict(
    seed=1337,
    vocabulary_size=2048,
    num_layers=4,
    num_heads=4,
    hidden_dim=128,
    intermediate_dim=512,
    sequence_length=256,
    dropout=0.1,
    batch_size=8,
    steps=1200,
    learning_rate=2e-3,
    warmup_steps=60,
    weight_decay=0.05,
    rounds=8,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=DEFAULT_OUTPUT)
    for name, value in SETTINGS.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=type(value), default=value
        )
    return parser.parse_args(argv)


def corpus():
    """`(train_documents, validation_documents)` from `pydoc_data.topics`.

    Topics are taken in sorted order and split into paragraphs; every
    `VALIDATION_EVERY`-th paragraph goes to the validation text, so both
    sides cover every topic.
    """
    train, validation = [], []
    count = 0
    for name in sorted(pydoc_data.topics.topics):
        kept = []
        for paragraph in pydoc_data.topics.topics[name].strip().split("\n\n"):
            count += 1
            if count % VALIDATION_EVERY == 0:
                validation.append(paragraph)
            else:
                kept.append(paragraph)
        train.append("\n\n".join(kept))
    return train, validation


def train_tokenizer(documents, vocabulary_size):
    """A GPT-2 style byte-level BPE tokenizer trained on `documents`."""
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(
        add_prefix_space=False
    )
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    tokenizer.post_processor = tokenizers.processors.ByteLevel(trim_offsets=False)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocabulary_size,
        min_frequency=2,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    return tokenizer


def token_stream(tokenizer, documents):
    """All documents as one int32 array, each followed by the end token."""
    end = tokenizer.token_to_id(END_OF_TEXT)
    ids = []
    for document in documents:
        ids += tokenizer.encode(document).ids + [end]
    return np.asarray(ids, dtype="int32")


def training_windows(tokens, args):
    """`(steps * batch, length + 1)` windows at seeded random offsets."""
    rng = np.random.default_rng(args.seed)
    count = args.steps * args.batch_size
    starts = rng.integers(0, len(tokens) - args.sequence_length - 1, size=count)
    return np.stack([tokens[s : s + args.sequence_length + 1] for s in starts])


def validation_windows(tokens, length):
    """Consecutive non-overlapping windows covering the validation text."""
    count = (len(tokens) - 1) // length
    return np.stack(
        [tokens[i * length : i * length + length + 1] for i in range(count)]
    )


def build_model(args, tokenizer):
    import keras

    from keras_gen.models import GPT2Backbone
    from keras_gen.models import GPT2CausalLM
    from keras_gen.tokenizers import Tokenizer

    end = tokenizer.token_to_id(END_OF_TEXT)
    backbone = GPT2Backbone(
        vocabulary_size=tokenizer.get_vocab_size(),
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        hidden_dim=args.hidden_dim,
        intermediate_dim=args.intermediate_dim,
        max_sequence_length=args.sequence_length,
        dropout=args.dropout,
    )
    lm = GPT2CausalLM(
        backbone,
        tokenizer=Tokenizer(tokenizer, bos_token_id=end, eos_token_ids=[end]),
    )
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=args.steps - args.warmup_steps,
        warmup_target=args.learning_rate,
        warmup_steps=args.warmup_steps,
        alpha=0.05,
    )
    optimizer = keras.optimizers.AdamW(
        schedule, weight_decay=args.weight_decay, global_clipnorm=1.0
    )
    optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias", "wpe"])
    lm.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return lm


def main(argv=None):
    args = parse_args(argv)
    import keras

    keras.utils.set_random_seed(args.seed)
    started = time.time()
    train_documents, validation_documents = corpus()
    tokenizer = train_tokenizer(train_documents, args.vocabulary_size)
    train_tokens = token_stream(tokenizer, train_documents)
    validation_tokens = token_stream(tokenizer, validation_documents)
    print(
        f"corpus: {len(train_documents)} train / {len(validation_documents)} "
        f"validation topics, {len(train_tokens)} / {len(validation_tokens)} tokens",
        flush=True,
    )
    windows = training_windows(train_tokens, args)
    held_out = validation_windows(validation_tokens, args.sequence_length)
    lm = build_model(args, tokenizer)
    print(f"parameters: {lm.count_params()}", flush=True)

    history = []
    steps_per_round = args.steps // args.rounds
    for round_index in range(args.rounds):
        rows = slice(
            round_index * steps_per_round * args.batch_size,
            (round_index + 1) * steps_per_round * args.batch_size,
        )
        fit = lm.fit(
            windows[rows, :-1],
            windows[rows, 1:],
            batch_size=args.batch_size,
            epochs=1,
            shuffle=False,
            verbose=0,
        )
        validation_loss = lm.evaluate(
            held_out[:, :-1],
            held_out[:, 1:],
            batch_size=args.batch_size,
            verbose=0,
            return_dict=True,
        )["loss"]
        history.append(
            {
                "step": (round_index + 1) * steps_per_round,
                "train_loss": round(float(fit.history["loss"][-1]), 4),
                "validation_loss": round(float(validation_loss), 4),
            }
        )
        print(
            f"step {history[-1]['step']}: train {history[-1]['train_loss']:.4f} "
            f"validation {history[-1]['validation_loss']:.4f} "
            f"({time.time() - started:.0f}s)",
            flush=True,
        )

    output = os.path.abspath(args.output)
    lm.save_pretrained(output)
    generation_config_file = os.path.join(output, "generation_config.json")
    with open(generation_config_file) as f:
        generation_config = json.load(f)
    generation_config.update(
        {
            "do_sample": True,
            "temperature": 0.8,
            "top_k": 40,
            "repetition_penalty": 1.2,
            "max_new_tokens": 64,
        }
    )
    with open(generation_config_file, "w") as f:
        json.dump(generation_config, f, indent=2)
    text = "".join(train_documents + validation_documents).encode("utf-8")
    record = {
        "description": (
            "keras-gen demo model: a small GPT-2 trained on the Python "
            "documentation topics bundled with CPython (pydoc_data.topics)."
        ),
        "tool": "tools/train_demo_model.py",
        "settings": {k: getattr(args, k) for k in SETTINGS},
        "parameters": int(lm.count_params()),
        "corpus": {
            "source": "pydoc_data.topics",
            "python_version": platform.python_version(),
            "sha256": hashlib.sha256(text).hexdigest(),
            "train_topics": len(train_documents),
            "validation_topics": len(validation_documents),
            "train_tokens": int(len(train_tokens)),
            "validation_tokens": int(len(validation_tokens)),
        },
        "versions": {
            "keras": keras.__version__,
            "jax": __import__("jax").__version__,
            "tokenizers": tokenizers.__version__,
            "numpy": np.__version__,
        },
        "history": history,
        "final_validation_loss": history[-1]["validation_loss"],
        "final_validation_perplexity": round(
            float(np.exp(history[-1]["validation_loss"])), 2
        ),
        "training_seconds": round(time.time() - started),
    }
    with open(os.path.join(output, "training.json"), "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {output}", flush=True)
    # Small models loop when decoding greedily; a repetition penalty helps.
    from keras_gen import processors

    penalty = [processors.RepetitionPenalty(1.3)]
    for prompt in ("The for statement", "A class definition", "Exceptions are"):
        length = min(40, args.sequence_length // 2)
        sample = lm.generate(prompt, max_new_tokens=length, processors=penalty)
        print(repr(sample), flush=True)
    return record


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
