"""Tiny text models saved as model folders, for the command and the server.

The tokenizer is a byte-level BPE trained in milliseconds on a few
sentences; the model is a tiny GPT-2 with seeded numpy weights, so it
writes the same tokens on every backend.
"""

import tokenizers

from keras_gen.models import GPT2CausalLM
from keras_gen.tokenizers import Tokenizer
from tests.conftest import tiny_gpt2_backbone

END_OF_TEXT = "<|endoftext|>"
TEXT = [
    "The for statement is used to iterate over the elements of a sequence.",
    "A class definition defines a class object.",
    "Exceptions are raised when an error is detected during execution.",
    "The while statement is used for repeated execution as long as an "
    "expression is true.",
]


# Prompts the tiny tokenizer's text covers, of varied lengths.
PROMPTS = [
    "The for statement",
    "A class",
    "Exceptions are raised when",
    "The while",
    "is used",
    "an error is detected during execution",
    "The",
    "iterate over the elements of a sequence",
]


def tiny_tokenizer(vocabulary_size=300):
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(
        add_prefix_space=False
    )
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocabulary_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TEXT, trainer=trainer)
    end = tokenizer.token_to_id(END_OF_TEXT)
    return Tokenizer(tokenizer, bos_token_id=end, eos_token_ids=[end])


def tiny_text_lm(seed=0, max_sequence_length=256):
    tokenizer = tiny_tokenizer()
    backbone = tiny_gpt2_backbone(
        seed,
        vocabulary_size=tokenizer.vocabulary_size,
        max_sequence_length=max_sequence_length,
    )
    return GPT2CausalLM(backbone, tokenizer=tokenizer)


def save_tiny_text_model(path, seed=0):
    """Write a tiny text model folder at `path`; return the model."""
    lm = tiny_text_lm(seed)
    lm.save_pretrained(path)
    return lm
