"""SentencePiece `tokenizer.model` files encode and decode as SentencePiece
itself does, and as transformers' conversion does."""

import json

import numpy as np
import pytest

from keras_gen.tokenizers import Tokenizer
from keras_gen.tokenizers.sentencepiece_model import tokenizer_from_sentencepiece

spm = pytest.importorskip("sentencepiece")
# Tokenizers run no backend code: one backend suffices, but for the model
# folder's generation.
one_backend = pytest.mark.only_backend("jax")

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a cat sat on the mat and the dog sat on the log",
    "hello world this is a tiny language model",
    "we train a small tokenizer for the tests",
] * 20
TEXTS = [
    "the quick brown fox",
    "  hello   world  ",
    "héllo wörld ✓ 日本",  # unseen characters: bytes or unknown
    "dog\ncat\ttab",
    "ＡＢＣ ﬁne",  # NFKC folds these
    "a  b",
    "\n\nx y\n",
    "the<tool>fox",
    "",
    " ",
]
# What the model files people hold are like: Llama 2 / Mistral (BPE, byte
# fallback, no normalization, a dummy prefix), T5 (Unigram, NFKC, extra
# spaces removed), and user symbols without a dummy prefix.
KINDS = {
    "llama_bpe": dict(
        model_type="bpe",
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
    ),
    "t5_unigram": dict(model_type="unigram", normalization_rule_name="nmt_nfkc"),
    "unigram_bytes": dict(model_type="unigram", byte_fallback=True),
    "bpe_symbols": dict(
        model_type="bpe", add_dummy_prefix=False, user_defined_symbols=["<tool>"]
    ),
}


def train(folder, kind, vocabulary_size=None):
    options = KINDS[kind]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS),
        model_prefix=str(folder / "tokenizer"),
        vocab_size=vocabulary_size or (330 if options.get("byte_fallback") else 60),
        hard_vocab_limit=False,
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=3,
        minloglevel=2,
        **options,
    )
    return str(folder / "tokenizer.model")


@one_backend
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ids_and_text_equal_sentencepiece(kind, tmp_path):
    path = train(tmp_path, kind)
    reference = spm.SentencePieceProcessor(model_file=path)
    tokenizer = tokenizer_from_sentencepiece(path, add_bos_token=False)
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        assert ids == reference.encode(text), text
        if reference.unk_id() not in ids:
            assert tokenizer.decode(ids) == reference.decode(ids), text


@one_backend
@pytest.mark.parametrize("kind", ["llama_bpe", "t5_unigram"])
def test_ids_equal_transformers_conversion(kind, tmp_path):
    transformers = pytest.importorskip("transformers")
    train(tmp_path, kind)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    tokenizer = Tokenizer.from_pretrained(tmp_path)
    for text in TEXTS[:7]:
        expected = reference(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.encode(text, add_special_tokens=False) == expected, text


@one_backend
def test_a_folder_with_only_tokenizer_model_loads_with_its_special_tokens(tmp_path):
    train(tmp_path, "llama_bpe")
    config = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = Tokenizer.from_pretrained(tmp_path)
    assert (tokenizer.bos_token_id, tokenizer.eos_token_ids) == (1, [2])
    assert tokenizer.pad_token_id == 3
    ids = tokenizer.encode("the quick brown fox")
    assert ids[0] == 1 and tokenizer.decode(ids) == "the quick brown fox"
    # Byte fallback: unseen characters round-trip through their bytes.
    assert tokenizer.decode(tokenizer.encode("日本 ✓")) == "日本 ✓"
    # Saved, it is a tokenizer.json that reads back the same, and the
    # SentencePiece model itself (kept for SentencePiece readers: keras-hub).
    tokenizer.save_pretrained(tmp_path / "saved")
    again = Tokenizer.from_pretrained(tmp_path / "saved")
    for text in TEXTS:
        assert again.encode(text) == tokenizer.encode(text)
    model = (tmp_path / "tokenizer.model").read_bytes()
    assert (tmp_path / "saved" / "tokenizer.model").read_bytes() == model
    assert again.sentencepiece_model == model
    # The config decides BOS and EOS.
    config.update(add_bos_token=False, add_eos_token=True)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    without_bos = tokenizer.encode("the fox")[1:]
    assert Tokenizer.from_pretrained(tmp_path).encode("the fox") == without_bos + [2]


def test_a_model_folder_generates_text_with_a_sentencepiece_tokenizer(tmp_path):
    pytest.importorskip("transformers")
    from keras_gen.models import CausalLM
    from tests.models import hf_models

    model = hf_models.make_model("llama")
    model.save_pretrained(tmp_path)
    train(tmp_path, "bpe_symbols", vocabulary_size=60)
    lm = CausalLM.from_pretrained(tmp_path)
    assert lm.tokenizer.encode("the fox")[0] == 1
    text = lm.generate("the fox", max_new_tokens=4, stop_token_ids=[])
    assert isinstance(text, str) and text.startswith("the fox")
    logits = lm(np.asarray([lm.tokenizer.encode("the fox")], "int32"))
    assert logits.shape[-1] == 64


@one_backend
@pytest.mark.parametrize(
    "content",
    [b"", b"not a model", bytes(range(256)) * 4],
    ids=["empty", "text", "bytes"],
)
def test_a_broken_model_file_is_named(tmp_path, content):
    (tmp_path / "tokenizer.model").write_bytes(content)
    with pytest.raises(ValueError, match="tokenizer.model is not a SentencePiece"):
        Tokenizer.from_pretrained(tmp_path)


@one_backend
def test_a_model_of_another_type_or_a_missing_unknown_piece_is_refused(tmp_path):
    from sentencepiece import sentencepiece_model_pb2

    path = train(tmp_path, "bpe_symbols")
    for change, message in (("model_type", "BPE or Unigram"), ("unk_id", "unknown")):
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(open(path, "rb").read())
        setattr(proto.trainer_spec, change, 3 if change == "model_type" else 10**6)
        broken = tmp_path / f"{change}.model"
        broken.write_bytes(proto.SerializeToString())
        with pytest.raises(ValueError, match=message):
            tokenizer_from_sentencepiece(str(broken))
