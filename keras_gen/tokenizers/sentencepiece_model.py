"""SentencePiece `tokenizer.model` files as `tokenizers.Tokenizer`s.

Many Llama 2, Mistral, Gemma and T5-era folders (and every keras-hub
SentencePiece preset) hold only `tokenizer.model`. keras-gen reads it with
the `sentencepiece` package's own protobuf schema and builds the same
tokenizer in the `tokenizers` library that every other folder's
`tokenizer.json` gives (one fast tokenizer path for encoding, decoding,
streaming and chat templates), following the file's own settings: BPE or
Unigram pieces and scores, byte fallback, the dummy prefix, whitespace
handling and the normalization rules it was trained with. Tested against
the `sentencepiece` processor itself and transformers' conversion.
"""

import tokenizers
from tokenizers import decoders
from tokenizers import models
from tokenizers import normalizers
from tokenizers import pre_tokenizers
from tokenizers import processors

# `ModelProto.SentencePiece.Type`.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# `TrainerSpec.ModelType`.
UNIGRAM, BPE = 1, 2
SPACE = "\u2581"  # "▁", SentencePiece's whitespace


def read_model(model):
    """The `sentencepiece` `ModelProto` of a `tokenizer.model` file (its
    path) or of its bytes."""
    where = "The SentencePiece model" if isinstance(model, bytes) else model
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError as error:
        raise ImportError(
            f"Reading {where} needs the `sentencepiece` and `protobuf` "
            "packages: pip install sentencepiece protobuf"
        ) from error
    proto = sentencepiece_model_pb2.ModelProto()
    if not isinstance(model, bytes):
        with open(model, "rb") as f:
            model = f.read()
    try:
        proto.ParseFromString(model)
    except Exception as error:  # protobuf's DecodeError
        raise ValueError(f"{where} is not a SentencePiece model: {error}") from error
    if not proto.pieces:
        raise ValueError(f"{where} is not a SentencePiece model: it has no pieces.")
    if not 0 <= proto.trainer_spec.unk_id < len(proto.pieces):
        raise ValueError(
            f"{where}: the unknown piece's id ({proto.trainer_spec.unk_id}) is "
            f"not one of its {len(proto.pieces)} pieces."
        )
    return proto


def _merges(pieces):
    """BPE merges in SentencePiece's order: a pair merges when its
    concatenation is a piece, the pieces of higher score first (ties by id),
    and within one piece its splits by the ids of their halves."""
    ids = {piece.piece: i for i, piece in enumerate(pieces) if piece.type == NORMAL}
    ranked = []
    for merged, i in ids.items():
        for cut in range(1, len(merged)):
            left, right = merged[:cut], merged[cut:]
            if left in ids and right in ids:
                ranked.append((-pieces[i].score, i, ids[left], ids[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _model(proto):
    pieces = proto.pieces
    byte_fallback = proto.trainer_spec.byte_fallback
    unk_id = proto.trainer_spec.unk_id
    if proto.trainer_spec.model_type == UNIGRAM:
        return models.Unigram(
            [(piece.piece, piece.score) for piece in pieces],
            unk_id=unk_id,
            byte_fallback=byte_fallback,
        )
    if proto.trainer_spec.model_type != BPE:
        raise ValueError(
            "keras-gen reads SentencePiece models of type BPE or Unigram. "
            f"Received type {proto.trainer_spec.model_type} (word or char)."
        )
    return models.BPE(
        {piece.piece: i for i, piece in enumerate(pieces)},
        _merges(pieces),
        unk_token=pieces[unk_id].piece,
        fuse_unk=True,
        byte_fallback=byte_fallback,
    )


def _normalizer(spec):
    """SentencePiece's normalization of the whole text: its character map,
    whitespace runs as one space (and none at the ends) when the model
    removes extra whitespace, the dummy prefix, and spaces as "▁"."""
    steps = []
    if spec.precompiled_charsmap:
        steps.append(normalizers.Precompiled(spec.precompiled_charsmap))
    if spec.remove_extra_whitespaces:
        steps += [
            normalizers.Replace(tokenizers.Regex(" {2,}"), " "),
            normalizers.Strip(left=True, right=True),
        ]
    if spec.add_dummy_prefix:
        steps.append(normalizers.Prepend(SPACE))
    steps.append(normalizers.Replace(" ", SPACE))
    return normalizers.Sequence(steps)


def tokenizer_from_sentencepiece(model, add_bos_token=True, add_eos_token=False):
    """A `tokenizers.Tokenizer` that encodes and decodes as a SentencePiece
    model does.

    Args:
        model: the path of a `tokenizer.model` file, or its bytes.
        add_bos_token: bool, start every encoded text with the model's BOS
            piece (transformers' default for Llama, Mistral and Gemma).
        add_eos_token: bool, end it with the EOS piece.
    """
    proto = read_model(model)
    spec = proto.normalizer_spec
    tokenizer = tokenizers.Tokenizer(_model(proto))
    tokenizer.normalizer = _normalizer(spec)
    # Pieces never cross a "▁" unless the model's do.
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        SPACE, "never", split=proto.trainer_spec.split_by_whitespace
    )
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if spec.add_dummy_prefix:
        steps.append(decoders.Strip(" ", 1, 0))
    tokenizer.decoder = decoders.Sequence(steps)
    # Control pieces (<s>, </s>, <pad>) and the unknown piece are special:
    # left out of decoded text when asked. User symbols are matched whole in
    # the normalized text (so the dummy prefix stays at the text's start).
    tokenizer.add_special_tokens(
        [
            tokenizers.AddedToken(piece.piece, normalized=False, special=True)
            for piece in proto.pieces
            if piece.type in (CONTROL, UNKNOWN)
        ]
    )
    if proto.trainer_spec.model_type == BPE:
        tokenizer.add_tokens(
            [
                tokenizers.AddedToken(piece.piece, normalized=True)
                for piece in proto.pieces
                if piece.type == USER_DEFINED
            ]
        )
    ends = [
        (proto.pieces[piece_id].piece, piece_id)
        for wanted, piece_id in (
            (add_bos_token, proto.trainer_spec.bos_id),
            (add_eos_token, proto.trainer_spec.eos_id),
        )
        if wanted and 0 <= piece_id < len(proto.pieces)
    ]
    bos = [
        f"{piece}" for piece, piece_id in ends if piece_id == proto.trainer_spec.bos_id
    ]
    eos = [
        f"{piece}" for piece, piece_id in ends if piece_id == proto.trainer_spec.eos_id
    ]

    def template(sequence, type_id):
        return [f"{part}:{type_id}" for part in bos + [sequence] + eos]

    tokenizer.post_processor = processors.TemplateProcessing(
        single=template("$A", 0),
        pair=template("$A", 0) + template("$B", 1),
        special_tokens=ends,
    )
    return tokenizer
