"""A random Qwen2.5-like model directory for the structured-output and tool-call tests: a small
random Llama with a byte-level tokenizer (its text is garbage, the hard case for a grammar),
ChatML's special tokens, Qwen2.5's <tool_call> tokens and its (trimmed) chat template; plus the
tools, the question and the checks both test files use."""

import contextlib
import json
import os

import jsonschema
import torch
from fastapi.testclient import TestClient
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils.chat_template_utils import render_jinja_template

from gpt.engine import Engine
from gpt.server import create_app

CONTEXT = 2048
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 256, 257, 258 after the 256 bytes
TOOL_TOKENS = ("<tool_call>", "</tool_call>")  # 259, 260: added, not special, as in Qwen2.5's vocabulary
IM_END = 258
# Qwen2.5's chat template (Qwen/Qwen2.5-7B-Instruct tokenizer_config.json), trimmed: tools in the
# system turn, an assistant's tool_calls as <tool_call> blocks, tool answers as <tool_response>.
QWEN25 = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}"
    '{{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n'
    'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}'
    '{%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}'
    '{{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments '
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, '
    '\\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}'
    "{%- else %}{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}{%- endif %}"
    "{%- for message in messages %}"
    '{%- if (message.role == "user") or (message.role == "system" and not loop.first) '
    'or (message.role == "assistant" and not message.tool_calls) %}'
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    '{%- elif message.role == "assistant" %}'
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}{{- \'", "arguments": \' }}'
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    '{%- elif message.role == "tool" %}'
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 16},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 14}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def model_directory(directory: str) -> str:
    """A random LlamaForCausalLM with a byte-level BPE tokenizer, ChatML's special tokens, Qwen2.5's
    <tool_call> tokens and its (trimmed) template, saved in `directory`; its end of turn is
    <|im_end|>."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": QWEN25, "eos_token": "<|im_end|>", "bos_token": None}, f)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256 + len(SPECIALS) + len(TOOL_TOKENS),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        max_position_embeddings=CONTEXT,
        bos_token_id=None,
        eos_token_id=IM_END,
        initializer_range=0.3,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).eval().save_pretrained(directory, safe_serialization=True)
    return directory


@contextlib.contextmanager
def serve(model, directory: str):
    """An in-process client of the server over an engine of `model`, named "qwen-like"."""
    engine = Engine(model, num_blocks=4 * CONTEXT // 16)
    with TestClient(create_app(engine, "qwen-like", model_dir=directory)) as client:
        yield client


def prompt_ids(directory, messages, **variables):
    """The conversation's tokens, made without gpt: transformers' renderer and `tokenizers`."""
    rendered = render_jinja_template(
        conversations=[messages], chat_template=QWEN25, add_generation_prompt=True, **variables
    )[0][0]
    return Tokenizer.from_file(os.path.join(directory, "tokenizer.json")).encode(rendered, add_special_tokens=False).ids


def valid(text: str, schema) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def sse(response) -> list[dict]:
    events = [line[len("data: ") :] for line in response.iter_lines() if line]
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]
