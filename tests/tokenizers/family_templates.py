"""Chat templates in the forms of the families keras-gen loads, written for
the tests: ChatML with tools and thinking (Qwen), header blocks with a
date and JSON tool calls (Llama 3), alternating turns that refuse a system
message (Gemma), `[INST]` with `[TOOL_CALLS]` (Mistral) and `<|user|>`
blocks (Phi-3). Between them they use what real templates use: loop
controls, namespaces, `tojson` with arguments, `raise_exception`,
`strftime_now`, filters, `bos_token` and `eos_token`, and a keyword
(`enable_thinking`).

`folder(kind, path)` writes a tiny tokenizer with the family's special
tokens and template, which both transformers and keras-gen load.
"""

import json
import os

import tokenizers

QWEN = """\
{%- if tools %}
<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

Call a function with <tool_call>{"name": ..., "arguments": {...}}</tool_call>.<|im_end|>
{% elif messages[0].role == 'system' %}
<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}{% continue %}{% endif %}
{%- if message.role == 'tool' %}
<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role == 'assistant' %}
<|im_start|>assistant
{% if message.reasoning_content %}<think>
{{ message.reasoning_content }}
</think>

{% endif %}{{ message.content | default('', true) }}
{%- for call in message.tool_calls | default([]) %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% else %}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}<think>

</think>

{% endif %}
{%- endif %}
"""

LLAMA3 = """\
{{- bos_token }}
{%- set ns = namespace(tool_results=false) %}
{%- for message in messages %}
{%- if message.role == 'tool' %}{% set ns.tool_results = true %}{% break %}{% endif %}
{%- endfor %}
{%- if messages[0].role == 'system' %}
{%- set system = messages[0].content | trim %}{% set rest = messages[1:] %}
{%- else %}
{%- set system = '' %}{% set rest = messages %}
{%- endif %}
<|start_header_id|>system<|end_header_id|>

{% if tools or ns.tool_results %}Environment: ipython
{% endif %}Today Date: {{ strftime_now('%d %b %Y') }}

{% if tools %}Answer with a call as {"name": function name, "parameters": arguments}:
{% for tool in tools %}{{ tool | tojson(indent=4) }}

{% endfor %}{% endif %}{{ system }}<|eot_id|>
{%- for message in rest %}
<|start_header_id|>{{ 'ipython' if message.role == 'tool' else message.role }}<|end_header_id|>

{% if message.tool_calls %}{{ {'name': message.tool_calls[0].function.name, 'parameters': message.tool_calls[0].function.arguments} | tojson }}{% else %}{{ message.content | trim }}{% endif %}<|eot_id|>
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}
"""

GEMMA = """\
{{ bos_token }}
{%- if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}
{%- for message in messages %}
{%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}
{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
{%- endif %}
<start_of_turn>{{ 'model' if message.role == 'assistant' else message.role }}
{{ message.content | trim }}<end_of_turn>
{% endfor %}
{%- if add_generation_prompt %}<start_of_turn>model
{% endif %}
"""

MISTRAL = """\
{{ bos_token }}
{%- for message in messages %}
{%- if message.role == 'user' %}
{%- if loop.last and tools %}[AVAILABLE_TOOLS] {{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}
[INST] {{ message.content }}[/INST]
{%- elif message.role == 'assistant' %}
{%- if message.tool_calls %}[TOOL_CALLS] {{ message.tool_calls | map(attribute='function') | list | tojson }}
{%- else %} {{ message.content }}{% endif %}{{ eos_token }}
{%- elif message.role == 'tool' %}[TOOL_RESULTS] {{ {'content': message.content} | tojson }}[/TOOL_RESULTS]
{%- endif %}
{%- endfor %}
"""

PHI3 = """\
{% for message in messages %}
{% if message.role in ['system', 'user', 'assistant'] %}<|{{ message.role }}|>
{{ message.content }}<|end|>
{% endif %}
{% endfor %}
{% if add_generation_prompt %}<|assistant|>
{% else %}{{ eos_token }}{% endif %}
"""

# kind -> (template, special tokens, bos, eos, the bos the tokenizer adds)
FAMILIES = {
    "qwen": (QWEN, ["<|im_start|>", "<|im_end|>"], None, "<|im_end|>"),
    "llama3": (
        LLAMA3,
        ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        "<|begin_of_text|>",
        "<|eot_id|>",
    ),
    "gemma": (
        GEMMA,
        ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"],
        "<bos>",
        "<eos>",
    ),
    "mistral": (
        MISTRAL,
        [
            "<s>",
            "</s>",
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
        ],
        "<s>",
        "</s>",
    ),
    "phi3": (
        PHI3,
        ["<s>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
        "<s>",
        "<|endoftext|>",
    ),
}

# kind -> tokens of their own that are not special (they decode as text).
ADDED = {"qwen": ["<think>", "</think>", "<tool_call>", "</tool_call>"]}

CORPUS = [
    "What is the weather in Paris today? It is sunny and warm.",
    "You are a helpful assistant. Answer briefly.",
    "get_weather city name arguments parameters type object string",
    "Today Date Environment ipython tools function call result",
    'the quick brown fox jumps over the lazy dog 0123456789 {}[]":,',
] * 4


def folder(kind, path):
    """Write `kind`'s tiny tokenizer, with its special tokens and chat
    template, into `path`; the tokenizer adds the family's BOS (if any) to
    what it encodes, as Llama's, Gemma's and Mistral's do."""
    template, special, bos, eos = FAMILIES[kind]
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(
        add_prefix_space=False
    )
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<unk>", *special],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    # Tokens of their own that decode as text, as Qwen's are.
    tokenizer.add_tokens(
        [
            tokenizers.AddedToken(token, special=False, normalized=False)
            for token in ADDED.get(kind, ())
        ]
    )
    if bos is not None:
        tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tokenizer.token_to_id(bos))]
        )
    os.makedirs(path, exist_ok=True)
    tokenizer.save(os.path.join(path, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": eos,
        "unk_token": "<unk>",
        "chat_template": template,
    }
    if bos is not None:
        config["bos_token"] = bos
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    return path
