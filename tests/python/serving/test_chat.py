"""Chat (gpt.chat): templates rendered as transformers renders them, and conversations kept in
one KV cache, each answer checked against model.generate over the whole conversation's tokens
(what a model without a cache would be given)."""

import io
import json

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

import gpt
from gpt import chat as chat_module
from gpt import gguf_file, gguf_tokenizer
from gpt import models as installed
from gpt.chat import Chat, ChatSpec, ChatTemplate, chat_spec
from gpt.weights import random_weights

# SmolLM2's template, as its GGUF file holds it (newlines inside the string literals).
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Llama 3's shape: bos_token, a namespace, loop controls, raise_exception, tojson.
LLAMA3_LIKE = """{{- bos_token }}
{%- set ns = namespace(system='') %}
{%- for message in messages %}
    {%- if message['role'] == 'system' %}{% set ns.system = message['content'] %}{% continue %}{% endif %}
    {%- if message['role'] not in ['user', 'assistant'] %}
        {{- raise_exception('unknown role ' + message['role']) }}
    {%- endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}
    {{- message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if ns.system %}{{ '<|system|>' + (ns.system | tojson) }}{% endif %}
{%- if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"""
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": 'Be brief. <b>"ünï"</b>'}, {"role": "user", "content": "Hi"}],
    [
        {"role": "user", "content": "  2+2?  "},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "and 3+3?"},
    ],
]


@pytest.mark.parametrize("source", [CHATML, LLAMA3_LIKE], ids=["chatml", "llama3-like"])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_templates_render_as_transformers_renders_them(source, add_generation_prompt):
    template = ChatTemplate(source, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    for messages in CONVERSATIONS:
        expected = render_jinja_template(
            conversations=[messages],
            chat_template=source,
            add_generation_prompt=add_generation_prompt,
            bos_token="<|begin_of_text|>",
            eos_token="<|eot_id|>",
        )[0][0]
        assert template.render(messages, add_generation_prompt=add_generation_prompt) == expected


def test_template_errors_are_value_errors_naming_the_problem():
    with pytest.raises(ValueError, match="unknown role tool"):
        ChatTemplate(LLAMA3_LIKE).render([{"role": "tool", "content": "x"}])
    with pytest.raises(ValueError, match="the chat template does not compile"):
        ChatTemplate("{% for m in messages %}")
    with pytest.raises(ValueError, match="message 0 must be a mapping with a 'role' string"):
        ChatTemplate(CHATML).render(["hello"])
    # The sandbox: no reaching Python internals from a template.
    with pytest.raises(ValueError, match="the chat template failed"):
        ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}").render([])


def test_smollm2_chat_spec_from_its_gguf_file():
    path = installed.find("smollm2")
    import gguf

    tokenizer = gguf_tokenizer.read_tokenizer(gguf_file._Metadata(gguf.GGUFReader(path), path), path, 49152)
    spec = chat_spec(tokenizer)
    assert spec.end_ids == {0, 2} and spec.bos_id is None  # <|endoftext|>, <|im_end|>; no BOS added
    assert spec.template.source == CHATML
    text = spec.template.render([{"role": "user", "content": "Hi"}])
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_chat_spec_from_a_hf_directory(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {"chat_template": LLAMA3_LIKE, "bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"}}
        )
    )
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 9]}))
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 5}))
    spec = chat_spec(gpt.ByteTokenizer(), str(tmp_path))
    assert spec.end_ids == {5, 7, 9}
    assert spec.template.render([{"role": "user", "content": "x"}]).startswith(
        "<|begin_of_text|><|start_header_id|>user"
    )
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(ValueError, match="has no chat template"):
        chat_spec(gpt.ByteTokenizer(), str(tmp_path))
    (tmp_path / "chat_template.jinja").write_text(CHATML)  # where newer transformers saves it
    assert chat_spec(gpt.ByteTokenizer(), str(tmp_path)).template.source == CHATML


# -- conversations in the KV cache -------------------------------------------------------------


class AsciiTokenizer:
    """Printable ASCII and newline as ids 0..95: encode(a + b) == encode(a) + encode(b), so the
    tokens of a whole conversation are known without any chat bookkeeping."""

    def encode(self, text):
        return [95 if c == "\n" else ord(c) - 32 for c in text]

    def decode(self, ids):
        return "".join("\n" if i == 95 else chr(i + 32) for i in ids)


TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% else %}|{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
# Renders every earlier turn differently once one more follows.
COUNTING_TEMPLATE = "[{{ messages | length }}]" + TEMPLATE


@pytest.fixture(scope="module")
def model():
    """A random GPT-2 whose matrices are scaled up 20x, so that greedy generation wanders over
    the vocabulary instead of repeating one token (as GPT-2's small initialisation does)."""
    config = gpt.GPTConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=96, block_size=1024)
    weights = {name: value * 20 if value.ndim == 2 else value for name, value in random_weights(config, 3).items()}
    return gpt.GPT.from_weights(config, weights)


def end_token(model, tokenizer, text):
    """An id greedy generation reaches at its 4th step or later, first there: the chat's end token."""
    ids = tokenizer.encode(ChatTemplate(TEMPLATE).render([{"role": "user", "content": text}]))
    tokens = model.generate(ids, max_new_tokens=12)
    k = next(k for k in range(3, 12) if tokens[k] not in tokens[:k])
    return tokens[k], k


def reference_answer(model, tokenizer, spec, messages, max_new_tokens):
    """Greedy generation from the tokens of the whole conversation, stopped at an end token."""
    ids = tokenizer.encode(spec.template.render(messages, add_generation_prompt=True))
    return tokenizer.decode(model.generate(ids, max_new_tokens=max_new_tokens, stop=spec.end_ids))


def spec_ending_at(tokenizer, end, template=TEMPLATE):
    return ChatSpec(ChatTemplate(template, eos_token=tokenizer.decode([end])), frozenset({end}))


def test_each_turn_prefills_only_its_own_tokens(model):
    tokenizer = AsciiTokenizer()
    end, k = end_token(model, tokenizer, "hello")
    spec = spec_ending_at(tokenizer, end)
    chat = Chat(model, tokenizer, spec, max_new_tokens=20)
    first = "".join(chat.send("hello"))
    assert first == reference_answer(model, tokenizer, spec, [{"role": "user", "content": "hello"}], 20)
    assert chat.last_turn.generated_tokens == k  # ended at the end token
    opening = len(
        tokenizer.encode(spec.template.render([{"role": "user", "content": "hello"}], add_generation_prompt=True))
    )
    assert chat.last_turn.prefilled_tokens == opening
    whole, generated, cut = opening, k, False
    for question in ("and then?", "a third question, longer than the others"):
        # In the cache: the last prompt and its answer, but for an answer's last token when
        # max_new_tokens cut it (an end token is never run either: it goes in with the next turn).
        cached = whole + generated - (1 if cut else 0)
        assert chat.last_turn.cached_tokens == cached
        before = chat.messages
        answer = "".join(chat.send(question))
        asked = before + [{"role": "user", "content": question}]
        assert answer == reference_answer(model, tokenizer, spec, asked, 20)
        assert chat.messages == asked + [{"role": "assistant", "content": answer}]
        # Prefilled: what the cache lacked of the whole conversation, nothing earlier.
        whole = len(tokenizer.encode(spec.template.render(asked, add_generation_prompt=True)))
        assert chat.last_turn.prefilled_tokens == whole - cached < whole
        assert not chat.last_turn.reprefilled
        generated = chat.last_turn.generated_tokens
        cut = generated == 20


def test_answers_cut_by_max_new_tokens_or_by_the_caller_carry_on(model):
    tokenizer = AsciiTokenizer()
    end, k = end_token(model, tokenizer, "hello")
    spec = spec_ending_at(tokenizer, end)
    chat = Chat(model, tokenizer, spec, max_new_tokens=2)  # before the end token: cut
    first = "".join(chat.send("hello"))
    assert len(first) == 2 and chat.last_turn.generated_tokens == 2
    # The caller stops reading after one piece: the answer is what it read.
    stream = chat.send("next")
    piece = next(stream)
    stream.close()
    assert chat.messages[-1] == {"role": "assistant", "content": piece}
    answer = "".join(chat.send("last"))
    assert answer == reference_answer(model, tokenizer, spec, chat.messages[:-1], 2)
    assert not chat.last_turn.reprefilled


def test_a_template_that_rewrites_earlier_turns_prefills_it_all_again(model):
    tokenizer = AsciiTokenizer()
    end, _ = end_token(model, tokenizer, "hello")
    spec = spec_ending_at(tokenizer, end, COUNTING_TEMPLATE)
    chat = Chat(model, tokenizer, spec, max_new_tokens=8)
    "".join(chat.send("hello"))
    answer = "".join(chat.send("again"))
    assert chat.last_turn.reprefilled
    assert chat.last_turn.prefilled_tokens == len(tokenizer.encode(spec.template.render(chat.messages[:-1])))
    assert answer == reference_answer(model, tokenizer, spec, chat.messages[:-1], 8)


def test_one_cache_and_one_decode_program_serve_a_growing_conversation(model):
    """The conversation's cache is the context's from the first turn: a turn that takes it past
    256 and 512 positions neither replaces it (prefilling everything again) nor compiles another
    decode program."""
    tokenizer = AsciiTokenizer()
    end, _ = end_token(model, tokenizer, "hello")
    spec = spec_ending_at(tokenizer, end)
    chat = Chat(model, tokenizer, spec, max_new_tokens=8)
    "".join(chat.send("hello"))
    cache = chat._cache
    assert cache.max_len == cache.slots == 1024
    decode_programs = {key for key in model.compiled_steps() if key[0] == 1}
    for text in ("x" * 300, "z" * 300):
        answer = "".join(chat.send(text))
        assert chat._cache is cache and not chat.last_turn.reprefilled
        assert chat.last_turn.prefilled_tokens < 350  # the new turn, not the conversation
        assert answer == reference_answer(model, tokenizer, spec, chat.messages[:-1], 8)
    assert len(cache) > 600
    assert {key for key in model.compiled_steps() if key[0] == 1} == decode_programs == {(1, 1024)}
    with pytest.raises(chat_module.ConversationFull, match="past the model.s context of 1024"):
        chat.send("y" * 1000)


def test_run_reads_lines_and_streams_answers(model):
    tokenizer = AsciiTokenizer()
    end, _ = end_token(model, tokenizer, "hello")
    spec = spec_ending_at(tokenizer, end)
    out, err = io.StringIO(), io.StringIO()
    turns = chat_module.run(
        model, tokenizer, spec, max_new_tokens=6, stdin=io.StringIO("hello\n\nagain\n"), stdout=out, stderr=err
    )
    assert turns == 2
    reference = Chat(model, tokenizer, spec, max_new_tokens=6)
    expected = "".join(reference.send("hello")) + "\n" + "".join(reference.send("again")) + "\n"
    assert out.getvalue() == expected
    assert err.getvalue().count("[gpt] prefilled") == 2


def test_run_starts_a_full_conversation_again(model):
    tokenizer = AsciiTokenizer()
    end, _ = end_token(model, tokenizer, "hello")
    spec = spec_ending_at(tokenizer, end)
    out, err = io.StringIO(), io.StringIO()
    lines = "a" * 600 + "\n" + "b" * 600 + "\n"  # two turns do not fit block_size 1024
    turns = chat_module.run(model, tokenizer, spec, max_new_tokens=4, stdin=io.StringIO(lines), stdout=out, stderr=err)
    assert turns == 2
    assert "the conversation starts again" in err.getvalue()
    # The second answer is the one a new conversation gets.
    fresh = Chat(model, tokenizer, spec, max_new_tokens=4)
    assert out.getvalue().endswith("\n" + "".join(fresh.send("b" * 600)) + "\n")


def test_sampling_arguments_are_checked(model):
    spec = spec_ending_at(AsciiTokenizer(), 1)
    with pytest.raises(ValueError, match="temperature"):
        Chat(model, AsciiTokenizer(), spec, temperature=-1.0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        Chat(model, AsciiTokenizer(), spec, max_new_tokens=0)
