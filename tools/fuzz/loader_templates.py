"""The loader fuzzer's chat templates (tools/fuzz/fuzz_loaders.py): ChatML's, Llama 2's and Llama 3's,
and a grammar of jinja2 constructs that generates and mutates others."""

import random

from loader_formats import INTERESTING_INTS, Input

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
LLAMA2_CHAT = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
    "{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)
LLAMA3_CHAT = (
    "{{- bos_token }}{%- set date_string = strftime_now('%d %b %Y') %}{{- '<|start_header_id|>system"
    "<|end_header_id|>\\n\\nToday Date: ' + date_string + '<|eot_id|>' }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
    "'<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant"
    "<|end_header_id|>\\n\\n' }}{%- endif %}"
)
REAL_TEMPLATES = {"chatml": CHATML, "llama2": LLAMA2_CHAT, "llama3": LLAMA3_CHAT}


def template_expression(rng: random.Random, depth: int = 0) -> str:
    """A jinja2 expression: the variables a chat template gets, literals, arithmetic (** and * of
    numbers and strings), comparisons, filters, tests, calls (range, strftime_now,
    raise_exception, namespace, string methods) and attribute access, sandbox escapes included."""
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(
            (
                "messages", "message", "message.role", "message['content']", "messages[0].content", "messages[-1]",
                "loop.index", "loop.length", "bos_token", "eos_token", "add_generation_prompt", "ns.n", "x", "none",
                "true", "'a'", "'%Y'", "'<|im_end|>'", "''", "[1, 2, 3]", "{'a': 1}", "1.5", "-1",
                str(rng.choice(INTERESTING_INTS)), str(rng.choice((2, 9, 10, 99, 1000, 100000, 10**9))),
                "messages.__class__", "message.__init__", "''.__class__.__mro__", "cycler", "joiner()", "lipsum(3)",
                "range.__globals__", "messages.append", "self", "config", "request", "undefined_name",
            )
        )  # fmt: skip
    a, b = template_expression(rng, depth + 1), template_expression(rng, depth + 1)
    n = str(rng.choice((0, 1, 2, 3, 9, 99, 10**4, 10**5, 10**9, 2**31)))
    return rng.choice(
        (
            f"{a} ** {b}", f"{a} * {b}", f"{a} + {b}", f"{a} - {b}", f"{a} / {b}", f"{a} // {b}", f"{a} % {b}",
            f"{a} ~ {b}", f"{a} == {b}", f"{a} in {b}", f"{a} and {b}", f"not {a}", f"({a})", f"{a}[{b}]",
            f"{a}.{rng.choice(('role', 'content', 'split', 'strip', 'upper', 'items', 'keys', 'format', 'mro'))}",
            f"'a' * {n}", f"'%Y' * {n}", f"{n} ** {n} ** {n}", f"range({n})", f"range({a})", f"strftime_now({a})",
            f"strftime_now('%Y' * {n})", f"raise_exception({a})", f"namespace(n={a})", f"{a}.split({b})",
            f"{a} if {b} else {n}", f"[{a}] * {n}", f"{a}|{rng.choice(TEMPLATE_FILTERS)}",
            f"{a}|{rng.choice(TEMPLATE_FILTERS)}|{rng.choice(TEMPLATE_FILTERS)}",
            f"{a} is {rng.choice(TEMPLATE_TESTS)}",
            "(" * int(rng.choice((2, 50, 3000))) + "1" + ")" * int(rng.choice((2, 50, 3000))),
        )
    )  # fmt: skip


TEMPLATE_FILTERS = (
    "length", "upper", "lower", "trim", "tojson", "string", "int", "float", "list", "first", "last", "reverse",
    "sort", "unique", "join(', ')", "replace('a', 'bb')", "default('x')", "indent(100000)", "center(100000)",
    "wordwrap(1)", "batch(3)", "map(attribute='role')", "selectattr('role', 'equalto', 'user')", "items",
    "format(1, 2)", "truncate(3)", "safe", "escape", "attr('__class__')", "max", "min", "sum", "abs", "round",
    "dictsort", "groupby('role')", "slice(3)", "title", "capitalize", "wordcount", "urlencode", "xmlattr",
)  # fmt: skip
TEMPLATE_TESTS = ("defined", "none", "string", "mapping", "iterable", "number", "divisibleby(0)", "sameas(1)")


def template_statement(rng: random.Random, depth: int = 0) -> str:
    """One jinja2 construct: output, if/elif/else, for (over messages, ranges and nested
    ranges), set, namespaces, macros, filter and raw blocks, loop controls, deep nesting, tags
    that do not close, include/extends/import (no loader), comments and plain text."""
    e = template_expression(rng)
    body = template_statement(rng, depth + 1) if depth < 3 and rng.random() < 0.6 else rng.choice(("x", "{{ e }}"))
    body = body.replace("{{ e }}", "{{ " + template_expression(rng, 2) + " }}")
    n = rng.choice((2, 3, 100, 1000, 10**5))
    deep = rng.choice((2, 30, 500, 5000))
    return rng.choice(
        (
            "{{ " + e + " }}", "{{- " + e + " -}}", f"{{% if {e} %}}{body}{{% endif %}}",
            f"{{% if {e} %}}{body}{{% elif {template_expression(rng)} %}}x{{% else %}}{body}{{% endif %}}",
            f"{{% for message in messages %}}{body}{{% endfor %}}", f"{{% for x in {e} %}}{body}{{% endfor %}}",
            f"{{% for i in range({n}) %}}{{% for j in range({n}) %}}{body}{{% endfor %}}{{% endfor %}}",
            f"{{% set x = {e} %}}", f"{{% set ns = namespace(n=0) %}}{{% set ns.n = {e} %}}",
            f"{{% macro m(a) %}}{body}{{{{ m(a) }}}}{{% endmacro %}}{{{{ m({e}) }}}}",
            f"{{% filter upper %}}{body}{{% endfilter %}}", "{% raw %}{{ x }}{% endraw %}",
            f"{{% for x in messages %}}{{% if {e} %}}{{% break %}}{{% endif %}}{{% continue %}}{{% endfor %}}",
            "{% if true %}" * deep + "x" + "{% endif %}" * deep, "{% for x in [1] %}" * 40 + "x" + "{% endfor %}" * 40,
            f"{{% if {e} %}}", "{% endfor %}", "{{ ", "{% include 'other.jinja' %}", "{% extends 'base' %}",
            "{% import 'x' as y %}", "{# a comment #}", "<|im_start|>", "\n", f"{{% set x = {e} %}}{{{{ x * {n} }}}}",
            f"{{{{ messages|map(attribute='content')|join({e}) }}}}",
            f"{{% for k, v in {e}|items %}}{{{{ k }}}}{{% endfor %}}",
        )
    )  # fmt: skip


def mutate_template(rng: random.Random, item: Input) -> str:
    """A construct inserted, dropped, repeated, replaced or wrapped in a block; or a real template
    spliced in."""
    pieces = item.doc.pieces
    choice = rng.randrange(7)
    if choice <= 1 or not pieces:
        pieces.insert(rng.randrange(len(pieces) + 1), template_statement(rng))
        return "construct inserted"
    i = rng.randrange(len(pieces))
    if choice == 2:
        del pieces[i]
        return "construct dropped"
    if choice == 3:
        pieces.insert(i, pieces[i] * rng.choice((1, 2, 10)))
        return "construct repeated"
    if choice == 4:
        pieces[i] = template_statement(rng)
        return "construct replaced"
    if choice == 5:
        opening, closing = rng.choice(
            (
                (f"{{% if {template_expression(rng)} %}}", "{% endif %}"),
                ("{% for message in messages %}", "{% endfor %}"),
                (f"{{% for i in range({rng.choice((1, 3, 10**4))}) %}}", "{% endfor %}"),
                ("{% filter upper %}", "{% endfilter %}"),
            )
        )
        pieces[i] = opening + pieces[i] + closing
        return "construct wrapped"
    pieces.insert(i, rng.choice(list(REAL_TEMPLATES.values())))
    return "real template spliced"
