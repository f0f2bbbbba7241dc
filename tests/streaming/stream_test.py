"""`lm.stream`: the joined stream equals `generate`, field by field."""

import numpy as np
import pytest
from keras import ops

from keras_gen import samplers
from keras_gen.generation import generate_loop
from keras_gen.models import GPT2CausalLM
from keras_gen.streaming import GenerationOutput
from tests.conftest import tiny_gpt2_backbone
from tests.streaming.fake_tokenizer import ByteTokenizer

PROMPTS = [[5, 9, 2, 33, 61], [7], [1, 2, 3]]
RICH = dict(
    output_scores=True,
    output_logits=True,
    output_log_probs=True,
    output_hidden_states=True,
)


def assert_records_equal(joined, final):
    assert joined.token_ids == final.token_ids
    assert joined.finish_reasons == final.finish_reasons
    assert joined.text == final.text
    for name in ("log_probs", "scores", "logits", "hidden_states"):
        left, right = getattr(joined, name), getattr(final, name)
        assert (left is None) == (right is None), name
        for a, b in zip(left or [], right or []):
            np.testing.assert_allclose(a, b, atol=1e-5, err_msg=name)


# One case on TensorFlow, the slowest to compile; every case elsewhere.
NOT_TF = pytest.mark.only_backend("jax", "torch")


@pytest.mark.parametrize(
    "sampler",
    [
        "greedy",
        pytest.param(samplers.TopKSampler(k=5), marks=NOT_TF),
        pytest.param(samplers.TopPSampler(p=0.8), marks=NOT_TF),
        pytest.param(samplers.ContrastiveSampler(k=4, alpha=0.6), marks=NOT_TF),
    ],
)
@pytest.mark.parametrize("rich", [False, True])
def test_joined_stream_equals_generate(gpt2_lm, sampler, rich):
    gpt2_lm.compile(sampler=sampler)
    kwargs = dict(max_new_tokens=11, seed=4, **(RICH if rich else {}))
    final = gpt2_lm.generate(PROMPTS, return_dict=True, **kwargs)
    chunks = list(gpt2_lm.stream(PROMPTS, stream_chunk_size=3, **kwargs))
    assert len(chunks) >= 4
    assert_records_equal(GenerationOutput.join(chunks), final)
    assert final.sequences == [p + t for p, t in zip(PROMPTS, final.token_ids)]


@pytest.mark.parametrize(
    "n, early_stopping, stop, rich",
    [
        (3, False, True, True),
        pytest.param(1, False, False, True, marks=NOT_TF),
        pytest.param(1, True, True, False, marks=NOT_TF),
        pytest.param(2, "never", True, True, marks=NOT_TF),
        pytest.param(3, True, False, False, marks=NOT_TF),
    ],
)
def test_beam_streams_every_returned_sequence(gpt2_lm, n, early_stopping, stop, rich):
    gpt2_lm.compile(
        sampler=samplers.BeamSampler(
            num_beams=3,
            num_return_sequences=n,
            early_stopping=early_stopping,
            length_penalty=0.7,
        )
    )
    kwargs = dict(max_new_tokens=12, stop_token_ids=None, **(RICH if rich else {}))
    if stop:
        free = gpt2_lm.generate(PROMPTS, return_dict=True, **kwargs)
        kwargs["stop_token_ids"] = [free.token_ids[0][3]]
    final = gpt2_lm.generate(PROMPTS, return_dict=True, **kwargs)
    chunks = list(gpt2_lm.stream(PROMPTS, stream_chunk_size=2, **kwargs))
    assert all(len(c.token_ids) == n * len(PROMPTS) for c in chunks)
    joined = GenerationOutput.join(chunks)
    assert_records_equal(joined, final)
    assert joined.sequences == final.sequences
    assert joined.sequence_scores == final.sequence_scores
    if stop:
        assert "stop" in final.finish_reasons
    # Nothing handed out is taken back: every chunk extends what came
    # before, up to each row's final tokens.
    for r, tokens in enumerate(final.token_ids):
        sent = []
        for chunk in chunks:
            sent += chunk.token_ids[r]
            assert tokens[: len(sent)] == sent
    # Agreed prefixes are streamed before the searches end (an early stop
    # token may end them first), and scores only once a row's has ended.
    if not stop:
        assert sum(len(t) for c in chunks[:-1] for t in c.token_ids) > 0
    for chunk in chunks:
        for reason, score in zip(chunk.finish_reasons, chunk.sequence_scores):
            assert (score is None) == (reason is None)


def test_rows_finish_with_their_reason(gpt2_lm):
    free = gpt2_lm.generate(PROMPTS, max_new_tokens=10, strip_prompt=True)
    stop = free[0][2]
    final = gpt2_lm.generate(
        PROMPTS, max_new_tokens=10, stop_token_ids=[stop], return_dict=True
    )
    assert final.finish_reasons[0] == "stop"
    for tokens, reason in zip(final.token_ids, final.finish_reasons):
        assert reason == ("stop" if stop in tokens else "length")
    finished_at = {}
    for number, chunk in enumerate(
        gpt2_lm.stream(PROMPTS, max_new_tokens=10, stop_token_ids=[stop])
    ):
        for row, reason in enumerate(chunk.finish_reasons):
            finished_at.setdefault(row, number if reason else None)
            if reason is None:
                finished_at.pop(row)
    assert set(finished_at) == {0, 1, 2}


def test_log_probs_are_log_softmax_of_logits_at_the_chosen_tokens(gpt2_lm):
    final = gpt2_lm.generate(
        PROMPTS,
        max_new_tokens=6,
        return_dict=True,
        output_logits=True,
        output_log_probs=True,
        output_scores=True,
    )
    for tokens, logits, scores, log_probs in zip(
        final.token_ids, final.logits, final.scores, final.log_probs
    ):
        np.testing.assert_allclose(scores, logits, atol=1e-6)
        shifted = logits - logits.max(-1, keepdims=True)
        expected = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        np.testing.assert_allclose(
            log_probs, expected[np.arange(len(tokens)), tokens], atol=1e-5
        )
        assert (np.argmax(logits, -1) == tokens).all()  # greedy


def test_hidden_states_are_the_final_hidden_states(gpt2_lm):
    final = gpt2_lm.generate(
        [[5, 9, 2]], max_new_tokens=4, return_dict=True, output_hidden_states=True
    )
    sequence = final.sequences[0]
    hidden = ops.convert_to_numpy(gpt2_lm.backbone(np.array([sequence])))[0]
    # The state that produced new token t is the one at position t - 1.
    np.testing.assert_allclose(final.hidden_states[0], hidden[2:-1], atol=1e-4)


def test_stream_does_not_recompile_as_it_advances(gpt2_lm, traces):
    list(gpt2_lm.stream(PROMPTS, max_new_tokens=20, stream_chunk_size=2))
    first = traces()
    list(
        gpt2_lm.stream(
            [[1, 2], [3, 4, 5, 6], [9]], max_new_tokens=15, stream_chunk_size=3
        )
    )
    assert traces() == first


@pytest.mark.only_backend("jax", "torch")
@pytest.mark.parametrize(
    "sampler, rich",
    [("greedy", True), (samplers.TopKSampler(k=5), False), ("lookup", False)],
)
def test_a_long_stream_attends_over_growing_spans(
    monkeypatch, sampler, rich, torch_compiled
):
    # A cache of 1024: the chunks attend over its first 256 positions, then
    # 512 (a chunk that crosses 256 takes 512), then all of them, as
    # `generate`'s loops do; the joined stream equals `generate`. Speculative
    # chunks too (their rows advance by up to 4 tokens a step).
    spans, run = set(), generate_loop.run

    def spied(*args, attention_span=None, **kwargs):
        spans.add(attention_span)
        return run(*args, attention_span=attention_span, **kwargs)

    monkeypatch.setattr(generate_loop, "run", spied)
    lm = GPT2CausalLM(tiny_gpt2_backbone(max_sequence_length=1024))
    speculation = {}
    if sampler == "lookup":
        sampler = "greedy"
        speculation = dict(prompt_lookup_ngram=2, num_speculative_tokens=3)
    lm.compile(sampler=sampler, **speculation)
    prompts = [[5] * 40, [3, 9] * 60]
    kwargs = dict(max_length=600, stop_token_ids=None, seed=3, **(RICH if rich else {}))
    chunks = list(lm.stream(prompts, stream_chunk_size=7, **kwargs))
    assert spans == {256, 512, None}
    final = lm.generate(prompts, return_dict=True, **kwargs)
    assert_records_equal(GenerationOutput.join(chunks), final)


def test_first_chunk_is_the_token_the_prompt_predicts(gpt2_lm):
    # Samplers with a plain step take the first token from the prompt's
    # forward pass, so the stream hands it out before any decode step.
    final = gpt2_lm.generate(PROMPTS, max_new_tokens=6, return_dict=True)
    stream = gpt2_lm.stream(PROMPTS, max_new_tokens=6, stream_chunk_size=4)
    first = next(stream)
    stream.close()
    # The shortest prompt gets its first token; longer rows are still
    # inside their prompts at that position.
    assert first.token_ids[1] == final.token_ids[1][:1]
    assert all(len(t) <= 1 for t in first.token_ids)


def test_only_samplers_with_the_plain_step_use_the_prompts_logits(gpt2_lm):
    assert samplers.TopKSampler(k=3).first_step_from_prompt
    assert not samplers.BeamSampler(num_beams=2).first_step_from_prompt
    assert not samplers.ContrastiveSampler(k=2).first_step_from_prompt
    # Their first chunk comes from a decode step: `stream_chunk_size` tokens.
    gpt2_lm.compile(sampler=samplers.ContrastiveSampler(k=2))
    first = next(gpt2_lm.stream([[1, 2, 3]], max_new_tokens=6, stream_chunk_size=2))
    assert len(first.token_ids[0]) == 2


def test_prompts_already_at_max_length_generate_nothing(gpt2_lm):
    prompts = [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert gpt2_lm.generate(prompts, max_length=4) == prompts
    chunks = list(gpt2_lm.stream(prompts, max_length=4))
    assert GenerationOutput.join(chunks).finish_reasons == ["length", "length"]


def test_breaking_out_early_stops(gpt2_lm):
    stream = gpt2_lm.stream(PROMPTS, max_new_tokens=40, stream_chunk_size=2)
    first = next(stream)
    assert all(len(t) <= 2 for t in first.token_ids)
    stream.close()  # what `break` does; the generator's cleanup runs
    with pytest.raises(StopIteration):
        next(stream)


def test_max_time_ends_running_rows_with_reason_time(gpt2_lm):
    final = gpt2_lm.generate(
        PROMPTS,
        max_new_tokens=60,
        max_time=1e-9,
        return_dict=True,
        stream_chunk_size=2,
    )
    assert final.finish_reasons == ["time"] * 3
    assert all(len(t) <= 2 for t in final.token_ids)


def test_text_streams_whole_characters():
    backbone = tiny_gpt2_backbone(vocabulary_size=256, max_sequence_length=64)
    lm = GPT2CausalLM(backbone, tokenizer=ByteTokenizer())
    lm.compile(sampler="random")
    prompts = ["héllo 😀", "ça"]
    chunks = list(lm.stream(prompts, max_new_tokens=24, seed=1, stream_chunk_size=1))
    final = lm.generate(prompts, max_new_tokens=24, seed=1, return_dict=True)
    joined = GenerationOutput.join(chunks)
    assert joined.text == final.text
    for row, tokens in enumerate(final.token_ids):
        assert final.text[row] == ByteTokenizer().decode(tokens)
    # Random bytes are often invalid UTF-8, which decodes to U+FFFD for
    # good; but a running row never ends a chunk on an unfinished character.
    for chunk in chunks:
        for text, reason in zip(chunk.text, chunk.finish_reasons):
            assert reason is not None or not text.endswith("\ufffd")
    texts = lm.generate(prompts, max_new_tokens=24, seed=1)
    assert texts == [p + t for p, t in zip(prompts, final.text)]


def test_bad_stream_arguments(gpt2_lm):
    with pytest.raises(ValueError, match="stream_chunk_size"):
        next(gpt2_lm.stream([1, 2], max_new_tokens=3, stream_chunk_size=0))
    with pytest.raises(ValueError, match="max_time"):
        gpt2_lm.generate([1, 2], max_new_tokens=3, max_time=-1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        gpt2_lm.stream([1, 2])  # checked at the call, not at iteration
