"""Chat: a model's chat template, rendered with jinja2 as transformers renders it, and a
conversation kept in one KV cache turn after turn (`python -m gpt chat`).

Templates. `ChatTemplate(source, origin=...)` compiles a template (GGUF's tokenizer.chat_template,
HF's tokenizer_config.json "chat_template" or chat_template.jinja) in jinja2's immutable sandbox
with transformers' settings (trim_blocks, lstrip_blocks, loop controls; `raise_exception`,
`strftime_now` and a `tojson` that keeps non-ASCII and HTML characters as they are) and renders
`messages`, `add_generation_prompt`, `bos_token` and `eos_token` as transformers'
apply_chat_template does. A template is a program from a stranger's file, so it is compiled and
rendered in a worker process with a time, memory and output budget (gpt.template_sandbox); every
failure is a ChatTemplateError naming the template's file and key.

Conversation. `Chat.send(text)` renders the whole conversation with the new user message and a
generation prompt, and prefills only the text past what the cache already holds (the earlier
turns' prompts and answers, generated tokens as they were sampled), as llama.cpp's chat does; an
answer ends at an end-of-generation token (the template's end of turn, such as <|im_end|>, or EOS)
or after max_new_tokens. The end token is fed to the cache with the next turn's text. A template
that renders earlier turns differently once a new one follows (some drop an answer's reasoning)
makes the cache start again from the whole conversation: correct, but that turn prefills it all
(`last_turn.reprefilled` says so)."""

import dataclasses
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TextIO

import numpy as np

from gpt import hf_checkpoint, model_files, template_sandbox
from gpt.detokenizer import IncrementalDetokenizer
from gpt.sampling import check_sampling_args, sample
from gpt.structured_output import json_schema_grammar
from gpt.template_sandbox import ChatTemplateError, RenderTooLong

# chat_template.jinja, at most (real ones are a few KB; the template itself is bounded by
# template_sandbox.MAX_TEMPLATE_CHARS).
MAX_TEMPLATE_FILE_BYTES = 4 * template_sandbox.MAX_TEMPLATE_CHARS


# A rendered prompt's characters, at most, per token of the model's context. Text averages 3-5
# characters a token; a prompt of more than 16 a token that still fits the context is all but
# impossible, so a render past it is stopped before the tokenizer spends seconds and gigabytes on
# a prompt the model would refuse anyway.
MAX_CHARS_PER_TOKEN = 16


class ConversationFull(ValueError):
    """A new turn would take the conversation past the model's context (block_size)."""


class NoChatTemplate(ValueError):
    """The model has no chat template: a base model, to continue text with, not to chat with."""


class ChatTemplate:
    """A chat template (jinja2 source from `origin`, a file and key that messages name), compiled
    once and rendered per conversation, both in a worker process with time, memory and output
    budgets (gpt.template_sandbox: a template is a stranger's program). Every failure is a
    ChatTemplateError (a ValueError) naming `origin`."""

    def __init__(
        self,
        source: str,
        *,
        bos_token: str = "",
        eos_token: str = "",
        origin: str = "<string>",
        render_seconds: float = template_sandbox.RENDER_SECONDS,
    ):
        if not isinstance(origin, str):
            raise TypeError(f"origin must be a str naming where the template came from, got {origin!r}")
        self._template = template_sandbox.SandboxedTemplate(source, origin)
        self.source = source
        self.origin = origin
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.render_seconds = render_seconds

    def render(
        self,
        messages: Sequence[Mapping[str, str]],
        add_generation_prompt: bool = True,
        *,
        max_chars: int | None = None,
        **variables,
    ) -> str:
        """The prompt text of `messages` ({"role": ..., "content": ...} dicts), ending with the
        assistant's generation prompt when `add_generation_prompt`. Extra `variables` reach the
        template as they do through transformers' apply_chat_template kwargs. The text has at most
        `max_chars` characters (template_sandbox.DEFAULT_MAX_CHARS when None; RenderTooLong past
        it), and is rendered within self.render_seconds plus time in proportion to the input."""
        for i, message in enumerate(messages):
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
                raise ValueError(f"message {i} must be a mapping with a 'role' string, got {message!r}")
        if max_chars is None:
            max_chars = template_sandbox.DEFAULT_MAX_CHARS
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"max_chars must be a positive int, got {max_chars!r}")
        context = dict(
            messages=[dict(m) for m in messages],
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
            **variables,
        )
        text = self._template.render(context, max_chars=max_chars, seconds=self.render_seconds)
        if not text:
            raise ChatTemplateError(
                f"{self.origin}: the chat template rendered nothing for these {len(messages)} messages"
            )
        return text


def max_prompt_chars(block_size: int, max_body_bytes: int | None = None) -> int:
    """The most characters a rendered conversation may have for a model of `block_size` tokens:
    MAX_CHARS_PER_TOKEN a token, and no more than `max_body_bytes` (a server's body limit) when given."""
    limit = MAX_CHARS_PER_TOKEN * block_size
    return limit if max_body_bytes is None else min(limit, max_body_bytes)


@dataclasses.dataclass(frozen=True)
class ChatSpec:
    """What a chat needs beside the model: the template, the ids that end an answer, and the BOS
    the first turn starts with when the tokenizer adds one (llama.cpp's add_bos) and the template
    does not render it."""

    template: ChatTemplate
    end_ids: frozenset[int]
    bos_id: int | None = None


def chat_spec(tokenizer, model_dir: str | None = None, *, model_path: str | None = None) -> ChatSpec:
    """The ChatSpec of a model's tokenizer: a GGUF file's (gpt.gguf_tokenizer.GGUFTokenizer:
    tokenizer.chat_template, its end-of-generation ids, add_bos), or for a HF directory its
    tokenizer_config.json ("chat_template", "bos_token", "eos_token"), chat_template.jinja and the
    eos_token_id of generation_config.json and config.json. Raises NoChatTemplate (a ValueError)
    when there is no template: such a model is a base model to `generate` with, not to chat with;
    ChatTemplateError for a template that does not compile (naming its file and key: `model_path`
    names the GGUF file), gpt.ModelFileError for a directory's file that cannot be read (a link
    out of the directory, a FIFO, a key of the wrong type), ValueError for a directory with no
    end-of-generation token."""
    source = getattr(tokenizer, "chat_template", None)
    if source is not None:
        end_ids = frozenset(getattr(tokenizer, "end_of_generation", ()))
        bos_id = tokenizer.bos_token_id if getattr(tokenizer, "add_bos", False) else None
        path = model_path or getattr(tokenizer, "path", None)
        origin = f"{path} (tokenizer.chat_template)" if path else "the GGUF file's tokenizer.chat_template"
        template = ChatTemplate(source, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token, origin=origin)
        return ChatSpec(template, end_ids, bos_id)
    if model_dir is None or not os.path.isdir(model_dir):
        raise NoChatTemplate(
            "the model has no chat template (tokenizer.chat_template): use `generate` for a base model"
        )
    config = model_files.read_tokenizer_config(model_dir)
    source, origin = config.chat_template, f"{os.path.join(model_dir, 'tokenizer_config.json')} (chat_template)"
    if source is None and model_files.present(model_dir, "chat_template.jinja"):
        source = model_files.read_text(model_dir, "chat_template.jinja", MAX_TEMPLATE_FILE_BYTES)
        origin = os.path.join(model_dir, "chat_template.jinja")
    if source is None:
        raise NoChatTemplate(
            f"{model_dir} has no chat template (tokenizer_config.json, chat_template.jinja): use `generate`"
        )
    bos, eos = config.bos_token or "", config.eos_token or ""
    end_ids = set(hf_checkpoint.eos_token_ids(model_dir))
    backend = getattr(tokenizer, "backend", None)
    if eos and backend is not None and backend.token_to_id(eos) is not None:
        end_ids.add(backend.token_to_id(eos))
    if not end_ids:
        raise ValueError(
            f"{model_dir}: no end-of-generation token (eos_token_id, eos_token), so an answer would never end"
        )
    return ChatSpec(ChatTemplate(source, bos_token=bos, eos_token=eos, origin=origin), frozenset(end_ids))


def encode_rendered(tokenizer, text: str) -> list[int]:
    """Tokens of template output: special tokens parsed, no BOS/EOS added (the template has its own)."""
    backend = getattr(tokenizer, "backend", None)
    if backend is not None:
        # The batch calls release the GIL while they run (encode holds it: 1.7 s without a pause
        # over a 2 MB SmolLM2 prompt, where encode_batch pauses at most 52 ms), so a server's event
        # loop goes on answering while a long prompt is tokenized; the ids are encode's. The fast
        # one (tokenizers >= 0.21) also keeps no offsets.
        batch = getattr(backend, "encode_batch_fast", None) or backend.encode_batch
        return batch([text], add_special_tokens=False)[0].ids
    return tokenizer.encode(text)


def prompt_ids(tokenizer, spec: ChatSpec, rendered: str) -> list[int]:
    """The tokens of a whole rendered conversation, as its first turn prefills them: the text's
    tokens, after the spec's BOS when the tokenizer adds one and the template did not render it."""
    ids = encode_rendered(tokenizer, rendered)
    if spec.bos_id is not None and ids[:1] != [spec.bos_id]:
        ids = [spec.bos_id] + ids
    return ids


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
        json_schema: dict | bool | None = None,
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
        # Every answer follows this JSON schema (gpt.structured_output), ending when its JSON is complete.
        self._grammar = None
        if json_schema is not None and json_schema is not False:
            self._grammar = json_schema_grammar(
                tokenizer, json_schema, vocab_size=model.config.vocab_size, end_ids=spec.end_ids
            )
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
        block_size = self._model.config.block_size
        try:
            rendered = self._spec.template.render(
                messages, add_generation_prompt=True, max_chars=max_prompt_chars(block_size)
            )
        except RenderTooLong as e:
            raise ConversationFull(
                f"{e}, {MAX_CHARS_PER_TOKEN} a token of the context of {block_size}: reset it"
            ) from None
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

    def _ensure_room(self) -> None:
        """The conversation's cache, made at its first turn (and after one that prefilled it all):
        a cache of the model's whole context, which uses memory for the positions written and runs
        the same compiled programs at every length (KVCache), so a conversation that grows never
        recompiles or refills it."""
        if self._cache is None:
            self._cache = self._model.new_cache()

    def _answer(self, rendered: str, new_ids: list[int], reprefilled: bool) -> Iterator[str]:
        model, end_ids = self._model, self._spec.end_ids
        temperature, top_k, top_p = self._sampling
        max_new = min(self._max_new_tokens, model.config.block_size - len(self._ids) - len(new_ids))
        self._ensure_room()
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
        constraint = self._grammar.start() if self._grammar is not None else None
        try:
            for step in range(max_new):
                if constraint is not None:
                    logits = constraint.mask(logits)
                token = sample(logits, temperature, top_k, top_p, self._rng)
                if token in end_ids:
                    end = token
                    break
                answer.append(token)
                complete = constraint is not None and constraint.advance(token)
                if piece := detokenizer.add(token):
                    yield piece
                if step + 1 == max_new or complete:
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
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    **options,
) -> int:
    """`python -m gpt chat`: each line of `stdin` is a user message; each answer is streamed to
    `stdout` and ends with a newline; a timing line per turn goes to `stderr`. Returns the number
    of turns. A prompt ("> ") is shown when stdin is a terminal. `options` are Chat's (system,
    max_new_tokens, sampling, json_schema: every answer is JSON that it accepts)."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    chat = Chat(model, tokenizer, spec, **options)
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
