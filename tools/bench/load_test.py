"""Load generator for `python -m gpt serve`: streamed completions from N concurrent clients.

For each concurrency level it reports time-to-first-token and inter-token latency (p50, p99), the
generated tokens per batched step (from /metrics) and the aggregate decode throughput, with its
ratio to one client; then it sends requests that share a long prompt prefix at once and reads from
/metrics how many prompt tokens the server computed.

    python tools/bench/load_test.py --model /path/to/gpt2 --threads 2            # starts a server
    python tools/bench/load_test.py --random_shape gpt2-small --threads 2       # random GPT-2 small weights
    python tools/bench/load_test.py --url http://127.0.0.1:8000                  # an existing server
    python tools/bench/load_test.py --paged_reference ...                        # numpy paged step (tests)
    python tools/bench/load_test.py --random_shape gpt2-small --threads 2 --peer llama.cpp   # and llama.cpp's
    python tools/bench/load_test.py --random_shape gpt2-small --threads 2 --rounds 3         # levels 3 times

With --rounds N every level runs N times, the levels in turn, and a second table gives each
level's ratio to one client round by round: the ratio compares throughputs measured within a
minute of each other, and the median over rounds is less at the mercy of one moment of the machine
(a memory-bound single stream and a compute-bound batch drift independently here).

With --peer llama.cpp the same load then goes to llama-cpp-python's OpenAI-compatible server
(`python -m llama_cpp.server`, requirements-peers.txt) on the same GGUF file and threads, and its
table follows gpt's. That server takes prompts as text only, so both get the same text prompts:
random whole-word tokens of the file's tokenizer (with --random_shape, a byte-level BPE of the
model's vocabulary size trained on synthetic words, written into the file), which encode back to
the same number of tokens. It counts one token
per streamed event and has no /metrics, so its "tokens per step" column is empty.

Prompts are random token ids in [32, 127) (valid for byte-level and GPT-2 vocabularies); decoding
is greedy (or seeded sampling with --temperature) with no stop, so every request generates
exactly --max_tokens tokens.
"""

import argparse
import asyncio
import contextlib
import functools
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import numpy as np
from machine import describe_cpu

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Model shapes for --random_shape (as tools/bench/bench_generate.py names them).
SHAPES = {
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024),
    "embedded": dict(n_layer=4, n_head=4, n_embd=128, vocab_size=256, block_size=256),
}


def synthetic_tokenizer(vocab_size: int):
    """A byte-level BPE tokenizer (GPT-2's kind) of exactly `vocab_size` tokens, "<|endoftext|>"
    first, trained on seeded random lowercase words: something a text-only server can tokenize
    prompts with when the weights are random."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    corpus = (" ".join("".join(rng.choice(letters, n)) for n in rng.integers(2, 9, 200)) for _ in range(3000))
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        min_frequency=1,
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    if tokenizer.get_vocab_size() != vocab_size:
        raise SystemExit(f"the synthetic tokenizer has {tokenizer.get_vocab_size()} tokens, not {vocab_size}")
    return tokenizer


def random_model_file(shape: str, directory: str, with_tokenizer: bool = False) -> str:
    """Random weights of `shape` written as a GGUF file that `gpt serve --model` (and, with a
    tokenizer, llama.cpp's server) loads."""
    import gpt
    from gpt.gguf_file import save_gguf
    from gpt.weights import random_weights

    config = gpt.GPTConfig(**SHAPES[shape])
    path = os.path.join(directory, f"{shape}.gguf")
    tokenizer = synthetic_tokenizer(config.vocab_size) if with_tokenizer else None
    save_gguf(random_weights(config, seed=0), config, path, tokenizer=tokenizer)
    return path


def text_prompt_maker(model_path: str):
    """For a text-only server: (rng, n) -> a text of exactly n tokens of the GGUF file's tokenizer,
    n words drawn from its whole-word tokens (" abc"), each of which encodes back to itself. Every
    prompt then has the same length in tokens, as token-id prompts do, so the programs a level
    needs do not depend on which prompts it draws."""
    from gpt.gguf_file import load_gguf

    config, _, tokenizer = load_gguf(model_path)
    if tokenizer is None:
        raise SystemExit(f"{model_path} has no tokenizer: a text-only peer server cannot take its prompts")
    words = []
    for token in range(config.vocab_size):
        text = tokenizer.decode([token])
        if len(text) > 2 and text[0] == " " and text[1:].isalpha() and text[1:].islower():
            words.append(token)

    def make(rng, n):
        text = tokenizer.decode([words[i] for i in rng.integers(0, len(words), n)])
        if len(tokenizer.encode(text)) != n:
            raise SystemExit(f"a prompt of {n} words did not encode to {n} tokens: {text!r}")
        return text

    return make


def metric_values(text: str) -> dict[str, float]:
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split()
            values[name] = float(value)
    return values


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpt_server_command(args, port):
    entry = [os.path.join(REPO, "tests", "python", "serve_reference.py")] if args.paged_reference else ["-m", "gpt"]
    command = [sys.executable, *entry, "serve", "--port", str(port), "--max_running", str(max(args.concurrency))]
    command += ["--max_batch_tokens", str(args.max_batch_tokens), "--num_kv_blocks", str(args.num_kv_blocks)]
    if args.model:
        command += ["--model", args.model]
    if args.threads:
        command += ["--threads", str(args.threads)]
    return command


def llama_cpp_server_command(args, port):
    """llama-cpp-python's server on the same file and threads (flash attention on, as gpt_bench's
    llama.cpp rows). It runs one request at a time: by default a new request interrupts the one
    streaming, so --interrupt_requests false makes the others wait their turn instead."""
    command = [sys.executable, "-m", "llama_cpp.server", "--model", args.model, "--port", str(port)]
    command += ["--n_ctx", "2048", "--flash_attn", "true", "--interrupt_requests", "false"]
    if args.threads:
        command += ["--n_threads", str(args.threads), "--n_threads_batch", str(args.threads)]
    return command


@contextlib.contextmanager
def started_server(command_for_port, ready_path="/health"):
    port = free_port()
    # Its log goes to a file: a pipe nobody reads fills up (llama.cpp logs every request) and
    # then blocks the server.
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(command_for_port(port), stdout=subprocess.DEVNULL, stderr=log, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if process.poll() is not None:
                log.seek(0)
                raise SystemExit(f"server exited: {log.read()[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + ready_path, timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("server did not come up in 600 s")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(60)
        log.close()


async def one_request(client, url, prompt, max_tokens, temperature=0.0):
    """(time to first token, [inter-token gaps], tokens) of one streamed completion."""
    body = dict(prompt=prompt, max_tokens=max_tokens, temperature=temperature, seed=len(prompt), stream=True)
    start = time.perf_counter()
    times = []
    async with client.stream("POST", url + "/v1/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {await response.aread()}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[6:])["choices"][0]
            now = time.perf_counter()
            # gpt's events list their token ids; a peer streams one token per event, then an
            # event that only says why it finished.
            if "token_ids" in choice:
                times += [now] * len(choice["token_ids"])
            elif choice["finish_reason"] is None:
                times.append(now)
    if not times:
        raise RuntimeError("no tokens came back")
    return times[0] - start, list(np.diff(times)), len(times), times


def decode_rate_together(token_times) -> float:
    """Tokens per second over the time during which the most streams were decoding at once.

    `token_times`: each stream's token arrival times. A stream decodes from its first token to
    its last; the tokens after its first that arrive while the number of decoding streams is at
    its peak count, over the length of those stretches. With N clients on a server that batches
    them, the peak is N: the steady state of N streams decoding together, without the ramps where
    some have not started or have finished. A server that runs one request at a time peaks at 1
    stream, and this is its single-stream rate however many clients wait."""
    edges = sorted([(t[0], 1) for t in token_times] + [(t[-1], -1) for t in token_times], key=lambda e: (e[0], e[1]))
    count, peak, stretches = 0, 0, []
    for (time_, step), (next_time, _) in zip(edges, [*edges[1:], (edges[-1][0], 0)], strict=True):
        count += step
        if count > peak:
            peak, stretches = count, []
        if count == peak and next_time > time_:
            stretches.append((time_, next_time))
    arrivals = np.sort(np.concatenate([np.asarray(t[1:]) for t in token_times]))
    tokens = sum(
        np.searchsorted(arrivals, end, "right") - np.searchsorted(arrivals, start, "right") for start, end in stretches
    )
    return tokens / sum(end - start for start, end in stretches)


async def server_metrics(client, url):
    """gpt's /metrics as numbers; empty for a server without them (a peer)."""
    response = await client.get(url + "/metrics")
    return metric_values(response.text) if response.status_code == 200 else {}


async def level(url, clients, requests_per_client, prompt_tokens, max_tokens, seed, temperature=0.0, as_text=None):
    rng = np.random.default_rng(seed)
    if as_text:
        prompts = [as_text(rng, prompt_tokens) for _ in range(clients * requests_per_client)]
    else:
        prompts = [[int(t) for t in rng.integers(32, 127, prompt_tokens)] for _ in range(clients * requests_per_client)]
    results = []

    async def client_loop(client, index):
        for r in range(requests_per_client):
            prompt = prompts[index * requests_per_client + r]
            results.append(await one_request(client, url, prompt, max_tokens, temperature))

    async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=clients + 4)) as client:
        before = await server_metrics(client, url)
        start = time.perf_counter()
        await asyncio.gather(*(client_loop(client, i) for i in range(clients)))
        wall = time.perf_counter() - start
        after = await server_metrics(client, url)
    per_step = None
    if after:
        steps = after["gpt_steps_total"] - before["gpt_steps_total"]
        per_step = (after["gpt_generated_tokens_total"] - before["gpt_generated_tokens_total"]) / steps
    ttft = np.array([r[0] for r in results]) * 1e3
    itl = np.array([gap for r in results for gap in r[1]]) * 1e3
    tokens = sum(r[2] for r in results)
    # Aggregate decode throughput: all streams decoding together (see decode_rate_together).
    decode = decode_rate_together([r[3] for r in results])
    return dict(
        clients=clients,
        requests=len(results),
        tokens=tokens,
        wall=wall,
        ttft=ttft,
        itl=itl,
        per_step=per_step,
        decode=decode,
    )


async def shared_prefix(url, requests, prefix_tokens, suffix_tokens, max_tokens, seed):
    rng = np.random.default_rng(seed)
    prefix = [int(t) for t in rng.integers(32, 127, prefix_tokens)]
    prompts = [prefix + [int(t) for t in rng.integers(32, 127, suffix_tokens)] for _ in range(requests)]
    async with httpx.AsyncClient(timeout=None) as client:
        before = metric_values((await client.get(url + "/metrics")).text)
        await asyncio.gather(*(one_request(client, url, p, max_tokens) for p in prompts))
        after = metric_values((await client.get(url + "/metrics")).text)
    return {name: after[name] - before.get(name, 0.0) for name in after}


def run_levels(url, args, as_text=None, rehearse=True, round_index=0):
    """Every concurrency level against the server at `url`, warmed up first (in the first round).
    With `rehearse` (gpt's server) the warm-up is a rehearsal of the timed load with other prompts
    of the same length (other prompts: the prefix cache must not serve the timed ones), so that
    every (tokens, sequences, table width) bucket a level reaches is compiled before anything is
    timed rather than stalling every stream mid-run. Without it (a server with nothing to
    compile), one request per client. Later rounds draw other prompts again."""
    if round_index == 0:
        for c in args.concurrency:
            requests = args.requests_per_client if rehearse else 1
            warm_up = level(url, c, requests, args.prompt_tokens, args.max_tokens, 1000 + c, args.temperature, as_text)
            asyncio.run(warm_up)
    seed = 2000 * round_index
    return [
        asyncio.run(
            level(
                url,
                c,
                args.requests_per_client,
                args.prompt_tokens,
                args.max_tokens,
                seed + c,
                args.temperature,
                as_text,
            )
        )
        for c in args.concurrency
    ]


def run_rounds(url, args, as_text=None, rehearse=True):
    """--rounds runs of every level, one after the other: [[row per level] per round]."""
    return [run_levels(url, args, as_text, rehearse, r) for r in range(args.rounds)]


def print_rounds(server, rounds):
    """Each level's decode throughput over one client's, round by round: the levels of a round run
    within a minute of each other, so each round's ratios share one state of the machine."""
    if len(rounds) < 2:
        return
    print(f"{server}, x one client (decode) in each of {len(rounds)} rounds:")
    print("| clients | " + " | ".join(f"round {r + 1}" for r in range(len(rounds))) + " | median |")
    print("|---:|" + "---:|" * (len(rounds) + 1))
    for i, row in enumerate(rounds[0]):
        ratios = [rows[i]["decode"] / rows[0]["decode"] for rows in rounds]
        cells = " | ".join(f"{x:.2f}" for x in ratios)
        print(f"| {row['clients']} | {cells} | {np.median(ratios):.2f} |")
    print(f"{server}, decode tok/s (all) in each round:")
    print("| clients | " + " | ".join(f"round {r + 1}" for r in range(len(rounds))) + " |")
    print("|---:|" + "---:|" * len(rounds))
    for i, row in enumerate(rounds[0]):
        print(f"| {row['clients']} | " + " | ".join(f"{rows[i]['decode']:.1f}" for rows in rounds) + " |")


def print_table(server, rows):
    single = rows[0]["tokens"] / rows[0]["wall"]
    single_decode = rows[0]["decode"]
    print(f"{server}:")
    print(
        "| clients | requests | tok/s (all) | x one client | decode tok/s (all) | x one client (decode) "
        "| TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | tokens per step |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        rate = r["tokens"] / r["wall"]
        per_step = "" if r["per_step"] is None else f"{r['per_step']:.1f}"
        print(
            f"| {r['clients']} | {r['requests']} | {rate:.1f} | {rate / single:.2f} | "
            f"{r['decode']:.1f} | {r['decode'] / single_decode:.2f} | "
            f"{np.percentile(r['ttft'], 50):.1f} | {np.percentile(r['ttft'], 99):.1f} | "
            f"{np.percentile(r['itl'], 50):.1f} | {np.percentile(r['itl'], 99):.1f} | {per_step} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="an already running server (else one is started)")
    parser.add_argument("--model", help="for the started server: HF GPT-2 directory or GGUF (default: embedded)")
    parser.add_argument("--random_shape", choices=sorted(SHAPES), help="serve random weights of this shape")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--paged_reference", action="store_true", help="start the server on the numpy paged step")
    parser.add_argument("--peer", choices=["llama.cpp"], help="then the same load on this peer's server")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--requests_per_client", type=int, default=2)
    parser.add_argument("--prompt_tokens", type=int, default=32)
    parser.add_argument("--max_tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy; else sampled (seeded)")
    parser.add_argument("--max_batch_tokens", type=int, default=512)
    parser.add_argument("--num_kv_blocks", type=int, default=512)
    parser.add_argument("--prefix_tokens", type=int, default=512)
    parser.add_argument("--prefix_requests", type=int, default=16)
    parser.add_argument("--suffix_tokens", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1, help="run every level this many times, in turn")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.peer and not (args.random_shape or (args.model and args.model.endswith(".gguf"))):
        parser.error("--peer needs --random_shape or a GGUF --model: both servers load the same file")

    print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    print("cpu: " + describe_cpu())
    with contextlib.ExitStack() as stack:
        if args.random_shape:
            directory = stack.enter_context(tempfile.TemporaryDirectory())
            args.model = random_model_file(args.random_shape, directory, with_tokenizer=bool(args.peer))
        as_text = text_prompt_maker(args.model) if args.peer else None
        with contextlib.ExitStack() as server:
            url = args.url or server.enter_context(started_server(functools.partial(gpt_server_command, args)))
            rounds = run_rounds(url, args, as_text)
            prefix = asyncio.run(
                shared_prefix(url, args.prefix_requests, args.prefix_tokens, args.suffix_tokens, 4, seed=7)
            )
        peer_rounds = None
        if args.peer:
            command = functools.partial(llama_cpp_server_command, args)
            with started_server(command, ready_path="/v1/models") as peer_url:
                peer_rounds = run_rounds(peer_url, args, as_text, rehearse=False)
    decoding = "greedy" if args.temperature == 0 else f"sampled at temperature {args.temperature}"
    prompts = "as text" if args.peer else "as token ids"
    print(
        f"prompt {args.prompt_tokens} tokens ({prompts}), {args.max_tokens} generated per request, {decoding}, streamed"
    )
    print_table("gpt (python -m gpt serve)", rounds[0])
    print_rounds("gpt", rounds)
    if peer_rounds:
        print_table("llama.cpp (python -m llama_cpp.server)", peer_rounds[0])
        print_rounds("llama.cpp", peer_rounds)
    unshared = args.prefix_requests * (args.prefix_tokens + args.suffix_tokens)
    once = args.prefix_tokens + args.prefix_requests * args.suffix_tokens
    print(
        f"shared prefix: {args.prefix_requests} requests of {args.prefix_tokens} shared + {args.suffix_tokens} own "
        f"prompt tokens: {prefix['gpt_prefill_tokens_total']:.0f} prompt tokens computed (prefix once: {once}, "
        f"no sharing: {unshared}), {prefix['gpt_prefix_hit_tokens_total']:.0f} served from the prefix cache"
    )


if __name__ == "__main__":
    main()
