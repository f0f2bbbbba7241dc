"""Structured output in the loop: what is generated parses and validates."""

import json
import re

import jsonschema
import pytest

from keras_gen import GenerationConfig
from keras_gen.models import CausalLM
from keras_gen.processors import Choice
from keras_gen.processors import JsonObject
from keras_gen.processors import JsonSchema
from keras_gen.processors import Regex
from keras_gen.processors import RepetitionPenalty
from keras_gen.processors import StructuredOutput
from tests.text_models import tiny_text_lm

# Nested objects, arrays with item bounds, enums, bounded integers and
# numbers, string patterns and optional fields.
SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 6},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                },
                "required": ["city", "zip"],
            },
        },
        "required": ["name", "age", "address"],
    },
    "array": {
        "type": "array",
        "items": {"type": "integer", "minimum": -5, "maximum": 5},
        "minItems": 2,
        "maxItems": 4,
    },
    "enums": {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "size": {"enum": [1, 2, 3]},
        },
        "required": ["color", "size"],
    },
    "numbers": {
        "type": "object",
        "properties": {
            "x": {"type": "number", "minimum": 0, "maximum": 1},
            "y": {"type": "number", "exclusiveMinimum": -2, "exclusiveMaximum": 3},
            "n": {"type": "integer", "minimum": 10, "exclusiveMaximum": 1000},
        },
        "required": ["x", "y", "n"],
    },
    "patterns": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
            "email": {"type": "string", "pattern": "^[a-z]{1,6}@[a-z]{1,5}\\.com$"},
        },
        "required": ["id", "email"],
    },
    "optional": {
        "type": "object",
        "properties": {
            "a": {"type": "boolean"},
            "b": {"type": "string", "maxLength": 5},
            "c": {"type": "null"},
        },
        "required": ["a"],
    },
    "objects": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "k": {"type": "string", "maxLength": 3},
                "v": {"type": "integer", "minimum": 0, "maximum": 99},
            },
            "required": ["k", "v"],
        },
        "minItems": 1,
        "maxItems": 2,
    },
}
SAMPLES = 20
MAX_NEW_TOKENS = 120
# The demo model's generation_config samples with top-k 40 and a repetition
# penalty: these calls say what they want.
GREEDY = dict(do_sample=False)
SAMPLED = dict(do_sample=True, temperature=1.0, top_k=0)


@pytest.fixture(scope="module")
def demo():
    return CausalLM.from_preset("demo")


@pytest.fixture(scope="module")
def tiny():
    return tiny_text_lm(max_sequence_length=256)


def assert_valid(record, schemas):
    for text, reason, schema in zip(record.text, record.finish_reasons, schemas):
        assert reason == "stop", text
        jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_sampled_json_validates(demo, name):
    # Temperature 1: the model's own choices, inside the schema.
    record = demo.generate(
        ["The answer in JSON:"] * SAMPLES,
        processors=[JsonSchema(SCHEMAS[name])],
        seed=7,
        **SAMPLED,
        max_new_tokens=MAX_NEW_TOKENS,
        return_dict=True,
    )
    assert len(set(record.text)) > 1  # samples, not one answer 20 times
    assert_valid(record, [SCHEMAS[name]] * SAMPLES)


def test_a_random_model_only_writes_what_the_schemas_allow(tiny):
    # A random model has no idea of JSON: the constraint does all the work,
    # here for every schema in one batch.
    names = sorted(SCHEMAS) * 3
    record = tiny.generate(
        ["The for statement"] * len(names),
        processors=[StructuredOutput([JsonSchema(SCHEMAS[n]) for n in names])],
        do_sample=True,
        seed=3,
        max_new_tokens=MAX_NEW_TOKENS,
        return_dict=True,
    )
    assert_valid(record, [SCHEMAS[n] for n in names])


def test_regex_and_choice(demo, tiny):
    pattern = r"[A-Z][a-z]{2,6} [0-9]{2,3}(\.[0-9])?!"
    for lm in (demo, tiny):
        record = lm.generate(
            ["Name and number:"] * 10,
            processors=[Regex(pattern)],
            seed=1,
            **SAMPLED,
            max_new_tokens=40,
            return_dict=True,
        )
        assert record.finish_reasons == ["stop"] * 10
        assert all(re.fullmatch(pattern, text) for text in record.text), record.text
    options = ["yes", "no", "not sure"]
    record = demo.generate(
        ["Is it?"] * 10,
        processors=[Choice(options)],
        seed=2,
        max_new_tokens=10,
        return_dict=True,
        **SAMPLED,
    )
    assert set(record.text) <= set(options) and len(set(record.text)) > 1


def test_a_batch_mixes_schemas_and_a_free_row(demo):
    chosen = ["nested", "enums", "numbers"]
    prompts = ["A:", "B:", "C:", "The for statement"]
    constraints = [JsonSchema(SCHEMAS[n]) for n in chosen] + [None]
    record = demo.generate(
        prompts,
        processors=[StructuredOutput(constraints)],
        seed=5,
        max_new_tokens=MAX_NEW_TOKENS,
        return_dict=True,
        **SAMPLED,
    )
    assert_valid(record, [SCHEMAS[n] for n in chosen])  # the first three rows
    # The free row draws what it draws without the others' constraints.
    free = demo.generate(
        prompts,
        processors=[],
        seed=5,
        max_new_tokens=MAX_NEW_TOKENS,
        return_dict=True,
        **SAMPLED,
    )
    assert record.token_ids[3] == free.token_ids[3]


def test_schemas_of_one_size_bucket_share_a_program(demo, traces):
    def enums(words):
        return {
            "type": "object",
            "properties": {"w": {"enum": words}},
            "required": ["w"],
        }

    first = demo.generate(
        "A:",
        processors=[JsonSchema(enums(["red", "green"]))],
        max_new_tokens=20,
        **GREEDY,
    )
    before = traces()
    # A new processor object, another schema: the same program.
    second = demo.generate(
        "A:",
        processors=[JsonSchema(enums(["blue", "cyan"]))],
        max_new_tokens=20,
        **GREEDY,
    )
    # A regex of 23 states and 62 transitions: the tables' bucket too.
    pattern = "(alpha|beta|gamma|delta|epsilon) [0-9]"
    third = demo.generate(
        "A:", processors=[Regex(pattern)], max_new_tokens=20, **GREEDY
    )
    assert traces() == before
    assert json.loads(first[2:])["w"] in ("red", "green")
    assert json.loads(second[2:])["w"] in ("blue", "cyan")
    assert re.fullmatch(pattern, third[2:])


def test_beam_search_keeps_every_beam_in_the_language(demo):
    record = demo.generate(
        ["The answer in JSON:"] * 2,
        processors=[JsonSchema(SCHEMAS["enums"])],
        num_beams=4,
        num_return_sequences=2,
        max_new_tokens=MAX_NEW_TOKENS,
        return_dict=True,
    )
    assert_valid(record, [SCHEMAS["enums"]] * 4)
    # Two choices, six beams: four hypotheses (two ways to write each),
    # then rows that are no hypotheses, scored as such.
    record = demo.generate(
        "Is it?",
        processors=[Choice(["yes", "no"])],
        num_beams=6,
        num_return_sequences=6,
        max_new_tokens=8,
        return_dict=True,
    )
    real = [s > -1e8 for s in record.sequence_scores]
    assert sum(real) >= 2 and real == sorted(real, reverse=True)
    for text, reason, is_real in zip(record.text, record.finish_reasons, real):
        assert not is_real or (text in ("yes", "no") and reason == "stop")


@pytest.mark.only_backend("jax", "torch")  # TensorFlow: 74 s of compiles
def test_speculative_decoding_rejects_proposals_outside_the_language(demo):
    # Prompt lookup proposes the prompt's own words, which the regex never
    # allows: greedy output is plain greedy output all the same.
    pattern = r"[0-9]{2}(, [0-9]{2}){3,6}\."
    prompts = ["The for statement is a for statement", "The class"]
    plain = demo.generate(
        prompts, processors=[Regex(pattern)], max_new_tokens=40, **GREEDY
    )
    speculated = demo.generate(
        prompts,
        processors=[Regex(pattern)],
        prompt_lookup_ngram=2,
        max_new_tokens=40,
        **GREEDY,
    )
    assert speculated == plain
    record = demo.generate(
        prompts,
        processors=[JsonSchema(SCHEMAS["array"])],
        draft_model=demo,
        num_speculative_tokens=3,
        seed=4,
        max_new_tokens=MAX_NEW_TOKENS,
        return_dict=True,
        **SAMPLED,
    )
    assert_valid(record, [SCHEMAS["array"]] * 2)


def test_contrastive_search_and_streams(demo):
    record = demo.generate(
        ["Number:"] * 2,
        processors=[Regex(r"[0-9]{3}-[0-9]{2}")],
        penalty_alpha=0.6,
        top_k=4,
        max_new_tokens=20,
        return_dict=True,
    )
    assert all(re.fullmatch(r"[0-9]{3}-[0-9]{2}", t) for t in record.text)
    options = dict(
        processors=[JsonSchema(SCHEMAS["optional"])],
        seed=9,
        max_new_tokens=MAX_NEW_TOKENS,
        **SAMPLED,
    )
    chunks = list(demo.stream(["A:", "B:"], stream_chunk_size=3, **options))
    texts = ["".join(chunk.text[r] for chunk in chunks) for r in range(2)]
    assert texts == demo.generate(["A:", "B:"], strip_prompt=True, **options)
    assert_valid(
        demo.generate(["A:", "B:"], return_dict=True, **options),
        [SCHEMAS["optional"]] * 2,
    )


def test_response_format_forms_equal_the_processor(demo):
    schema = SCHEMAS["patterns"]
    # The option joins the model's own processors (its repetition penalty).
    reference = demo.generate(
        "A:",
        processors=[RepetitionPenalty(1.2), JsonSchema(schema)],
        seed=3,
        max_new_tokens=MAX_NEW_TOKENS,
        **SAMPLED,
    )
    openai = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}
    config = GenerationConfig(
        response_format=openai, seed=3, max_new_tokens=MAX_NEW_TOKENS, **SAMPLED
    )
    assert demo.generate("A:", generation_config=config) == reference
    assert (
        demo.generate(
            "A:",
            response_format={"json": json.dumps(schema)},
            seed=3,
            max_new_tokens=MAX_NEW_TOKENS,
            **SAMPLED,
        )
        == reference
    )
    text = demo.generate(
        "A:",
        response_format={"type": "json_object"},
        max_new_tokens=MAX_NEW_TOKENS,
        strip_prompt=True,
        **GREEDY,
    )
    assert isinstance(json.loads(text), dict)


def test_limits_inside_a_structure(demo):
    # The length limit inside the object: "length", the text so far.
    record = demo.generate(
        "A:",
        processors=[JsonSchema(SCHEMAS["nested"])],
        max_new_tokens=4,
        return_dict=True,
        **GREEDY,
    )
    assert record.finish_reasons == ["length"]
    assert record.text[0].startswith("{")
    # A minimum length that bans the end token where only it is allowed:
    # the constraint wins, the row ends in its language.
    record = demo.generate(
        ["A:"] * 4,
        processors=[Choice(["yes", "no"])],
        min_new_tokens=6,
        seed=0,
        max_new_tokens=12,
        return_dict=True,
        **SAMPLED,
    )
    assert set(record.text) <= {"yes", "no"}


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            dict(processors=[Choice(["a"])], stop_token_ids=None),
            ValueError,
            "stop token",
        ),
        (
            dict(processors=[StructuredOutput([Choice(["a"])] * 2)]),
            ValueError,
            "2 constraints for 1 prompts",
        ),
        (
            dict(processors=[Choice(["a"]), Regex("b")]),
            ValueError,
            "one structured output",
        ),
        (dict(response_format={"type": "json_schema"}), ValueError, "json_schema"),
        (dict(response_format={"type": "xml"}), ValueError, "Unknown"),
        (
            dict(response_format={"regex": "a", "choice": ["b"]}),
            ValueError,
            "exactly one",
        ),
        (dict(response_format="json"), TypeError, "response_format"),
    ],
    ids=["no-stop", "count", "two", "no-schema", "type", "two-keys", "string"],
)
def test_bad_calls_say_what_is_wrong(demo, call, error, match):
    with pytest.raises(error, match=match):
        demo.generate("A:", max_new_tokens=4, **call)


def test_bad_constraints_say_what_is_wrong(gpt2_lm):
    with pytest.raises(ValueError, match="cannot be compiled: .*objec"):
        JsonSchema({"type": "objec"})
    with pytest.raises(ValueError, match="`schema`.*look-around"):
        JsonSchema({"type": "string", "pattern": "(?=a)b"})
    with pytest.raises(ValueError, match="`pattern` '\\('"):
        Regex("(")
    with pytest.raises(ValueError, match="non-empty"):
        Choice([])
    with pytest.raises(ValueError, match="No integer"):
        JsonSchema({"type": "integer", "minimum": 3, "maximum": 2})
    with pytest.raises(ValueError, match="`maximum` must be finite"):
        JsonSchema({"type": "number", "maximum": float("inf")})
    # A model without a tokenizer has no token bytes to build automata on.
    with pytest.raises(TypeError, match="Tokenizer"):
        gpt2_lm.generate(
            [1, 2], processors=[JsonObject()], stop_token_ids=[0], max_new_tokens=4
        )


def test_compiled_constraints_and_several_samples_per_prompt(demo):
    # `compile(processors=...)` keeps the constraint for every call; with
    # `num_return_sequences`, each prompt's samples follow its own one.
    lm = CausalLM.from_preset("demo")
    lm.compile(
        processors=[StructuredOutput([Choice(["yes", "no"]), Regex("[0-9]{3}")])]
    )
    record = lm.generate(
        ["Is it?", "A number:"],
        num_return_sequences=3,
        seed=1,
        max_new_tokens=10,
        return_dict=True,
        **SAMPLED,
    )
    assert set(record.text[:3]) <= {"yes", "no"}
    assert all(re.fullmatch("[0-9]{3}", t) for t in record.text[3:])
    assert len(set(record.text[3:])) > 1


@pytest.mark.only_backend("jax")
def test_a_sentencepiece_vocabulary_and_another_family(tmp_path):
    # A Llama folder with a Metaspace tokenizer: word boundaries are the
    # automaton's spaces.
    from tests.models import hf_models

    hf_models.save_model_folder("llama", str(tmp_path))
    lm = CausalLM.from_pretrained(str(tmp_path))
    pattern = r"( [a-z]{1,6}){2,3}"
    record = lm.generate(
        ["we train", "a small"],
        processors=[Regex(pattern)],
        seed=0,
        max_new_tokens=30,
        return_dict=True,
        **SAMPLED,
    )
    assert record.finish_reasons == ["stop"] * 2
    assert all(re.fullmatch(pattern, text) for text in record.text), record.text
    record = lm.generate(
        "we train",
        processors=[Choice([" tokenizer", " the tests"])],
        max_new_tokens=30,
        return_dict=True,
        **GREEDY,
    )
    assert record.text[0] in (" tokenizer", " the tests")
