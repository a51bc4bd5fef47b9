"""JSON-schema-constrained decoding: a schema compiled once per (tokenizer, schema) into a grammar
(llguidance), and per generation a constraint that masks the logits before each token is sampled.

`json_schema_grammar(tokenizer, schema, vocab_size=..., end_ids=...)` checks and compiles a JSON
schema (a dict), or `True` for any JSON object, into a `Grammar` (kept in a bounded cache per
tokenizer). `grammar.start()` gives a `JsonConstraint` for one generation: `mask(logits)` is the
logits with every token the grammar does not allow at this point set to -inf, `advance(token)`
feeds the chosen token and says whether the JSON is complete (the grammar accepts it and allows
nothing more but the end of generation), which ends generation there.

The grammar library sees the model's tokenizer as llguidance's LLTokenizer, built from the HF
`tokenizers` JSON (gpt.gguf_tokenizer makes one from a GGUF vocabulary too) or, for the byte-level
vocabulary, from its 256 bytes. Its end of generation is `end_ids` (the model's EOS and end of
turn, the tokens generation stops at): the mask allows them once the JSON is complete. A model
with none gets a token of its own past the vocabulary, which is never sampled: generation then
ends when the JSON is complete.

Whitespace between JSON tokens is llama.cpp's (json-schema-to-grammar's `space`): none, a space,
or one or two newlines and up to 20 spaces or tabs of indentation. Unbounded whitespace would let
a weak model pad the answer until max_tokens, so that the text never closes."""

import collections
import json
import threading
import weakref

import numpy as np

# The largest schema compiled, as JSON text: compiling takes time in proportion to it (about
# 0.6 s for 32 KiB of object properties), and it runs once per (tokenizer, schema) in the
# server's admission thread. OpenAI's own limits (5,000 properties, 10 levels) are of this order.
MAX_SCHEMA_CHARS = 32 * 1024
# Nesting of objects and arrays in the schema itself, at most.
MAX_SCHEMA_DEPTH = 32
# Compiled grammars kept per tokenizer, the least recently used dropped first.
GRAMMAR_CACHE_SIZE = 64
# llama.cpp's `space` rule (common/json-schema-to-grammar.cpp), see the module docstring.
WHITESPACE_PATTERN = r"(?:| |\n{1,2}[ \t]{0,20})"
# The text of the end-of-generation token added to a vocabulary that has none.
_OWN_END_TOKEN = "<|gpt-structured-output-end|>"


class StructuredOutputError(RuntimeError):
    """The grammar cannot go on with the text so far: a parser limit (llguidance's step fuel or
    items) reached, which ends that generation with an error."""


class Grammar:
    """A compiled JSON schema for one tokenizer view (vocabulary size and end ids). Immutable and
    shared between generations: `start()` gives each its own JsonConstraint."""

    def __init__(self, matcher, vocab_size: int, mask_size: int, end_ids: frozenset[int], schema_text: str):
        self._matcher = matcher  # never advanced: each start() copies it
        self.vocab_size = vocab_size
        self._mask_size = mask_size
        self.end_ids = end_ids
        self.schema_text = schema_text

    def start(self) -> "JsonConstraint":
        return JsonConstraint(self._matcher.deep_copy(), self.vocab_size, self._mask_size, self.end_ids)


class JsonConstraint:
    """The grammar's state in one generation: the tokens fed so far decide which may come next."""

    def __init__(self, matcher, vocab_size: int, mask_size: int, end_ids: frozenset[int]):
        import llguidance.numpy

        self._fill = llguidance.numpy.fill_next_token_bitmask
        self._matcher = matcher
        self._vocab_size = vocab_size
        self.end_ids = end_ids
        self._bitmask = llguidance.numpy.allocate_token_bitmask(1, mask_size)
        self.tokens = 0  # tokens fed so far (rollback counts back from here)

    @property
    def error(self) -> str:
        """Why the grammar cannot go on ("" while it can): a parser limit reached on this text."""
        return self._matcher.get_error()

    def allowed(self) -> np.ndarray:
        """Which of the model's tokens may come next: a bool per token id (vocab_size of them)."""
        self._fill(self._matcher, self._bitmask)
        bits = np.unpackbits(self._bitmask.view(np.uint8), count=self._vocab_size, bitorder="little")
        return bits.view(bool)

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """A copy of `logits` (the model's vocab_size of them) with the tokens the grammar does not
        allow next at -inf. StructuredOutputError when the grammar cannot go on (`error`)."""
        allowed = self.allowed()
        if self._matcher.is_error() or not allowed.any():
            raise StructuredOutputError(f"the JSON grammar cannot go on: {self.error or 'no token is allowed'}")
        return np.where(allowed, logits, np.float32(-np.inf))

    def advance(self, token: int) -> bool:
        """Feeds the chosen token; True when the JSON is complete (nothing but the end may follow).
        A token the grammar refuses (one that the mask did not allow) raises ValueError."""
        if not self._matcher.consume_token(int(token)):
            raise ValueError(f"token {int(token)} does not continue the JSON: {self._matcher.get_error()}")
        self.tokens += 1
        return self._matcher.is_stopped()

    def rollback(self, count: int = 1) -> None:
        """Forgets the last `count` tokens fed (a step the engine rolls back)."""
        if count:
            self._matcher.rollback(count)
            self.tokens -= count


def check_schema(schema, name: str = "json_schema") -> str:
    """The schema as compact JSON text (`True`: any JSON object), or ValueError naming what is
    wrong (the schema called `name` in messages): not a JSON object, not JSON at all, too large or
    too deeply nested."""
    if schema is True:
        schema = {"type": "object"}
    if not isinstance(schema, dict):
        raise ValueError(
            f"{name} must be a JSON schema (a JSON object, a dict) or True for any JSON object, "
            f"got {type(schema).__name__}"
        )
    depth = _depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        raise ValueError(f"{name} is nested deeper than MAX_SCHEMA_DEPTH={MAX_SCHEMA_DEPTH} levels")
    try:
        text = json.dumps(schema, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} is not JSON: {e}") from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise ValueError(f"{name} is {len(text)} characters of JSON, more than MAX_SCHEMA_CHARS={MAX_SCHEMA_CHARS}")
    return text


def _depth(value) -> int:
    """The nesting depth of dicts and lists in `value`, counted without recursion (a schema from a
    stranger may be nested past Python's recursion limit), stopping once past MAX_SCHEMA_DEPTH."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, (dict, list)):
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_SCHEMA_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


class _TokenizerView:
    """llguidance's view of one tokenizer, vocabulary size and end ids, and its compiled grammars."""

    def __init__(self, lltokenizer, vocab_size: int, end_ids: frozenset[int]):
        self.lltokenizer = lltokenizer
        self.vocab_size = vocab_size
        self.end_ids = end_ids
        self.grammars: collections.OrderedDict[str, Grammar] = collections.OrderedDict()


_views: "weakref.WeakKeyDictionary[object, dict[tuple, _TokenizerView]]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def json_schema_grammar(tokenizer, schema, *, vocab_size: int, end_ids=(), name: str = "json_schema") -> Grammar:
    """The Grammar of `schema` (a JSON schema dict, or True for any JSON object) for a model of
    `vocab_size` tokens with `tokenizer` (gpt.tokenizer's HFTokenizer or ByteTokenizer) whose
    generation ends at `end_ids`. Compiled once per (tokenizer, vocab_size, end_ids, schema): the
    last GRAMMAR_CACHE_SIZE are kept. ValueError names what is wrong with a schema that is not a
    JSON object, is too large, or that the grammar library refuses (an unsupported keyword, a
    $ref that points nowhere, a regex it cannot compile), calling the schema `name`, and a
    tokenizer it cannot read."""
    text = check_schema(schema, name)
    view = _view(tokenizer, vocab_size, frozenset(int(t) for t in end_ids))
    with _lock:
        grammar = view.grammars.get(text)
        if grammar is not None:
            view.grammars.move_to_end(text)
            return grammar
    grammar = _compile(view, text, name)  # outside the lock: llguidance releases the GIL meanwhile
    with _lock:
        view.grammars[text] = grammar
        while len(view.grammars) > GRAMMAR_CACHE_SIZE:
            view.grammars.popitem(last=False)
    return grammar


def _compile(view: _TokenizerView, text: str, name: str) -> Grammar:
    import llguidance

    options = {"whitespace_pattern": WHITESPACE_PATTERN}
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(text, overrides=options)
    except ValueError as e:
        raise ValueError(f"{name} is refused by the grammar library (llguidance): {e}") from None
    matcher = llguidance.LLMatcher(view.lltokenizer, grammar, log_level=0)
    if matcher.is_error():
        raise ValueError(f"{name} is refused by the grammar library (llguidance): {_first_line(matcher)}")
    return Grammar(matcher, view.vocab_size, view.lltokenizer.vocab_size, view.end_ids, text)


def _first_line(matcher) -> str:
    """llguidance's error without the grammar dump its verbose messages append."""
    message = matcher.get_error().strip()
    return message.splitlines()[0] if message else "unknown error"


def _view(tokenizer, vocab_size: int, end_ids: frozenset[int]) -> _TokenizerView:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"vocab_size must be an int >= 1, got {vocab_size!r}")
    key = (vocab_size, end_ids)
    with _lock:
        try:
            views = _views.setdefault(tokenizer, {})
        except TypeError:  # not weakly referenceable: no cache
            views = {}
        view = views.get(key)
    if view is None:
        view = _TokenizerView(_lltokenizer(tokenizer, vocab_size, end_ids), vocab_size, end_ids)
        with _lock:
            view = views.setdefault(key, view)
    return view


def _lltokenizer(tokenizer, vocab_size: int, end_ids: frozenset[int]):
    """llguidance's LLTokenizer for `tokenizer`, at least `vocab_size` tokens wide, ending at the
    end ids that are in its vocabulary (or at a token of its own added past it: module docstring)."""
    import llguidance
    from llguidance._tokenizer import TokenizerWrapper

    backend = getattr(tokenizer, "backend", None)
    try:
        if backend is None:  # gpt.tokenizer.ByteTokenizer: token i is byte i
            if getattr(tokenizer, "vocab_size", None) != 256:
                raise ValueError(f"a tokenizer without a `tokenizers` backend must be bytes, got {tokenizer!r}")
            ends = sorted(t for t in end_ids if t < 256)
            wrapper = TokenizerWrapper(_ByteTokens(ends[0] if ends else 256))
            return llguidance.LLTokenizer(wrapper, n_vocab=max(vocab_size, 257), eos_token=ends or [256])
        from tokenizers import AddedToken, Tokenizer

        size = backend.get_vocab_size(with_added_tokens=True)
        ends = sorted(t for t in end_ids if t < size)
        source = backend
        if not ends:
            source = Tokenizer.from_str(backend.to_str())
            source.add_special_tokens([AddedToken(_OWN_END_TOKEN, special=True, normalized=False)])
            ends = [source.token_to_id(_OWN_END_TOKEN)]
            size = source.get_vocab_size(with_added_tokens=True)
        source = Tokenizer.from_str(source.to_str())  # a copy: padding and truncation off
        source.no_padding()
        source.no_truncation()
        return llguidance.LLTokenizer(source.to_str(), n_vocab=max(vocab_size, size), eos_token=ends)
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    # llguidance raises ValueError for a tokenizer it cannot read, and a Rust panic as a BaseException.
    except BaseException as e:  # noqa: B036
        raise ValueError(f"the model's tokenizer cannot be used by the grammar library (llguidance): {e}") from None


class _ByteTokens:
    """The byte-level vocabulary as llguidance's TokenizerWrapper reads it: 256 bytes and an end."""

    def __init__(self, eos: int):
        self.eos_token_id = eos
        self.bos_token_id = None
        self.tokens = [bytes([i]) for i in range(256)] + [b""]
        self.special_token_ids = [256]

    def __call__(self, text) -> list[int]:
        return list(text if isinstance(text, bytes) else text.encode("utf-8"))
