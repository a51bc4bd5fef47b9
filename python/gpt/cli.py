"""The `gpt` command line (python -m gpt, or bazel run //tools:gpt --), with absl-py flags.

Commands:
  generate   generate text with the embedded byte-level model, a HF GPT-2 directory or a GGUF file (--model)
  ir         print a model's program after a compiler stage
  stages     print a transformer-dialect .mlir file after each compiler stage
  cache      list (--list) or empty (--clear) the on-disk compile cache
  serve      an OpenAI-compatible HTTP server (--host, --port) over the batching engine (gpt.engine)
  chat       talk with a model that has a chat template (--model FILE|DIR|smollm2): each stdin line is a
             user turn, each answer is streamed; the conversation stays in the KV cache
  export     compile --model for an NVIDIA GPU (--target cuda:sm_90) into the directory --out, which
             gpt_runtime runs with only the CUDA driver (docs/GPU.md)

An input error (a bad flag, path, model file or IR) prints one line, `gpt: error: <message>`, on
stderr and exits with status 2, as argparse-based tools (python -m gpt_runtime) do; --debug adds
the traceback.
"""

import datetime
import json
import os
import sys
import time
import traceback
from typing import Any

from absl import app, flags

from gpt import compiler, disk_cache, gguf_file, gpu_export, models, weight_cache
from gpt.config import PIPELINES, WEIGHT_FORMATS, CompileOptions, GPTConfig
from gpt.detokenizer import IncrementalDetokenizer
from gpt.model import GPT, GPU_STAGES, STAGES
from gpt.tokenizer import tokenizer_for

FLAGS = flags.FLAGS

EMBEDDED_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "byte-gpt")

flags.DEFINE_string(
    "model",
    None,
    "HF checkpoint directory (config.json + model.safetensors [+ tokenizer.json]), GGUF file (*.gguf) or the "
    "name of an installed model (smollm2: gpt.models); default: the embedded byte-level model",
)
flags.DEFINE_string("prompt", "Once upon a time", "text to continue")
flags.DEFINE_string("system", None, "chat: a system message (default: the chat template's own, if any)")
flags.DEFINE_integer("max_new_tokens", 64, "number of tokens to generate", lower_bound=0)
flags.DEFINE_float("temperature", 0.8, "0 = greedy", lower_bound=0.0)
flags.DEFINE_integer("top_k", 40, "sample among the k most likely tokens (0 = no limit)", lower_bound=0)
flags.DEFINE_float("top_p", None, "nucleus sampling probability mass", lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_integer("seed", None, "random seed (same seed, same text)")
flags.DEFINE_bool("cache", True, "use the KV cache (--nocache recomputes every step)")
flags.DEFINE_bool("stream", True, "print tokens as they are generated")
flags.DEFINE_string(
    "speculative",
    None,
    "generate, serve: speculative decoding, 'ngram' (prompt lookup: drafts what followed the text's last n-gram "
    "where it occurred before) or a draft model (a file, directory or installed name) with the same tokenizer",
)
flags.DEFINE_integer(
    "draft_tokens",
    None,
    "generate, serve --speculative: tokens drafted per verification at most (default 8, at most 64)",
    lower_bound=1,
)
# The issue and llama.cpp spell it with a dash; absl flags here use underscores, so both are accepted.
flags.DEFINE_alias("draft-tokens", "draft_tokens")
flags.DEFINE_integer(
    "speculative_max_batch",
    None,
    "serve --speculative: no drafts in a step where more than this many sequences decode (default: none)",
    lower_bound=1,
)
flags.DEFINE_alias("speculative-max-batch", "speculative_max_batch")
flags.DEFINE_string(
    "json_schema",
    None,
    "generate, chat: a JSON schema file (a JSON object) the output must follow, decoded under its grammar "
    "(gpt.structured_output; llama.cpp's --json-schema); true in the file: any JSON object",
)
flags.DEFINE_alias("json-schema", "json_schema")
flags.DEFINE_enum("pipeline", "default", PIPELINES, "compiler pipeline level")
flags.DEFINE_integer("threads", None, "threads (default: all cores)", lower_bound=1)
flags.DEFINE_integer(
    "ctx",
    None,
    "--model's context: the positions it serves, at most the file's (default: the file's, up to 4096; llama.cpp's -c)",
    lower_bound=1,
)
flags.DEFINE_enum(
    "weights",
    "auto",
    ("auto", *WEIGHT_FORMATS),
    "format of the matmul weights, as llama.cpp names them (all but f32: fewer bytes to stream); auto: each "
    "tensor of a GGUF file in the format nearest its own, as llama.cpp runs it (Q4_K: q4_k; "
    "Q5_K: q5_k; Q6_K: q6_k; Q5_0: q5_0; Q5_1: q5_1; F16: f32), f32 for anything else",
)
# f16 by default, as llama.cpp's commands store their cache: half the memory of f32, logits within
# 1.4e-4 of an f32 cache's over 320 greedy tokens (test_kv_cache_formats). The Python API does the
# same for a GGUF file and keeps f32 for other models (CompileOptions.kv_cache="auto"), the exact
# numerics its users compare against other implementations.
flags.DEFINE_enum(
    "kv_cache",
    "f16",
    ("f32", "f16", "bf16", "q8_0"),
    "the KV cache's format (llama.cpp's -ctk/-ctv): f16 (default) and bf16 half of f32's memory, rounding keys "
    "and values to it; q8_0 (head_dim a multiple of 32) 34/32 bytes a value, int8 codes with an fp16 scale per 32",
)
flags.DEFINE_enum(
    "stage", "linalg", STAGES + GPU_STAGES, "ir: the compiler stage to print (gpu, nvvm, ptx: --target's)"
)
flags.DEFINE_string("target", "cuda:sm_90", "export, and ir's GPU stages: the GPU (cuda:sm_80 .. cuda:sm_90)")
flags.DEFINE_string(
    "out", None, "export: the artifact directory to write (new, empty, or an artifact to replace; never a link)"
)
flags.DEFINE_enum(
    "gpu_weights",
    "f32",
    ["f32", "bf16", "none", "none:f32", "none:bf16"],
    "export: the matmul weights' dtype on the GPU; none[:f32|:bf16]: write no weights, the runtime reads them "
    "from the model file at load (python -m gpt_runtime ... --model FILE)",
)
flags.DEFINE_list(
    "tokens", ["1", "128"], "export: the token counts programs are built for (longer prompts run in chunks)"
)
flags.DEFINE_integer("cache_len", None, "export: positions per KV cache (default: block_size)", lower_bound=1)
flags.DEFINE_enum(
    "entry",
    "forward",
    ["forward", "step", "verify"],
    "ir: forward, the cached prefill/decode step, or the step that returns every token's logits (speculative)",
)
flags.DEFINE_integer("seq_len", None, "ir: number of tokens the program is compiled for", lower_bound=1)
flags.DEFINE_integer("n_layer", None, "ir without --model: a random model of this shape")
flags.DEFINE_integer("n_head", 4, "ir without --model")
flags.DEFINE_integer("n_embd", 64, "ir without --model")
flags.DEFINE_integer("vocab_size", 256, "ir without --model")
flags.DEFINE_integer("block_size", 128, "ir without --model")
flags.DEFINE_enum("pos_embedding", "learned", ["learned", "rope"], "ir without --model")
flags.DEFINE_integer("attention_window", None, "ir without --model: sliding-window attention", lower_bound=1)
flags.DEFINE_bool("list", False, "cache: list the entries, most recently used first")
flags.DEFINE_bool("clear", False, "cache: remove every entry")
flags.DEFINE_bool("debug", False, "on an error, print the Python traceback before the one-line message")
flags.DEFINE_string("cache_dir", None, "cache: the directory (default $GPT_CACHE_DIR, else ~/.cache/gpt/jit)")
flags.DEFINE_string("host", "127.0.0.1", "serve: the address to listen on")
flags.DEFINE_integer("port", 8000, "serve: the TCP port to listen on", lower_bound=0, upper_bound=65535)
flags.DEFINE_integer(
    "num_kv_blocks", None, "serve: blocks in the paged KV pool (default: 4 full sequences)", lower_bound=1
)
flags.DEFINE_integer("kv_block_size", 16, "serve: positions per KV block", lower_bound=1)
flags.DEFINE_integer("max_batch_tokens", 256, "serve: new tokens per batched step at most", lower_bound=1)
flags.DEFINE_integer("max_running", 32, "serve: sequences decoded together at most", lower_bound=1)
flags.DEFINE_integer("max_queue", 256, "serve: requests waiting for a slot at most (then 503)", lower_bound=1)
# The serve defaults are gpt.server.ServerLimits'; docs/SERVING.md says what each guards against.
flags.DEFINE_integer("max_body_bytes", 2 * 2**20, "serve: request bodies longer than this get 413", lower_bound=1)
flags.DEFINE_float(
    "timeout_headers", 10.0, "serve: seconds a connection has to send a request's head (then 408)", lower_bound=0.001
)
flags.DEFINE_float(
    "timeout_body", 30.0, "serve: seconds a request has to send its body after its head (then 408)", lower_bound=0.001
)
flags.DEFINE_float(
    "timeout_keep_alive", 5.0, "serve: seconds an idle keep-alive connection stays open", lower_bound=0.001
)
flags.DEFINE_integer(
    "max_connections",
    1024,
    "serve: open connections at most (past it the longest idle one is closed, or the new one gets 503)",
    lower_bound=1,
)
flags.DEFINE_integer(
    "admission_bytes",
    512 * 2**20,
    "serve: memory that requests being parsed and tokenized may take together (then they wait, or get 503)",
    lower_bound=1,
)


# The command main() runs ("generate", "export", ...).
_running = ""


def _options() -> CompileOptions:
    weights = FLAGS.weights
    # from_gguf resolves "auto" tensor by tensor (CompileOptions.weight_formats); a GPU export takes
    # the file's values in f32 (its --gpu_weights says the GPU's format).
    if weights == "auto" and (not _model_path().endswith(".gguf") or _running == "export"):
        weights = "f32"
    return CompileOptions(pipeline=FLAGS.pipeline, threads=FLAGS.threads, weights=weights, kv_cache=FLAGS.kv_cache)


def _flag_values(*names: str) -> dict[str, Any]:
    """The flags of these names, by name: the keyword arguments of a constructor whose parameters
    are flags of the same names."""
    return {name: getattr(FLAGS, name) for name in names}


def _model_path() -> str:
    """--model as a path: an installed model's name (gpt.models) becomes its file."""
    return models.resolve(FLAGS.model) if FLAGS.model else EMBEDDED_MODEL


def _load_model(path: str | None = None) -> GPT:
    path = path or _model_path()
    if path.endswith(".gguf"):
        return GPT.from_gguf(path, options=_options(), context=FLAGS.ctx)
    return GPT.from_pretrained(path, options=_options(), context=FLAGS.ctx)


def _check_text_model(path: str) -> None:
    """generate and chat take text: a GGUF file that carries no vocabulary (benchmark files) and is
    not a byte-level model of 256 tokens is refused before its weights load (seconds at 8B), with
    the error the tokenizer lookup would give after them."""
    if path.endswith(".gguf") and (vocab := gguf_file.vocabulary_without_tokenizer(path)) is not None:
        tokenizer_for(path, vocab)  # raises unless 256 tokens


def generate() -> None:
    _check_text_model(_model_path())
    model = _load_model()
    tokenizer = model.tokenizer
    if tokenizer is None:
        tokenizer = tokenizer_for(_model_path(), model.config.vocab_size)
    prompt = tokenizer.encode(FLAGS.prompt)
    if not prompt:
        raise app.UsageError("--prompt must not be empty")
    room = model.config.block_size - len(prompt)
    if room < 0:
        raise app.UsageError(
            f"--prompt is {len(prompt)} tokens, longer than the model's block_size={model.config.block_size}"
        )
    max_new = min(FLAGS.max_new_tokens, room)
    speculative = FLAGS.speculative
    if speculative is not None and speculative != "ngram":
        speculative = _load_model(models.resolve(speculative))  # a draft model
    tokens = model.generate(
        prompt,
        max_new_tokens=max_new,
        temperature=FLAGS.temperature,
        top_k=FLAGS.top_k or None,
        top_p=FLAGS.top_p,
        seed=FLAGS.seed,
        use_cache=FLAGS.cache,
        # A GGUF tokenizer knows its end-of-generation tokens (EOS, <|im_end|>, ...): stop there.
        stop=getattr(tokenizer, "end_of_generation", None),
        stream=True,
        speculative=speculative,
        draft_tokens=FLAGS.draft_tokens,
        json_schema=_json_schema(),
    )
    start = time.perf_counter()
    out = []
    sys.stdout.write(FLAGS.prompt)
    # Streamed, a multi-byte character may span several tokens: the detokenizer holds its bytes
    # back until the character is complete.
    text = IncrementalDetokenizer(tokenizer) if FLAGS.stream else None
    for token in tokens:
        out.append(token)
        if text is not None and (piece := text.add(token)):
            sys.stdout.write(piece)
            sys.stdout.flush()
    sys.stdout.write(text.flush() if text is not None else tokenizer.decode(out))
    total = time.perf_counter() - start
    stats = model.last_generation
    assert stats is not None  # the loop above ran generate()
    prompt_rate = stats.prompt_tokens / stats.prompt_seconds if stats.prompt_seconds else float("inf")
    decode_rate = (stats.generated_tokens - 1) / stats.generate_seconds if stats.generate_seconds else float("inf")
    print()
    print(
        f"[gpt] prompt: {stats.prompt_tokens} tokens, {prompt_rate:.1f} tok/s | generated: "
        f"{stats.generated_tokens} tokens, {decode_rate:.1f} tok/s | compile: {stats.compile_seconds:.2f} s | "
        f"total {total:.2f} s | pipeline {FLAGS.pipeline}, cache {'on' if FLAGS.cache else 'off'}"
        + (
            f" | speculative {FLAGS.speculative}: {speculation.accepted_tokens} of {speculation.drafted_tokens} "
            "drafted accepted"
            if (speculation := model.last_speculation) is not None
            else ""
        )
    )


def ir() -> None:
    if FLAGS.model or FLAGS.n_layer is None:
        model = _load_model()
    else:
        cfg = GPTConfig(
            **_flag_values(
                "n_layer", "n_head", "n_embd", "vocab_size", "block_size", "pos_embedding", "attention_window"
            )
        )
        model = GPT.random(cfg, options=_options())
    print(model.ir(FLAGS.stage, seq_len=FLAGS.seq_len, entry=FLAGS.entry, target=FLAGS.target))


def export() -> None:
    if not FLAGS.out:
        raise app.UsageError("export needs --out DIR")
    try:
        tokens = [int(t) for t in FLAGS.tokens]
    except ValueError as e:
        raise app.UsageError(f"--tokens must be integers, got {FLAGS.tokens}") from e
    gpu_export.check_target(FLAGS.out)  # a bad --out fails now, not after loading and compiling
    model = _load_model()
    start = time.perf_counter()
    path = model.export(FLAGS.out, FLAGS.target, tokens, FLAGS.gpu_weights, cache_len=FLAGS.cache_len)
    print(
        f"[gpt] wrote {path} for {FLAGS.target} ({FLAGS.gpu_weights} weights, programs for {tokens} tokens) "
        f"in {time.perf_counter() - start:.1f} s"
    )


def stages(path: str) -> None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise app.UsageError(f"cannot read {path}: {e.strerror}") from e
    for title, pipeline in (
        ("input (as parsed)", ""),
        ("canonicalize (DRR patterns, constant folding)", "canonicalize"),
        ("transformer-shape-inference", "transformer-shape-inference,canonicalize"),
        ("transformer-to-linalg", "transformer-to-linalg,canonicalize,cse"),
    ):
        text = compiler.run_pipeline(text, pipeline)
        print(f"// ===== {title} " + "=" * max(0, 70 - len(title)))
        print(text)


def cache() -> None:
    if FLAGS.list == FLAGS.clear:
        raise app.UsageError("cache takes one of --list or --clear")
    directory = os.path.expanduser(FLAGS.cache_dir) if FLAGS.cache_dir else disk_cache.default_directory()
    # A directory named on the command line must be one: listing a typo as "0 entries" would hide it.
    # The default directory may not exist yet (nothing was compiled), but it must not be a file.
    if (FLAGS.cache_dir or os.path.exists(directory)) and not os.path.isdir(directory):
        problem = "is not a directory" if os.path.exists(directory) else "does not exist"
        named = "--cache_dir" if FLAGS.cache_dir else "the cache directory ($GPT_CACHE_DIR, else ~/.cache/gpt/jit)"
        raise ValueError(f"{named} {directory} {problem}")
    weights = os.path.join(directory, weight_cache.DIRECTORY)
    if FLAGS.clear:
        print(f"removed {disk_cache.clear(directory)} files from {directory}")
        print(f"removed {weight_cache.clear(weights)} files from {weights}")
        return
    for listed, kind, where in (
        (disk_cache.entries(directory), "programs", directory),
        (weight_cache.entries(weights), "packed weights", weights),
    ):
        for entry in listed:
            used = datetime.datetime.fromtimestamp(entry.last_used).strftime("%Y-%m-%d %H:%M:%S")
            print(f"{entry.bytes / 2**20:9.2f} MiB  {used}  {os.path.basename(entry.path)}")
        total = sum(entry.bytes for entry in listed)
        print(f"{len(listed)} {kind}, {total / 2**20:.2f} MiB in {where}")
    # Entries of other builds are never loaded; they age out as the least recently used.
    print(f"this compiler: {disk_cache.compiler_identity() or 'unidentified (nothing is cached)'}")


def chat() -> None:
    from gpt import chat as chat_module

    _check_text_model(_model_path())
    model = _load_model()
    path = _model_path()
    directory = path if os.path.isdir(path) else None
    tokenizer = model.tokenizer or tokenizer_for(directory, model.config.vocab_size)
    spec = chat_module.chat_spec(tokenizer, directory, model_path=path)
    chat_module.run(
        model,
        tokenizer,
        spec,
        system=FLAGS.system,
        # An answer is longer than a continuation: 512 unless --max_new_tokens says otherwise.
        max_new_tokens=FLAGS.max_new_tokens if FLAGS["max_new_tokens"].present else 512,
        temperature=FLAGS.temperature,
        top_k=FLAGS.top_k or None,
        top_p=FLAGS.top_p,
        seed=FLAGS.seed,
        json_schema=_json_schema(),
    )


def _json_schema():
    """--json-schema's file read as JSON (None without the flag); structured_output checks the schema."""
    from gpt.structured_output import MAX_SCHEMA_CHARS

    if FLAGS.json_schema is None:
        return None
    with open(FLAGS.json_schema, "rb") as f:
        data = f.read(4 * MAX_SCHEMA_CHARS + 1)  # a bound on the bytes read; the schema's own comes later
    if len(data) > 4 * MAX_SCHEMA_CHARS:
        raise ValueError(f"--json-schema {FLAGS.json_schema} is longer than {4 * MAX_SCHEMA_CHARS} bytes")
    try:
        schema = json.loads(data)
    except ValueError as e:  # UnicodeDecodeError included
        raise ValueError(f"--json-schema {FLAGS.json_schema} is not JSON: {e}") from None
    if not isinstance(schema, dict) and schema is not True:
        raise ValueError(
            f"--json-schema {FLAGS.json_schema} must hold a JSON schema (a JSON object) or true, "
            f"got {type(schema).__name__}"
        )
    return schema


def serve() -> None:
    from gpt import server
    from gpt.engine import Engine

    if FLAGS.draft_tokens is not None and FLAGS.speculative is None:
        raise app.UsageError("serve --draft-tokens needs --speculative ngram|MODEL")
    if FLAGS.speculative_max_batch is not None and FLAGS.speculative is None:
        raise app.UsageError("serve --speculative-max-batch needs --speculative ngram|MODEL")
    speculative = FLAGS.speculative
    if speculative is not None and speculative != "ngram":
        speculative = models.resolve(speculative)  # a draft model
        if not os.path.exists(speculative):  # refused before the target loads, which takes a while
            raise app.UsageError(
                f"serve --speculative takes 'ngram' or a draft model, and {FLAGS.speculative!r} is no file, "
                "directory or installed model"
            )
    model = _load_model()
    if speculative is not None and speculative != "ngram":
        speculative = _load_model(speculative)
    tokenizer = model.tokenizer
    if tokenizer is None:
        directory = FLAGS.model if FLAGS.model and os.path.isdir(FLAGS.model) else None
        try:
            tokenizer = tokenizer_for(directory or (None if FLAGS.model else EMBEDDED_MODEL), model.config.vocab_size)
        except ValueError as e:  # still servable: prompts as token ids, completions without text
            print(f"[gpt] {e}: prompts must be token ids", flush=True)
    engine = Engine(
        model,
        num_blocks=FLAGS.num_kv_blocks,
        block_size=FLAGS.kv_block_size,
        max_batch_tokens=FLAGS.max_batch_tokens,
        max_running=FLAGS.max_running,
        max_queue=FLAGS.max_queue,
        tokenizer=tokenizer,
        # Engine refuses a draft model of another vocabulary (ValueError: one line, exit status 2).
        speculative=speculative,
        draft_tokens=FLAGS.draft_tokens,
        speculative_max_batch=FLAGS.speculative_max_batch,
    )
    name = os.path.basename(os.path.normpath(FLAGS.model or EMBEDDED_MODEL))
    print(f"[gpt] serving {name} on http://{FLAGS.host}:{FLAGS.port}", flush=True)
    limits = server.ServerLimits(
        **_flag_values(
            "max_body_bytes",
            "timeout_headers",
            "timeout_body",
            "timeout_keep_alive",
            "max_connections",
            "admission_bytes",
        )
    )
    path = _model_path()  # a HF directory's chat template is in its tokenizer_config.json
    model_dir = path if os.path.isdir(path) else None
    server.serve(engine, FLAGS.host, FLAGS.port, model_name=name, limits=limits, model_dir=model_dir)


COMMANDS = {
    "generate": (generate, 0),
    "ir": (ir, 0),
    "stages": (stages, 1),
    "cache": (cache, 0),
    "serve": (serve, 0),
    "chat": (chat, 0),
    "export": (export, 0),
}


# What a user's input can cause, reported as one line: bad flags and arguments (UsageError),
# values and model files (ValueError, ModelFileError among them), user paths (OSError: missing,
# unreadable, read-only, full; gpu_export.ExportError), a model too large (MemoryError from the
# memory estimate) and bad IR (CompilerError). Any other exception is a bug in gpt: it is left to
# propagate, and its traceback is what a bug report needs.
INPUT_ERRORS = (app.UsageError, ValueError, OSError, MemoryError, compiler.CompilerError)
EXIT_INPUT_ERROR = 2  # argparse's status for a usage error, which python -m gpt_runtime exits with


def error_line(error: BaseException) -> str:
    """`gpt: error: <message>` on one line. An OSError from the standard library ("[Errno 2] No such
    file or directory: 'x'") becomes "x: No such file or directory" (or loses only its "[Errno N]"
    when it names no file); gpt's own messages are kept."""
    if isinstance(error, OSError) and error.strerror and isinstance(error.filename, str):
        message = f"{error.filename}: {error.strerror}"
    elif isinstance(error, OSError) and error.strerror and error.errno is not None:
        message = error.strerror  # a socket's "[Errno 98] ..." without the number
    else:
        message = str(error) or type(error).__name__
    if isinstance(error, MemoryError) and not str(error):
        message = "out of memory"
    # A compiler diagnostic spans lines ("failed to parse the input IR:\n  loc(...): error: ..."):
    # a line ending in ":" runs on into the next, others are separated by "; ".
    line = ""
    for part in (part.strip() for part in message.splitlines()):
        if part:
            line += ("" if not line else " " if line.endswith(":") else "; ") + part
    return "gpt: error: " + line


def _report(error: BaseException, debug: bool) -> None:
    if debug:
        traceback.print_exception(error)
    print(error_line(error), file=sys.stderr, flush=True)


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with its errors ("FATAL Flags parsing error: ...", exit 1) reported as
    the commands' errors are: one line, exit 2. FLAGS.debug is not parsed yet here: --debug is
    looked for in argv."""
    try:
        return FLAGS(argv)
    except flags.Error as e:
        _report(e, debug="--debug" in argv)
        sys.exit(EXIT_INPUT_ERROR)


def main(argv):
    try:
        if len(argv) < 2 or argv[1] not in COMMANDS:
            raise app.UsageError(
                "expected a command: " + ", ".join(COMMANDS) + " (python -m gpt --help shows them and their flags)"
            )
        command, arity = COMMANDS[argv[1]]
        global _running
        _running = argv[1]
        if len(argv) - 2 != arity:
            raise app.UsageError(f"{argv[1]} takes {arity} positional argument(s), got {argv[2:]}")
        command(*argv[2:])
    except INPUT_ERRORS as e:
        _report(e, FLAGS.debug)
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:  # Ctrl-C is the user stopping the command, not an error to explain
        print(file=sys.stderr)
        return 130
    return 0


def run():
    app.run(main, flags_parser=_parse_flags)
