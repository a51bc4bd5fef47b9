"""The correctness half of tools/bench/compare_llamacpp.py, run in its main process: token ids of varied
texts (tokenizer_rows), logits teacher-forced over llama.cpp's greedy continuations against
llama.cpp's and PyTorch's (compare_logits, pytorch_reference), and greedy decoding's common prefix
(print_greedy_table); correctness() prints their tables."""

import os

import numpy as np

TEXTS = {
    "english": "The quick brown fox jumps over the lazy dog. It wasn't me, she said; they'd've known!",
    "code": 'def fib(n):\n    """The n-th Fibonacci number."""\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n',
    "digits": "Pi is 3.14159265358979, 2024-11-27, 1,234,567.89 USD, 0xDEADBEEF and 12345678901234567890.",
    "whitespace": "  leading spaces\n\n\ttabs\t\tand   runs   \r\n trailing  ",
    "unicode": "Café naïve façade — “quotes” 日本語のテキスト 한국어 Ελληνικά 🙂🚀 ü∑∂",
    "chat markup": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "specials mid-text": "before<|endoftext|>after <|im_start|> spaced <|im_end|>x",
}

PARAGRAPH = (
    "The history of computing is a story of abstraction. Early programmers wrote machine code by hand, "
    "flipping switches and punching cards, until assemblers gave names to instructions. Compilers then "
    "translated whole languages into those instructions, and each new layer let people think about the "
    "problem instead of the machine. Today a compiler for neural networks takes a graph of tensor "
    "operations and turns it into loops that fit the caches and vector units of one particular processor. "
    "Whether that beats a library of hand-written kernels is a question only measurements can answer."
)

CHAT = [{"role": "user", "content": "Explain in three sentences why the sky is blue."}]

# More chat prompts whose greedy continuations are teacher-forced (with CHAT's and the paragraph's).
MORE_CHATS = (
    "Write a Python function that returns the largest of three numbers.",
    "Give me three tips for a job interview.",
)


def log_softmax(logits):
    x = np.asarray(logits, np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def compare_logits(reference, ours):
    """(top-1 agreement, mean KL(reference || ours), max KL) over the positions (rows) of two
    [positions, vocab] logit arrays."""
    log_p, log_q = log_softmax(reference), log_softmax(ours)
    kl = (np.exp(log_p) * (log_p - log_q)).sum(-1)
    agree = float((reference.argmax(-1) == ours.argmax(-1)).mean())
    return agree, float(kl.mean()), float(kl.max())


class Sequence:
    """A teacher-forced token sequence and the rows of its logits that are compared: those that
    predict a continuation's tokens (prompt + continuation), or every row (a text on its own)."""

    def __init__(self, name, prompt, continuation=()):
        self.ids = list(prompt) + list(continuation)
        self.rows = slice(len(prompt) - 1, len(self.ids) - 1) if continuation else slice(None)
        self.name = name


class LlamaCpp:
    """llama.cpp's tokenizer, logits of every position, and greedy decoding, on one context."""

    def __init__(self, path, threads, n_ctx=512):
        import llama_cpp

        self.llm = llama_cpp.Llama(
            model_path=path,
            n_ctx=n_ctx,
            n_batch=512,
            n_threads=threads,
            n_threads_batch=threads,
            flash_attn=True,  # as the speed rows (bench_runners.LlamaCppRunner) run it
            logits_all=True,
            verbose=False,
        )

    def tokenize(self, text, add_bos, special):
        return self.llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)

    def detokenize(self, ids):
        return self.llm.detokenize(ids).decode("utf-8", errors="replace")

    def logits(self, ids):
        self.llm.reset()
        self.llm.eval(ids)
        return np.array(self.llm.scores[: len(ids)], np.float32)

    def greedy(self, ids, count):
        """`count` tokens, each the argmax of the logits after the previous one (no sampler)."""
        self.llm.reset()
        self.llm.eval(ids)
        out = []
        for _ in range(count):
            token = int(np.argmax(self.llm.scores[self.llm.n_tokens - 1]))
            out.append(token)
            self.llm.eval([token])
        return out


def tokenizer_rows(tokenizer, llama):
    """Table rows, one per text, and whether every comparison agreed."""
    from tokenizers import Tokenizer

    # gpt parses special tokens in text always (llama.cpp's special=True); for llama.cpp's
    # special=False, a copy of its tokenizers.Tokenizer with encode_special_tokens set.
    plain = Tokenizer.from_str(tokenizer.backend.to_str())
    plain.encode_special_tokens = True
    rows, all_equal = [], True
    for name, text in TEXTS.items():
        ids = tokenizer.encode(text)
        checks = [
            ids == llama.tokenize(text, add_bos=True, special=True),
            tokenizer.encode(text, add_special_tokens=False) == llama.tokenize(text, add_bos=False, special=True),
            plain.encode(text, add_special_tokens=False).ids == llama.tokenize(text, add_bos=False, special=False),
            tokenizer.decode(ids) == llama.detokenize(ids),
        ]
        all_equal = all_equal and all(checks)
        marks = " | ".join("equal" if c else "**differ**" for c in checks)
        rows.append(f"| {name} | {len(ids)} | {marks} |")
    return rows, all_equal


def pytorch_reference(path, threads):
    """A function of ids giving the logits of every position from transformers' LlamaForCausalLM
    in float32, its weights the GGUF file's tensors as transformers' own loader dequantizes them;
    None when torch or transformers is not installed."""
    os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF loader's progress bar
    try:
        import torch
        import transformers
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    except ImportError:
        return None
    torch.set_num_threads(threads)
    transformers.utils.logging.set_verbosity_error()
    hf_config = transformers.LlamaConfig(**load_gguf_checkpoint(path, return_tensors=False)["config"])
    with torch.device("meta"):
        skeleton = transformers.LlamaForCausalLM(hf_config)
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=skeleton)["tensors"]
    model = transformers.LlamaForCausalLM(hf_config).eval()
    missing, _ = model.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()}, strict=False)
    if set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"transformers' GGUF loader left out {sorted(missing)}")
    model.tie_weights()

    def logits(ids):
        with torch.no_grad():
            return model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()

    return logits


def print_logits_table_header(args):
    print(f"\n### Logits teacher-forced over llama.cpp's greedy continuations ({args.teacher_tokens} tokens each)\n")
    print(
        "gpt's `forward` and llama.cpp's `logits_all` against llama.cpp's logits, and against PyTorch "
        "(transformers' LlamaForCausalLM in float32 on the file's tensors dequantized by transformers' "
        "own GGUF loader: the model as the file defines it, with no activation quantization). The "
        "positions compared are those that predict a continuation's tokens; **all continuations** "
        "pools them; the paragraph's own tokens are human-written text, every position compared.\n"
    )
    print(
        "| engine | weights | sequence | positions | top-1 = llama.cpp's | mean KL(llama.cpp ‖ engine) | max KL "
        "| top-1 = PyTorch's | mean KL(PyTorch ‖ engine) | max KL |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")


def correctness(args):
    import gpt
    from gpt import chat

    llama = LlamaCpp(args.path, args.threads)
    models = (
        (fmt, gpt.GPT.from_gguf(args.path, gpt.CompileOptions(threads=args.threads, weights=fmt)))
        for fmt in args.formats.split(",")
    )  # one at a time
    fmt, model = next(models)
    tokenizer = model.tokenizer
    if tokenizer is None:  # weights alone (tools/dev/make_gguf.py's Llama shapes): no texts to compare
        raise SystemExit(
            f"{args.path}: gpt finds no tokenizer in the file, and the correctness tables need one; "
            "--no-correctness runs the speed table alone"
        )
    print(f"### Token ids ({len(TEXTS)} texts; gpt against llama.cpp)\n")
    print(
        "| text | tokens | ids, BOS/EOS as the file says (special=True) | ids, none added | "
        "ids, markup as plain text (special=False) | decode |"
    )
    print("|---|---|---|---|---|---|")
    print("\n".join(tokenizer_rows(tokenizer, llama)[0]))

    spec = chat.chat_spec(tokenizer)

    def chat_prompt(question, llama=llama):
        rendered = spec.template.render([{"role": "user", "content": question}])
        ids = chat.prompt_ids(tokenizer, spec, rendered)
        if ids != llama.tokenize(rendered, add_bos=True, special=True):
            raise SystemExit(f"the chat prompt's ids differ between gpt and llama.cpp: {question!r}")
        return ids

    end_of_generation = frozenset(getattr(tokenizer, "end_of_generation", ()))

    def until_end(tokens):
        """The tokens up to and including the first end of generation: what follows it is no answer."""
        ends = [i for i, token in enumerate(tokens) if token in end_of_generation]
        return tokens[: ends[0] + 1] if ends else tokens

    prompt = chat_prompt(CHAT[0]["content"])
    continuation = llama.greedy(prompt, max(args.teacher_tokens, args.greedy_tokens))
    expected = continuation[: args.greedy_tokens]
    paragraph = tokenizer.encode(PARAGRAPH)
    continued = [Sequence(f"chat: {CHAT[0]['content']!r}", prompt, until_end(continuation[: args.teacher_tokens]))]
    for question in MORE_CHATS:
        ids = chat_prompt(question)
        continued.append(Sequence(f"chat: {question!r}", ids, until_end(llama.greedy(ids, args.teacher_tokens))))
    continued.append(
        Sequence("the paragraph, continued", paragraph, until_end(llama.greedy(paragraph, args.teacher_tokens)))
    )
    sequences = [Sequence(f"the paragraph's own {len(paragraph)} tokens", paragraph), *continued]
    references = {seq.name: llama.logits(seq.ids) for seq in sequences}
    del llama
    pytorch = pytorch_reference(args.path, args.threads)
    exact, greedy_rows = None, []
    if pytorch is not None:
        exact = {seq.name: pytorch(seq.ids) for seq in sequences}
        ids = list(prompt)
        for _ in range(args.greedy_tokens):  # uncached: a forward over the whole sequence per token
            ids.append(int(pytorch(ids)[-1].argmax()))
        greedy_rows.append(("PyTorch", "f32 (dequantized file)", ids[len(prompt) :]))
        del pytorch

    print_logits_table_header(args)

    def rows_of(logits_by_name, chosen):
        return np.concatenate([logits_by_name[seq.name][seq.rows] for seq in chosen])

    def row(engine, fmt, logits_by_name):
        pooled = ("**all continuations**", continued)
        for name, chosen in [(seq.name, [seq]) for seq in sequences] + [pooled]:
            cells = []
            for reference in (references, exact):
                if reference is None or reference is references and engine == "llama.cpp":
                    cells.append("— | — | —")
                else:
                    agree, kl, kl_max = compare_logits(rows_of(reference, chosen), rows_of(logits_by_name, chosen))
                    cells.append(f"{agree:.1%} | {kl:.2e} | {kl_max:.2e}")
            positions = len(rows_of(references, chosen))
            print(f"| {engine} | {fmt} | {name} | {positions} | {' | '.join(cells)} |", flush=True)

    row("llama.cpp", "as shipped", references)
    while model is not None:
        row("gpt", fmt, {seq.name: model.forward(seq.ids) for seq in sequences})
        greedy_rows.append(("gpt", fmt, model.generate(prompt, args.greedy_tokens, temperature=0.0, stop_at_eos=False)))
        del model
        fmt, model = next(models, (None, None))

    print_greedy_table(args, tokenizer, prompt, expected, greedy_rows)


def print_greedy_table(args, tokenizer, prompt, expected, greedy_rows):
    """Each engine's greedy tokens (`greedy_rows`: engine, weights, tokens) against llama.cpp's `expected`."""
    print(f"\n### Greedy decoding: {args.greedy_tokens} tokens from a chat prompt of {len(prompt)} tokens\n")
    print(
        f"Prompt {CHAT[0]['content']!r} in the file's chat template; EOS does not stop either engine. "
        f"llama.cpp: {tokenizer.decode(expected)!r}\n"
    )
    print("| engine | weights | tokens equal to llama.cpp's (common prefix) | its text from the first difference |")
    print("|---|---|---|---|")
    for engine, fmt, ours in greedy_rows:
        common = next((i for i, (a, b) in enumerate(zip(ours, expected, strict=False)) if a != b), len(expected))
        diverged = "" if common == len(expected) else repr(tokenizer.decode(ours[common:]))
        print(f"| {engine} | {fmt} | {common}/{len(expected)} | {diverged} |")
    print()
