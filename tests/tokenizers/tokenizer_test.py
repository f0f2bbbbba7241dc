import json

import pytest

from keras_gen.tokenizers import Tokenizer
from tests.models import hf_models

TEXTS = ["the quick brown fox", "hello world, tiny model!", ""]


@pytest.fixture
def folder(tmp_path):
    hf_models.save_tokenizer(str(tmp_path))
    return tmp_path


def test_encode_and_decode_match_transformers(folder):
    tokenizer = Tokenizer.from_pretrained(folder)
    hf_tokenizer = hf_models.transformers.AutoTokenizer.from_pretrained(folder)
    for text in TEXTS:
        ids = tokenizer.encode(text)
        assert ids == hf_tokenizer(text)["input_ids"]
        expected = hf_tokenizer.decode(ids, skip_special_tokens=True)
        assert tokenizer.decode(ids) == expected
    assert tokenizer.decode(tokenizer.encode("the dog sat")) == "the dog sat"
    assert tokenizer.encode("the dog")[0] == hf_models.BOS
    assert tokenizer.encode("the dog", add_special_tokens=False)[0] != hf_models.BOS


def test_special_tokens_from_tokenizer_config(folder):
    tokenizer = Tokenizer.from_pretrained(folder)
    assert tokenizer.vocabulary_size == hf_models.VOCABULARY_SIZE
    assert tokenizer.bos_token_id == hf_models.BOS
    assert tokenizer.eos_token_ids == [hf_models.EOS]
    assert tokenizer.eos_token_id == hf_models.EOS
    assert tokenizer.pad_token_id == hf_models.PAD
    assert tokenizer.id_to_token(hf_models.EOS) == "</s>"
    assert tokenizer.token_to_id("<pad>") == hf_models.PAD


def test_end_tokens_from_generation_config_may_be_a_list(folder):
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 9]}))
    assert Tokenizer.from_pretrained(folder).eos_token_ids == [2, 9]


def test_config_ids_when_tokenizer_config_names_no_tokens(folder):
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / "config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None})
    )
    tokenizer = Tokenizer.from_pretrained(folder)
    assert (tokenizer.bos_token_id, tokenizer.eos_token_ids) == (1, [2])
    assert tokenizer.pad_token_id is None


def test_added_token_dicts_in_tokenizer_config(folder):
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": {"content": "</s>", "special": True}})
    )
    assert Tokenizer.from_pretrained(folder).eos_token_ids == [hf_models.EOS]


def test_save_pretrained_round_trip(folder, tmp_path):
    tokenizer = Tokenizer.from_pretrained(folder)
    tokenizer.save_pretrained(tmp_path / "copy")
    again = Tokenizer.from_pretrained(tmp_path / "copy")
    assert again.encode(TEXTS[1]) == tokenizer.encode(TEXTS[1])
    assert again.eos_token_ids == tokenizer.eos_token_ids
    assert again.pad_token_id == tokenizer.pad_token_id


def test_missing_tokenizer_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="No tokenizer.json"):
        Tokenizer.from_pretrained(tmp_path)


def test_corrupt_tokenizer_file(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="not a valid tokenizer file"):
        Tokenizer.from_pretrained(tmp_path)


def test_bad_arguments():
    with pytest.raises(TypeError, match="`tokenizer` must be"):
        Tokenizer(42)
    tokenizer = Tokenizer(hf_models.train_tokenizer())
    with pytest.raises(TypeError, match="`text` must be a string"):
        tokenizer.encode(["not", "a", "string"])


TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant:{% endif %}"
)


def test_chat_template_file_that_transformers_writes_is_kept(folder, tmp_path):
    from keras_gen.tokenizers.chat_template import ChatTemplate

    hf_tokenizer = hf_models.transformers.AutoTokenizer.from_pretrained(folder)
    hf_tokenizer.chat_template = TEMPLATE
    hf_tokenizer.save_pretrained(tmp_path / "hf")
    assert (tmp_path / "hf" / "chat_template.jinja").exists()
    tokenizer = Tokenizer.from_pretrained(tmp_path / "hf")
    messages = [{"role": "user", "content": "hello world"}]
    expected = hf_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert ChatTemplate.from_tokenizer(tokenizer).render(messages) == expected
    tokenizer.save_pretrained(tmp_path / "ours")
    again = hf_models.transformers.AutoTokenizer.from_pretrained(tmp_path / "ours")
    assert again.chat_template == TEMPLATE


def _sentencepiece_style():
    """A Llama-2-like tokenizer: word boundaries as U+2581, byte fallback."""
    import tokenizers

    vocab = {
        "<unk>": 0,
        "<s>": 1,
        "</s>": 2,
        "<0x0A>": 3,
        "<0xE2>": 4,
        "\u2581": 5,
        "\u2581hi": 6,
        "hi": 7,
        "{": 8,
        "\u2581{": 9,
        "é": 10,
    }
    model = tokenizers.models.BPE(vocab, [], unk_token="<unk>", byte_fallback=True)
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
    tokenizer.decoder = tokenizers.decoders.Sequence(
        [
            tokenizers.decoders.Replace("\u2581", " "),
            tokenizers.decoders.ByteFallback(),
            tokenizers.decoders.Fuse(),
        ]
    )
    tokenizer.add_special_tokens(["<s>", "</s>"])
    return Tokenizer(tokenizer, bos_token_id=1, eos_token_ids=[2])


def test_token_bytes_of_byte_level_and_sentencepiece_vocabularies():
    # Byte-level (GPT-2 style): each token's characters stand for bytes,
    # and the bytes of a text's tokens are the text's UTF-8.
    from tests.text_models import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    text = "The for statement é\n"
    ids = tokenizer.encode(text)
    assert b"".join(tokenizer.token_bytes[i] for i in ids) == text.encode()
    assert tokenizer.token_bytes[tokenizer.eos_token_id] is None  # special
    # SentencePiece style: the word boundary is a space, <0xNN> a byte.
    tokenizer = _sentencepiece_style()
    table = tokenizer.token_bytes
    assert table[6] == b" hi" and table[3] == b"\n" and table[4] == b"\xe2"
    assert table[10] == "é".encode() and table[1] is None and table[2] is None
    assert len(tokenizer.fingerprint) == 64
    assert tokenizer.fingerprint == _sentencepiece_style().fingerprint
