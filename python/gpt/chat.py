"""Chat: a model's chat template, rendered with jinja2 as transformers renders it, and a
conversation kept in one KV cache turn after turn (`python -m gpt chat`).

Templates. `ChatTemplate(source)` compiles a template (GGUF's tokenizer.chat_template, HF's
tokenizer_config.json "chat_template" or chat_template.jinja) in jinja2's immutable sandbox with
transformers' settings (trim_blocks, lstrip_blocks, loop controls; `raise_exception`,
`strftime_now` and a `tojson` that keeps non-ASCII and HTML characters as they are) and renders
`messages`, `add_generation_prompt`, `bos_token` and `eos_token` as transformers'
apply_chat_template does.

Conversation. `Chat.send(text)` renders the whole conversation with the new user message and a
generation prompt, and prefills only the text past what the cache already holds (the earlier
turns' prompts and answers, generated tokens as they were sampled), as llama.cpp's chat does; an
answer ends at an end-of-generation token (the template's end of turn, such as <|im_end|>, or EOS)
or after max_new_tokens. The end token is fed to the cache with the next turn's text. A template
that renders earlier turns differently once a new one follows (some drop an answer's reasoning)
makes the cache start again from the whole conversation: correct, but that turn prefills it all
(`last_turn.reprefilled` says so)."""

import dataclasses
import datetime
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TextIO

import numpy as np

from gpt import hf_checkpoint
from gpt.detokenizer import IncrementalDetokenizer
from gpt.sampling import check_sampling_args, sample


class ConversationFull(ValueError):
    """A new turn would take the conversation past the model's context (block_size)."""


class NoChatTemplate(ValueError):
    """The model has no chat template: a base model, to continue text with, not to chat with."""


class ChatTemplate:
    """A chat template (jinja2 source), compiled once; render() it per conversation."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = ""):
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        if not isinstance(source, str) or not source.strip():
            raise ValueError("a chat template must be a non-empty string of jinja2 source")

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        def strftime_now(format):
            return datetime.datetime.now().strftime(format)

        environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        environment.filters["tojson"] = tojson
        environment.globals["raise_exception"] = raise_exception
        environment.globals["strftime_now"] = strftime_now
        try:
            self._template = environment.from_string(source)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise ValueError(f"the chat template does not compile: {e} (line {e.lineno})") from None
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True, **variables) -> str:
        """The prompt text of `messages` ({"role": ..., "content": ...} dicts), ending with the
        assistant's generation prompt when `add_generation_prompt`. Extra `variables` reach the
        template as they do through transformers' apply_chat_template kwargs."""
        import jinja2

        for i, message in enumerate(messages):
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
                raise ValueError(f"message {i} must be a mapping with a 'role' string, got {message!r}")
        try:
            return self._template.render(
                messages=[dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **variables,
            )
        except jinja2.exceptions.TemplateError as e:
            raise ValueError(f"the chat template failed: {type(e).__name__}: {e}") from None


@dataclasses.dataclass(frozen=True)
class ChatSpec:
    """What a chat needs beside the model: the template, the ids that end an answer, and the BOS
    the first turn starts with when the tokenizer adds one (llama.cpp's add_bos) and the template
    does not render it."""

    template: ChatTemplate
    end_ids: frozenset[int]
    bos_id: int | None = None


def chat_spec(tokenizer, model_dir: str | None = None) -> ChatSpec:
    """The ChatSpec of a model's tokenizer: a GGUF file's (gpt.gguf_tokenizer.GGUFTokenizer:
    tokenizer.chat_template, its end-of-generation ids, add_bos), or for a HF directory its
    tokenizer_config.json ("chat_template", "bos_token", "eos_token"), chat_template.jinja and the
    eos_token_id of generation_config.json and config.json. Raises NoChatTemplate (a ValueError)
    when there is no template: such a model is a base model to `generate` with, not to chat with;
    ValueError for a template that does not compile or a directory with no end-of-generation token."""
    source = getattr(tokenizer, "chat_template", None)
    if source is not None:
        end_ids = frozenset(getattr(tokenizer, "end_of_generation", ()))
        bos_id = tokenizer.bos_token_id if getattr(tokenizer, "add_bos", False) else None
        template = ChatTemplate(source, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token)
        return ChatSpec(template, end_ids, bos_id)
    if model_dir is None or not os.path.isdir(model_dir):
        raise NoChatTemplate(
            "the model has no chat template (tokenizer.chat_template): use `generate` for a base model"
        )
    config = _read_json(os.path.join(model_dir, "tokenizer_config.json"))
    source = config.get("chat_template")
    if isinstance(source, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        source = next((t.get("template") for t in source if isinstance(t, dict) and t.get("name") == "default"), None)
    jinja_file = os.path.join(model_dir, "chat_template.jinja")
    if source is None and os.path.isfile(jinja_file):
        with open(jinja_file, encoding="utf-8") as f:
            source = f.read()
    if not isinstance(source, str):
        raise NoChatTemplate(
            f"{model_dir} has no chat template (tokenizer_config.json, chat_template.jinja): use `generate`"
        )
    bos, eos = (_token_text(config.get(key)) for key in ("bos_token", "eos_token"))
    end_ids = set(hf_checkpoint.eos_token_ids(model_dir))
    backend = getattr(tokenizer, "backend", None)
    if eos and backend is not None and backend.token_to_id(eos) is not None:
        end_ids.add(backend.token_to_id(eos))
    if not end_ids:
        raise ValueError(
            f"{model_dir}: no end-of-generation token (eos_token_id, eos_token), so an answer would never end"
        )
    return ChatSpec(ChatTemplate(source, bos_token=bos, eos_token=eos), frozenset(end_ids))


def encode_rendered(tokenizer, text: str) -> list[int]:
    """Tokens of template output: special tokens parsed, no BOS/EOS added (the template has its own)."""
    backend = getattr(tokenizer, "backend", None)
    if backend is not None:
        return backend.encode(text, add_special_tokens=False).ids
    return tokenizer.encode(text)


def prompt_ids(tokenizer, spec: ChatSpec, rendered: str) -> list[int]:
    """The tokens of a whole rendered conversation, as its first turn prefills them: the text's
    tokens, after the spec's BOS when the tokenizer adds one and the template did not render it."""
    ids = encode_rendered(tokenizer, rendered)
    if spec.bos_id is not None and ids[:1] != [spec.bos_id]:
        ids = [spec.bos_id] + ids
    return ids


def _read_json(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        try:
            value = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON: {e}") from None
    return value if isinstance(value, dict) else {}


def _token_text(value) -> str:
    """A tokenizer_config.json special token: a string or an AddedToken dict {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


@dataclasses.dataclass(frozen=True)
class TurnStats:
    """One answer: tokens prefilled for it (the new turn's text, plus the previous answer's end
    token), tokens generated, their seconds, and whether the whole conversation was prefilled
    again (a template that re-renders earlier turns; see the module docstring)."""

    prefilled_tokens: int
    generated_tokens: int
    prefill_seconds: float
    generate_seconds: float
    reprefilled: bool
    cached_tokens: int


class Chat:
    """A conversation with `model`, one KV cache for all its turns. `send(text)` streams the
    answer's text; `messages` is the conversation so far (as the template renders it)."""

    def __init__(
        self,
        model,
        tokenizer,
        spec: ChatSpec,
        *,
        system: str | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
    ):
        check_sampling_args(temperature, top_k, top_p)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        self._model = model
        self._tokenizer = tokenizer
        self._spec = spec
        self._max_new_tokens = max_new_tokens
        self._sampling = (float(temperature), top_k, top_p)
        self._rng = np.random.default_rng(seed)
        self._system = system
        self.last_turn: TurnStats | None = None
        self.reset()

    @property
    def messages(self) -> list[dict[str, str]]:
        return [dict(m) for m in self._messages]

    def reset(self) -> None:
        """Forget the conversation (keeps the system message)."""
        self._messages = [{"role": "system", "content": self._system}] if self._system is not None else []
        self._cache = None
        self._ids: list[int] = []  # the tokens in the cache, in order
        self._text = ""  # the text they stand for: the rendered conversation up to the cache's end
        self._pending: list[int] = []  # sampled but not yet in the cache (the last answer's end token)
        self._pending_text = ""

    def send(self, text: str) -> Iterator[str]:
        """Adds the user message `text` and streams the answer's text, piece by piece. The answer
        joins the conversation when the iterator is exhausted (or closed)."""
        if not isinstance(text, str):
            raise TypeError(f"a message must be a str, got {type(text).__name__}")
        messages = self._messages + [{"role": "user", "content": text}]
        rendered = self._spec.template.render(messages, add_generation_prompt=True)
        new_ids, reprefilled = self._new_tokens(rendered)
        if len(self._ids) + len(new_ids) + 1 > self._model.config.block_size:
            raise ConversationFull(
                f"the conversation would be {len(self._ids) + len(new_ids)} tokens, past the model's context of "
                f"{self._model.config.block_size}: reset it"
            )
        self._messages = messages
        return self._answer(rendered, new_ids, reprefilled)

    def _new_tokens(self, rendered: str) -> tuple[list[int], bool]:
        """The tokens to prefill for `rendered`: the pending end token and the text past what the
        cache holds; or, when `rendered` does not extend it, all of it (with the cache emptied)."""
        cached_text = self._text + self._pending_text
        if self._cache is not None and rendered.startswith(cached_text):
            return self._pending + encode_rendered(self._tokenizer, rendered[len(cached_text) :]), False
        reprefilled = self._cache is not None
        self._cache, self._ids, self._text, self._pending, self._pending_text = None, [], "", [], ""
        return prompt_ids(self._tokenizer, self._spec, rendered), reprefilled

    def _ensure_room(self, needed: int) -> None:
        """A cache for `needed` positions: a power of two (at least 256), so that a few compiled
        programs serve a whole conversation; a larger one is filled again from the tokens."""
        if self._cache is not None and needed <= self._cache.max_len:
            return
        capacity = 256
        while capacity < needed:
            capacity *= 2
        capacity = min(capacity, self._model.config.block_size)
        cache = self._model.new_cache(capacity)
        if self._ids:
            self._model.prefill(self._ids, cache)
        self._cache = cache

    def _answer(self, rendered: str, new_ids: list[int], reprefilled: bool) -> Iterator[str]:
        model, end_ids = self._model, self._spec.end_ids
        temperature, top_k, top_p = self._sampling
        max_new = min(self._max_new_tokens, model.config.block_size - len(self._ids) - len(new_ids))
        self._ensure_room(len(self._ids) + len(new_ids) + max_new)
        start = time.perf_counter()
        logits = model.prefill(new_ids, self._cache)
        self._ids += new_ids
        self._text, self._pending, self._pending_text = rendered, [], ""
        prefill_seconds = time.perf_counter() - start
        start = time.perf_counter()
        detokenizer = IncrementalDetokenizer(self._tokenizer)
        answer: list[int] = []
        in_cache = 0  # answer tokens run through the model (the last one sampled is not, yet)
        end = None
        try:
            for step in range(max_new):
                token = sample(logits, temperature, top_k, top_p, self._rng)
                if token in end_ids:
                    end = token
                    break
                answer.append(token)
                if piece := detokenizer.add(token):
                    yield piece
                if step + 1 == max_new:
                    break
                logits = model.decode(token, self._cache)
                self._ids.append(token)
                in_cache += 1
            if tail := detokenizer.flush():
                yield tail
        finally:
            # Whatever ended the answer (an end token, max_new_tokens, the caller closing the
            # stream), the cache holds answer[:in_cache]; the rest, and the end token, go in with
            # the next turn's text. A reply whose text does not extend its cached part's (an
            # unfinished character) makes the next turn start the cache again.
            reply = self._tokenizer.decode(answer)
            cached = self._tokenizer.decode(answer[:in_cache])
            self._text = rendered + cached
            self._pending = answer[in_cache:] + ([end] if end is not None else [])
            self._pending_text = reply[len(cached) :] + (self._token_text(end) if end is not None else "")
            self._messages = self._messages + [{"role": "assistant", "content": reply}]
            self.last_turn = TurnStats(
                prefilled_tokens=len(new_ids),
                generated_tokens=len(answer),
                prefill_seconds=prefill_seconds,
                generate_seconds=time.perf_counter() - start,
                reprefilled=reprefilled,
                cached_tokens=len(self._ids),
            )

    def _token_text(self, token: int) -> str:
        """The text an end token stands for in the template (special tokens included)."""
        backend = getattr(self._tokenizer, "backend", None)
        if backend is not None:
            return backend.decode([token], skip_special_tokens=False)
        return self._tokenizer.decode([token])


def run(
    model,
    tokenizer,
    spec: ChatSpec,
    *,
    system: str | None = None,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """`python -m gpt chat`: each line of `stdin` is a user message; each answer is streamed to
    `stdout` and ends with a newline; a timing line per turn goes to `stderr`. Returns the number
    of turns. A prompt ("> ") is shown when stdin is a terminal."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    chat = Chat(
        model,
        tokenizer,
        spec,
        system=system,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
    )
    interactive = stdin.isatty()
    turns = 0
    try:
        while True:
            if interactive:
                stdout.write("> ")
                stdout.flush()
            line = stdin.readline()
            if not line:
                break
            text = line.rstrip("\n")
            if not text.strip():
                continue
            _turn(chat, text, stdout, stderr)
            turns += 1
    except KeyboardInterrupt:  # Ctrl-C ends the chat (mid-answer too), not with a traceback
        stdout.write("\n")
        stdout.flush()
    return turns


def _turn(chat: Chat, text: str, stdout: TextIO, stderr: TextIO) -> None:
    """One turn of `run`: the answer streamed to stdout, its timing line to stderr."""
    try:
        pieces = chat.send(text)
    except ConversationFull as e:  # start again, with this turn
        print(f"[gpt] {e}; the conversation starts again", file=stderr, flush=True)
        chat.reset()
        pieces = chat.send(text)
    for piece in pieces:
        stdout.write(piece)
        stdout.flush()
    stdout.write("\n")
    stdout.flush()
    stats = chat.last_turn
    assert stats is not None
    rate = stats.generated_tokens / stats.generate_seconds if stats.generate_seconds else float("inf")
    print(
        f"[gpt] prefilled {stats.prefilled_tokens} tokens in {stats.prefill_seconds:.2f} s"
        + (" (the whole conversation)" if stats.reprefilled else "")
        + f" | generated {stats.generated_tokens} tokens, {rate:.1f} tok/s"
        + f" | {stats.cached_tokens} tokens in the cache",
        file=stderr,
        flush=True,
    )
