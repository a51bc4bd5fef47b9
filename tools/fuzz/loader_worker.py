"""The loader fuzzer's worker (tools/fuzz/fuzz_loaders.py --worker): a process that loads input after
input under an address-space limit, answering each with its outcome and the new line pairs of
the loaders that ran; and Worker, the campaign's handle on it (time limits, restarts)."""

import json
import os
import re
import select
import subprocess
import sys
import time

SAMPLE_TEXT = "Hello, world! héllo wörld ✓ 日本 \x00\t\n<|endoftext|> 1234"
# The conversation every chat template renders (transformers' apply_chat_template's variables).
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello <|im_end|> ünï 日本"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "2 + 2?"},
]
# A rendered prompt's characters, at most, in the fuzzer (a server allows its body limit).
TEMPLATE_MAX_CHARS = 1 << 16

# Source files whose executed line pairs are the coverage signal.
TRACED = ("gpt/gguf_file.py", "gpt/weights.py", "gpt/config.py", "gpt/resources.py", "gpt/tokenizer.py")
TRACED += ("gpt/gguf_llama.py", "gpt/gguf_tokenizer.py", "gpt/hf_checkpoint.py", "gpt/model_files.py", "gpt/chat.py")
TRACED += ("gpt/template_sandbox.py", "gpt_runtime/manifest.py", "gpt_runtime/weights.py", "gpt_runtime/schema.py")
TRACED += ("gpt_runtime/artifact_files.py", "gpt_runtime/model.py", "gpt/gguf/container.py", "gpt/kept_formats.py")
TRACED += ("gpt/gguf/layout.py",)
# The driver library the worker's gpt_runtime opens: none, so that loading an artifact stops at
# NoDeviceError once every check before the driver has passed (and never touches a real GPU).
NO_DRIVER = "/nonexistent/libcuda-for-fuzzing.so.1"
TRACED_GGUF = ("gguf/gguf_reader.py", "gguf/quants.py")


class AcceptedBadWeights(Exception):
    """A file loaded whose weights are not finite: the model would compute NaN."""


class RoundTripMismatch(Exception):
    """A byte-level tokenizer decoded its encoding of a text to another text."""


def render(tokenizer, block_size: int, **where) -> None:
    """A chat's first turn: the template rendered within the prompt bound, then tokenized."""
    from gpt import chat

    spec = chat.chat_spec(tokenizer, **where)
    text = spec.template.render(MESSAGES, max_chars=chat.max_prompt_chars(block_size, TEMPLATE_MAX_CHARS))
    chat.prompt_ids(tokenizer, spec, text)


def load_gguf_input(path: str, keep: str | None) -> None:
    """As GPT.from_gguf up to the model (binding and repacking the weights compiles nothing), with
    an oracle: kept blocks dequantize (by gguf, not the loader) to finite values; then the
    tokenizer on a sample text and a chat turn."""
    import gguf
    import numpy as np

    import gpt
    from gpt import architecture_weights
    from gpt.gguf_file import QuantizedTensor, load_gguf
    from gpt.model import GPT
    from gpt.weights import validate_weights

    config, weights, tokenizer = load_gguf(path, keep_quantized=keep)
    quantized = {n: (w.format, w.blocks) for n, w in weights.items() if isinstance(w, QuantizedTensor)}
    floats = {n: w for n, w in weights.items() if n not in quantized}
    if config.spec.compiler_names != "gpt2":  # as GPT.from_gguf: HF names -> the compiler's
        quantized = architecture_weights.to_compiler_quantized(config, quantized)
        floats = architecture_weights.to_compiler(config, floats, consume=True)
    validate_weights(config, floats, copy=False, given_quantized=quantized)
    options = gpt.CompileOptions(disk_cache=False, threads=1, weights=keep or "f32")
    # The repack checks the kept blocks' scales (a refusal is a ValueError); a model built from
    # blocks that dequantize to NaN or infinity accepted bad weights.
    GPT(config, floats, options, _copy_weights=False, _quantized=quantized)
    for name, (fmt, blocks) in quantized.items():
        stored, _, types = fmt.partition(":")  # "FORMAT:TYPE,...": each part's block type
        parts = list(blocks) if isinstance(blocks, (list, tuple)) else [blocks]
        for part, type_name in zip(parts, types.split(",") if types else [stored] * len(parts), strict=True):
            with np.errstate(all="ignore"):
                values = gguf.quants.dequantize(part, gguf.GGMLQuantizationType[type_name.upper()])
            if not np.isfinite(values).all():
                raise AcceptedBadWeights(f"{name}: its kept {type_name} blocks dequantize to NaN or infinity")
    if tokenizer is not None:
        ids = tokenizer.encode(SAMPLE_TEXT)
        tokenizer.decode([*ids, 0, config.vocab_size - 1])
        if getattr(tokenizer, "chat_template", None) is not None:
            render(tokenizer, config.block_size, model_path=path)


def load_hf_input(path: str) -> None:
    """As GPT.from_pretrained (a Llama-family directory goes to gpt.hf_checkpoint), the model
    built, its tokenizer on a sample text and a chat turn."""
    import gpt
    from gpt import hf_checkpoint
    from gpt.model import GPT
    from gpt.tokenizer import tokenizer_for
    from gpt.weights import load_pretrained, validate_weights

    if hf_checkpoint.architecture_of(hf_checkpoint.model_type(path)) is not None:
        config, tensors = hf_checkpoint.load_pretrained(path)
    else:
        config, tensors = load_pretrained(path)
    options = gpt.CompileOptions(disk_cache=False, threads=1)
    GPT(config, validate_weights(config, tensors, copy=False), options, _copy_weights=False)
    tokenizer = tokenizer_for(path, config.vocab_size)
    tokenizer.decode(tokenizer.encode(SAMPLE_TEXT))
    render(tokenizer, config.block_size, model_dir=path)


def run_model_input(path: str, keep: str | None, cache_dir: str) -> None:
    """GPT.from_gguf with CompileOptions(weights="auto") (or the format `keep` names): the C++
    repacking and transcoding of the file's blocks; then one prefill and one decode step, which
    read every repacked weight. The compiled code is cached on disk: most inputs change bytes, not
    shapes, so that only the first of a shape compiles."""
    import gpt

    options = gpt.CompileOptions(weights=keep or "auto", threads=1, cache_dir=cache_dir)
    model = gpt.GPT.from_gguf(path, options)
    cache = model.new_cache(8)
    model.prefill([1, 2], cache)
    model.decode(model.config.vocab_size - 1, cache)


def run_tokenizer_input(directory: str) -> None:
    """text.txt encoded and decoded by vocab.gguf's tokenizer (gpt.gguf_file.load_gguf) or
    tokenizer.json's (gpt.tokenizer.HFTokenizer). Where the vocabulary is byte-level (GPT-2's
    alphabet whole, a ByteLevel decoder, no normalizer), the decoding must be the text, less the
    special tokens in it (matched leftmost-longest, as `tokenizers` matches added tokens)."""
    from gpt.gguf_file import load_gguf
    from gpt.tokenizer import HFTokenizer

    with open(os.path.join(directory, "text.txt"), "rb") as f:
        text = f.read().decode("utf-8", "replace")
    if os.path.exists(os.path.join(directory, "vocab.gguf")):
        tokenizer = load_gguf(os.path.join(directory, "vocab.gguf"))[2]
        if tokenizer is None:
            return
    else:
        tokenizer = HFTokenizer(os.path.join(directory, "tokenizer.json"))
    decoded = tokenizer.decode(tokenizer.encode(text))
    expected = byte_level_expectation(tokenizer.backend, text)
    if expected is not None and decoded != expected:
        at = next((i for i, (a, b) in enumerate(zip(decoded, expected, strict=False)) if a != b), None)
        at = min(len(decoded), len(expected)) if at is None else at
        raise RoundTripMismatch(
            f"decode(encode(text)) differs from the text at character {at}: "
            f"{expected[max(at - 20, 0) : at + 20]!r} became {decoded[max(at - 20, 0) : at + 20]!r}"
        )


def byte_level_expectation(backend, text: str) -> str | None:
    """What a byte-level tokenizer must decode its encoding of `text` to, or None when it is not
    byte-level (or strips text around its added tokens)."""
    from tokenizers import decoders, pre_tokenizers

    if backend.normalizer is not None or not isinstance(backend.decoder, decoders.ByteLevel):
        return None
    vocab = backend.get_vocab(with_added_tokens=False)
    if not all(character in vocab for character in pre_tokenizers.ByteLevel.alphabet()):
        return None
    description = json.loads(backend.to_str())
    if '"add_prefix_space": true' in json.dumps(description.get("pre_tokenizer") or {}):
        return None
    added = [token for token in backend.get_added_tokens_decoder().values() if token.content]
    if any(token.lstrip or token.rstrip or token.single_word for token in added):
        return None
    # A token BPE can produce (a byte, a merge's result) that the vocabulary also calls
    # user-defined decodes to its own text, not to its bytes, as llama.cpp's token_to_piece does.
    merges = (description.get("model") or {}).get("merges") or []
    reachable = set(pre_tokenizers.ByteLevel.alphabet())
    reachable |= {"".join(merge.split(" ") if isinstance(merge, str) else merge) for merge in merges}
    if any(not token.special and not token.content.isascii() and token.content in reachable for token in added):
        return None
    special = {token.content for token in added if token.special}
    contents = sorted({token.content for token in added}, key=len, reverse=True)
    if not contents:
        return text
    pattern = re.compile("|".join(re.escape(content) for content in contents))
    return pattern.sub(lambda match: "" if match.group(0) in special else match.group(0), text)


def load(request: dict, cache_dir: str) -> None:
    """Runs one request of its kind; raises what the loaders raise."""
    kind, path = request["kind"], request["path"]
    if kind == "gguf":
        load_gguf_input(path, request["keep"])
    elif kind == "hf":
        load_hf_input(path)
    elif kind == "template":
        from gpt import chat

        with open(path, "rb") as f:
            source = f.read().decode("utf-8", "replace")  # a file's text, as the loaders decode it
        template = chat.ChatTemplate(source, bos_token="<s>", eos_token="</s>", origin=path)
        template.render(MESSAGES, max_chars=TEMPLATE_MAX_CHARS)
    elif kind == "model":
        run_model_input(path, request["keep"], cache_dir)
    elif kind == "tokenizer":
        run_tokenizer_input(path)
    else:
        import gpt_runtime

        try:
            gpt_runtime.load(path)
        except gpt_runtime.NoDeviceError:
            pass  # every check before the driver passed: the artifact "loads"


def outcome_of(error: BaseException | None) -> dict:
    if error is None:
        return {"outcome": "loaded"}
    if isinstance(error, (ValueError, FileNotFoundError)):  # ModelFileError, ChatTemplateError, ArtifactError...
        return {"outcome": "refused", "type": type(error).__name__, "message": str(error)}
    if isinstance(error, MemoryError) and "this process can use" in str(error):  # gpt.resources' refusal
        return {"outcome": "refused", "type": "MemoryError", "message": str(error)}
    if isinstance(error, MemoryError):
        return finding(error, "memory")
    if isinstance(error, (AcceptedBadWeights, RoundTripMismatch)):
        return finding(error, "accepted" if isinstance(error, AcceptedBadWeights) else "round trip")
    return finding(error, "exception")


def worker_main(memory_headroom: int, cache_dir: str) -> None:
    """Loads inputs named on stdin (one JSON request a line), answers one JSON line each: the
    outcome and the line pairs of the traced files that ran for the first time in this worker.
    `memory_headroom`: MiB of address space allowed above what the imports mapped."""
    import resource

    import gguf  # noqa: F401 -- imported before the address-space limit, as every loader's module
    import numpy  # noqa: F401
    import tokenizers  # noqa: F401

    import gpt  # noqa: F401
    import gpt_runtime  # noqa: F401
    from gpt import architecture_weights, architectures, chat, gguf_file, hf_checkpoint, model, tokenizer, weights  # noqa: F401

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # What a finding may take: the address space now (the extension, LLVM, numpy) plus the headroom.
    with open("/proc/self/status", encoding="ascii") as f:
        mapped = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (mapped + (memory_headroom << 20), resource.RLIM_INFINITY))

    seen, current = set(), set()
    traced = {}  # co_filename -> short name, for the traced files only (None: not traced)
    previous = [0]

    def local_trace(frame, event, arg):
        if event == "line":
            current.add((traced[frame.f_code.co_filename], previous[0], frame.f_lineno))
            previous[0] = frame.f_lineno
        return local_trace

    def global_trace(frame, event, arg):
        filename = frame.f_code.co_filename
        if filename not in traced:
            suffix = next((name for name in TRACED + TRACED_GGUF if filename.endswith(os.sep + name)), None)
            traced[filename] = suffix
        if traced[filename] is None:
            return None
        previous[0] = -frame.f_code.co_firstlineno  # a function's entry is an edge of its own
        return local_trace

    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        current.clear()
        started = time.perf_counter()
        error = None
        sys.settrace(global_trace)
        try:
            load(request, cache_dir)
        except BaseException as e:  # noqa: B036 -- a Rust panic (PanicException) is a BaseException
            error = e
        finally:
            sys.settrace(None)
        outcome = outcome_of(error)
        outcome["seconds"] = time.perf_counter() - started
        new = current - seen
        seen |= new
        outcome["edges"] = [list(edge) for edge in new]
        sys.stdout.write(json.dumps(outcome) + "\n")
        sys.stdout.flush()


def finding(error: BaseException, kind: str) -> dict:
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"
    return {
        "outcome": "finding",
        "kind": kind,
        "type": type(error).__name__,
        "message": str(error)[:2000],
        "where": where,
        "traceback": "".join(traceback.format_exception(error))[-4000:],
    }


class Worker:
    """A worker process that loads input after input; restarted after each finding. `program`:
    the fuzzer's script, run with --worker."""

    def __init__(self, program: str, memory_headroom: int, cache_dir: str):
        self.program = program
        self.memory_headroom = memory_headroom  # MiB
        self.cache_dir = cache_dir
        self.process = None
        self.buffer = b""

    def start(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", RUST_BACKTRACE="0", GPT_RUNTIME_LIBCUDA=NO_DRIVER)
        command = [sys.executable, self.program, "--worker", "--memory-headroom", str(self.memory_headroom)]
        command += ["--cache-dir", self.cache_dir]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        self.buffer = b""
        ready = self.read_line(120)
        if ready is None or not ready.get("ready"):
            self.stop()
            raise RuntimeError("the loader worker did not start (run it with --worker to see why)")

    def read_line(self, timeout: float) -> dict | None:
        """The worker's next answer, or None when it gives none in `timeout` seconds or dies."""
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def stop(self) -> int | None:
        """Ends the worker; its exit status (negative: the signal that ended it)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.kill()
        status = self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()
        self.process = None
        return status

    def run(self, kind: str, path: str, keep: str | None, timeout: float) -> dict:
        if self.process is None:
            self.start()
        try:
            self.process.stdin.write((json.dumps({"kind": kind, "path": path, "keep": keep}) + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # it died: read_line says so
        result = self.read_line(timeout)
        if result is None:
            hung = self.process.poll() is None
            status = self.stop()
            if hung:
                return {"outcome": "finding", "kind": "hang", "type": "timeout", "message": f"no answer in {timeout} s"}
            return {
                "outcome": "finding",
                "kind": "crash",
                "type": f"exit status {status}",
                "message": "the worker died",
            }
        if result["outcome"] == "finding":
            self.stop()  # its state may be spoiled (a Rust panic, a half-built model)
        return result
