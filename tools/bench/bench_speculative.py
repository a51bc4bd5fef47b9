"""Speculative decoding benchmark: greedy tokens/s of plain decoding vs prompt lookup, same output.

    bazel build //python:gpt && PYTHONPATH=bazel-bin/python python3 tools/bench/bench_speculative.py \
        --models embedded,smollm2 --new-tokens 128 --draft-tokens 4,8

For each model and task (input-grounded: repeating a paragraph with one word changed, editing a
function, answering with quotes from a passage; and free text), generates up to --new-tokens
tokens greedily (ending at the model's end of turn) with and without `speculative="ngram"`,
checks that the tokens are identical, and reports decode tokens/s (new tokens after the first
over generate()'s wall time less its prefill: drafting and accepting count, compilation does
not; a warm-up run compiles every program first), the speedup, and how many drafted tokens were
accepted. A model with a chat template (SmolLM2-135M-Instruct) gets the tasks as a user turn.
Rates are medians over --repeats runs, the variants taking turns within each.

--breakdown adds, for each speculative variant, one more run timed step by step: the decode
steps, the verification steps by their row count (against a decode step's time: what a drafted
row costs), drafting, and the rest (the loop's Python), and each verification's drafted:accepted
tokens in order (where drafts stop matching).
"""

import argparse
import os
import statistics
import sys
import time

from machine import describe_cpu

import gpt
from gpt import chat, models, speculative
from gpt.gguf_file import native_weights_format
from gpt.tokenizer import tokenizer_for

EMBEDDED_MODEL = os.path.join(os.path.dirname(os.path.abspath(gpt.__file__)), "data", "byte-gpt")

PARAGRAPH = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk. He trimmed the wick, "
    "polished the great lens and wrote the weather in a leather book. Ships passed far out at sea, "
    "and none of their sailors ever knew his name, but each of them saw his light."
)
FUNCTION = '''def moving_average(values, window):
    """The mean of each run of `window` consecutive values."""
    if window <= 0:
        raise ValueError("window must be positive")
    totals = []
    running = 0.0
    for index, value in enumerate(values):
        running += value
        if index >= window:
            running -= values[index - window]
        if index >= window - 1:
            totals.append(running / window)
    return totals
'''
PASSAGE = (
    "The committee met on Tuesday. It decided that the bridge would close for repairs from the first "
    "of March until the end of May, and that a ferry would run every twenty minutes in the meantime. "
    "Residents may park for free at the north terminal while the bridge is closed."
)
TASKS = {
    "repeat": (
        "Repeat this paragraph word for word, but write 'lamp' instead of 'light':\n\n" + PARAGRAPH,
        PARAGRAPH[:40],
    ),
    "edit": ("Rename the variable `running` to `window_sum` in this function:\n\n" + FUNCTION, "def moving_average("),
    "quote": (
        PASSAGE + "\n\nQuote the sentences of the passage that say when the bridge closes and what replaces it.",
        '"It decided',
    ),
    "free": ("Write a short story about a fox who learns to sail.", "Once upon a time"),
}


def load(name: str, threads: int | None):
    path = EMBEDDED_MODEL if name == "embedded" else models.resolve(name)
    if path.endswith(".gguf"):
        options = gpt.CompileOptions(weights=native_weights_format(path), threads=threads)
        return gpt.GPT.from_gguf(path, options), path
    return gpt.GPT.from_pretrained(path, gpt.CompileOptions(threads=threads)), path


def prompt_ids(model, path: str, instruction: str, answer_start: str) -> list[int]:
    """The task as a user turn with the answer begun (a chat model), or as plain text."""
    tokenizer = model.tokenizer or tokenizer_for(path, model.config.vocab_size)
    try:
        spec = chat.chat_spec(tokenizer, path if os.path.isdir(path) else None, model_path=path)
    except chat.NoChatTemplate:
        return tokenizer.encode(instruction + "\n\n" + answer_start)
    rendered = spec.template.render([{"role": "user", "content": instruction}]) + answer_start
    return chat.prompt_ids(tokenizer, spec, rendered)


def decode_rates(model, prompt, new_tokens, repeats, variants):
    """{variant: (median decode tokens/s, tokens, the last run's speculation stats)} for each
    variant's generate() kwargs, after a warm-up run of each (which compiles what it needs). The
    variants take turns within each repeat, so that a load that comes and goes on a shared machine
    falls on all of them alike."""
    tokens = {name: model.generate(prompt, new_tokens, **kwargs) for name, kwargs in variants.items()}
    rates = {name: [] for name in variants}
    speculation = {}
    for _ in range(repeats):
        for name, kwargs in variants.items():
            start = time.perf_counter()
            again = model.generate(prompt, new_tokens, **kwargs)
            wall = time.perf_counter() - start
            assert again == tokens[name], "greedy generation is not deterministic"
            # Wall time, so that drafting and the accept loop count; less the prefill (and any compile).
            stats = model.last_generation
            rates[name].append((stats.generated_tokens - 1) / (wall - stats.prompt_seconds - stats.compile_seconds))
            speculation[name] = model.last_speculation
    return {name: (statistics.median(rates[name]), tokens[name], speculation[name]) for name in variants}


def step_breakdown(model, prompt, new_tokens, kwargs):
    """One generate() run with every decode, verification and draft timed: a row of the
    breakdown table (see the module's docstring)."""
    decodes, verifies, checked, drafting = [], {}, [], [0.0]

    def timing(fn, record):
        def timed(*args):
            start = time.perf_counter()
            result = fn(*args)
            record(args, time.perf_counter() - start)
            return result

        return timed

    def on_verify(args, seconds):
        ids, cache = args
        verifies.setdefault(len(ids), []).append(seconds)
        checked.append((len(cache) - len(ids), [int(t) for t in ids]))  # after the step: its offset

    model.decode = timing(type(model).decode.__get__(model), lambda args, seconds: decodes.append(seconds))
    model._verify = timing(type(model)._verify.__get__(model), on_verify)
    propose = speculative.NgramDrafter.propose
    speculative.NgramDrafter.propose = timing(
        propose, lambda args, seconds: drafting.__setitem__(0, drafting[0] + seconds)
    )
    try:
        start = time.perf_counter()
        text = list(prompt) + model.generate(prompt, new_tokens, **kwargs)
        wall = time.perf_counter() - start
    finally:
        del model.decode, model._verify
        speculative.NgramDrafter.propose = propose
    stats = model.last_generation
    decode_ms = statistics.median(decodes) * 1e3 if decodes else float("nan")
    rows = ", ".join(
        f"{count}: {len(times)} x {statistics.median(times) * 1e3:.1f} ms "
        f"({statistics.median(times) * 1e3 / decode_ms:.2f})"
        for count, times in sorted(verifies.items())
    )
    drafts = []
    for offset, ids in checked:
        accepted = 0
        while (
            accepted + 1 < len(ids)
            and offset + accepted + 1 < len(text)
            and ids[accepted + 1] == text[offset + accepted + 1]
        ):
            accepted += 1
        drafts.append(f"{len(ids) - 1}:{accepted}")
    stepped = sum(decodes) + sum(sum(times) for times in verifies.values()) + drafting[0]
    rest = wall - stats.prompt_seconds - stats.compile_seconds - stepped
    return (
        f"{len(decodes)} x {decode_ms:.1f} ms | {rows} | {drafting[0] * 1e3:.1f} ms | {rest * 1e3:.1f} ms "
        f"| {' '.join(drafts)} |"
    )


def llama_cpp_rates(path, prompt, new_tokens, repeats, draft_tokens, threads, stop):
    """llama.cpp's greedy decode tokens/s on the same GGUF file and prompt (llama-cpp-python, as
    tools/bench/compare_llamacpp.py builds it): plain, and with its prompt lookup
    (llama_cpp.llama_speculative.LlamaPromptLookupDecoding, drafting `draft_tokens`, the n-gram
    drafter its Python binding exposes; that Llama computes every position's logits, as its
    verification needs). Up to `new_tokens` tokens, ending at a `stop` id; the rate counts the
    tokens after the first over the time after the first (which holds the prefill), as
    decode_rates does. Returns {variant: (median tokens/s, tokens)}."""
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    threads = threads or os.cpu_count()
    engines = {"plain": None, "prompt lookup": LlamaPromptLookupDecoding(num_pred_tokens=draft_tokens)}
    results = {}
    for name, draft in engines.items():
        llm = llama_cpp.Llama(
            model_path=path,
            n_ctx=len(prompt) + new_tokens + 2 * draft_tokens + 8,
            n_threads=threads,
            n_threads_batch=threads,
            draft_model=draft,
            verbose=False,
        )
        rates, tokens = [], []
        for _ in range(repeats + 1):  # the first run warms up
            tokens, first = [], None
            for token in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
                if first is None:
                    first = time.perf_counter()
                tokens.append(int(token))
                if int(token) in stop or len(tokens) == new_tokens:
                    break
            rates.append((len(tokens) - 1) / (time.perf_counter() - first))
        results[name] = (statistics.median(rates[1:]), [t for t in tokens if t not in stop])
        llm.close()
    return results


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="embedded,smollm2", help="embedded, smollm2, or paths")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument(
        "--draft-tokens",
        default=str(speculative.DEFAULT_DRAFT_TOKENS),
        help=f"comma-separated draft lengths (default: generate()'s, {speculative.DEFAULT_DRAFT_TOKENS})",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="default: all cores")
    parser.add_argument(
        "--llama-cpp",
        action="store_true",
        help="GGUF models: llama.cpp's rows beside, plain and with its prompt lookup (llama-cpp-python)",
    )
    parser.add_argument("--draft", default=None, help="a draft model (name or path) beside prompt lookup")
    parser.add_argument(
        "--breakdown", action="store_true", help="time each step of one more run of each variant (a second table)"
    )
    args = parser.parse_args(argv)
    print("command: PYTHONPATH=bazel-bin/python python3 tools/bench/bench_speculative.py " + " ".join(argv))
    print("cpu: " + describe_cpu())
    print()
    print(
        "| model | task | prompt tokens | draft tokens | plain tok/s | speculative tok/s | speedup "
        "| accepted / drafted | verify steps | same tokens |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    draft = load(args.draft, args.threads)[0] if args.draft else None
    peer_rows, breakdown_rows = [], []
    for name in args.models.split(","):
        model, path = load(name, args.threads)
        for task in args.tasks.split(","):
            prompt = prompt_ids(model, path, *TASKS[task])
            new_tokens = min(args.new_tokens, model.config.block_size - len(prompt))
            if new_tokens < 16:
                print(f"| {name} | {task} | {len(prompt)} | (the prompt leaves under 16 of block_size's positions) |")
                continue
            variants = {"plain": {}}
            for draft_tokens in (int(k) for k in args.draft_tokens.split(",")):
                variants[draft_tokens] = dict(speculative="ngram", draft_tokens=draft_tokens)
                if draft is not None:
                    variants[f"{draft_tokens}, draft {args.draft}"] = dict(speculative=draft, draft_tokens=draft_tokens)
            results = decode_rates(model, prompt, new_tokens, args.repeats, variants)
            if args.breakdown:
                breakdown_rows += [
                    f"| {name} | {task} | {variant} | " + step_breakdown(model, prompt, new_tokens, kwargs)
                    for variant, kwargs in variants.items()
                    if kwargs.get("speculative") == "ngram"
                ]
            plain_rate, plain, _ = results.pop("plain")
            for draft_tokens, (rate, tokens, spec) in results.items():
                print(
                    f"| {name} | {task} | {len(prompt)} | {draft_tokens} | {plain_rate:.1f} | {rate:.1f} "
                    f"| {rate / plain_rate:.2f}x | {spec.accepted_tokens} / {spec.drafted_tokens} "
                    f"| {spec.verify_steps} | {'yes' if tokens == plain else 'NO'} |",
                    flush=True,
                )
            if args.llama_cpp and path.endswith(".gguf"):
                k = int(args.draft_tokens.split(",")[0])
                stop = set(model.end_of_generation)
                peers = llama_cpp_rates(path, prompt, new_tokens, args.repeats, k, args.threads, stop)
                (base, base_tokens), (rate, tokens) = peers["plain"], peers["prompt lookup"]
                peer_rows.append(
                    f"| {name} | {task} | {k} | {base:.1f} | {rate:.1f} | {rate / base:.2f}x "
                    f"| {'yes' if tokens == base_tokens else 'NO'} | {'yes' if base_tokens == plain else 'NO'} |"
                )
    if breakdown_rows:
        print(
            "\nOne more run of each, step by step (verification: rows: steps x median time (in decode steps); "
            "rest: the loop's Python; drafts: drafted:accepted per verification, filler rows included):\n"
        )
        print("| model | task | draft tokens | decode steps | verifications | drafting | rest | drafts |")
        print("|---|---|---:|---|---|---:|---:|---|")
        print("\n".join(breakdown_rows))
    if peer_rows:
        print(
            "\nllama.cpp (llama-cpp-python; prompt lookup by LlamaPromptLookupDecoding) on the same files "
            "and prompts:\n"
        )
        print(
            "| model | task | draft tokens | plain tok/s | prompt lookup tok/s | speedup | same tokens "
            "| = gpt's plain |"
        )
        print("|---|---|---:|---:|---:|---:|---|---|")
        print("\n".join(peer_rows))


if __name__ == "__main__":
    main(sys.argv[1:])
