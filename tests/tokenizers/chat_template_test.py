import pytest

pytest.importorskip("jinja2")

from keras_gen.serving import ChatTemplate  # noqa: E402
from tests.text_models import tiny_tokenizer  # noqa: E402

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is a class?"},
]


def test_default_template_is_plain_lines():
    template = ChatTemplate()
    assert template.render(MESSAGES) == (
        "System: Be brief.\nUser: What is a class?\nAssistant:"
    )
    assert template.render(MESSAGES, add_generation_prompt=False).endswith("class?\n")
    assert "\nUser:" in template.stop_strings


def test_tokenizer_config_template_is_used():
    tokenizer = tiny_tokenizer()
    tokenizer.config["chat_template"] = (
        "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}"
        "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    template = ChatTemplate.from_tokenizer(tokenizer)
    assert template.render(MESSAGES[1:]) == (
        "<|endoftext|><user>What is a class?<assistant>"
    )
    assert template.stop_strings == ()


def test_named_templates_and_raise_exception():
    tokenizer = tiny_tokenizer()
    tokenizer.config["chat_template"] = [
        {"name": "tool_use", "template": "tools"},
        {"name": "default", "template": "{{ raise_exception('no system') }}"},
    ]
    template = ChatTemplate.from_tokenizer(tokenizer)
    with pytest.raises(Exception, match="no system"):
        template.render(MESSAGES)


def test_templates_are_sandboxed():
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(Exception):
        template.render(MESSAGES)
