"""Load generator for `python -m gpt serve`: streamed completions from N concurrent clients.

For each concurrency level it reports time-to-first-token and inter-token latency (p50, p99), the
generated tokens per batched step (from /metrics) and the aggregate decode throughput, with its
ratio to one client; then it sends requests that share a long prompt prefix at once and reads from
/metrics how many prompt tokens the server computed.

    python tools/load_test.py --model /path/to/gpt2 --threads 2            # starts a server
    python tools/load_test.py --random_shape gpt2-small --threads 2       # random GPT-2 small weights
    python tools/load_test.py --url http://127.0.0.1:8000                  # an existing server
    python tools/load_test.py --paged_reference ...                        # numpy paged step (tests)

Prompts are random token ids in [32, 127) (valid for byte-level and GPT-2 vocabularies); decoding
is greedy (or seeded sampling with --temperature) with no stop, so every request generates
exactly --max_tokens tokens.
"""

import argparse
import asyncio
import contextlib
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Model shapes for --random_shape (as tools/bench_generate.py names them).
SHAPES = {
    "gpt2-small": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024),
    "embedded": dict(n_layer=4, n_head=4, n_embd=128, vocab_size=256, block_size=256),
}


def random_model_file(shape: str, directory: str) -> str:
    """Random weights of `shape` written as a GGUF file that `gpt serve --model` loads."""
    import gpt
    from gpt.gguf_file import save_gguf
    from gpt.weights import random_weights

    config = gpt.GPTConfig(**SHAPES[shape])
    path = os.path.join(directory, f"{shape}.gguf")
    save_gguf(random_weights(config, seed=0), config, path)
    return path


def metric_values(text: str) -> dict[str, float]:
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split()
            values[name] = float(value)
    return values


@contextlib.contextmanager
def started_server(args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    entry = [os.path.join(REPO, "tests", "python", "serve_reference.py")] if args.paged_reference else ["-m", "gpt"]
    command = [sys.executable, *entry, "serve", "--port", str(port), "--max_running", str(max(args.concurrency))]
    command += ["--max_batch_tokens", str(args.max_batch_tokens), "--num_kv_blocks", str(args.num_kv_blocks)]
    if args.model:
        command += ["--model", args.model]
    if args.threads:
        command += ["--threads", str(args.threads)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if process.poll() is not None:
                raise SystemExit(f"server exited: {process.stderr.read()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("server did not come up in 600 s")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(60)


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
            event = json.loads(line[6:])
            now = time.perf_counter()
            times += [now] * len(event["choices"][0]["token_ids"])
    if not times:
        raise RuntimeError("no tokens came back")
    return times[0] - start, list(np.diff(times)), len(times)


async def level(url, clients, requests_per_client, prompt_tokens, max_tokens, seed, temperature=0.0):
    rng = np.random.default_rng(seed)
    prompts = [[int(t) for t in rng.integers(32, 127, prompt_tokens)] for _ in range(clients * requests_per_client)]
    results = []

    async def client_loop(client, index):
        for r in range(requests_per_client):
            prompt = prompts[index * requests_per_client + r]
            results.append(await one_request(client, url, prompt, max_tokens, temperature))

    async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=clients + 4)) as client:
        before = metric_values((await client.get(url + "/metrics")).text)
        start = time.perf_counter()
        await asyncio.gather(*(client_loop(client, i) for i in range(clients)))
        wall = time.perf_counter() - start
        after = metric_values((await client.get(url + "/metrics")).text)
    steps = after["gpt_steps_total"] - before["gpt_steps_total"]
    generated = after["gpt_generated_tokens_total"] - before["gpt_generated_tokens_total"]
    ttft = np.array([r[0] for r in results]) * 1e3
    itl = np.array([gap for r in results for gap in r[1]]) * 1e3
    tokens = sum(r[2] for r in results)
    # Aggregate decode throughput: each stream's tokens after its first over the time they took
    # (prompt processing excluded), times the streams decoding at once.
    decode = clients * float(np.mean([len(r[1]) / sum(r[1]) for r in results if r[1]]))
    return dict(
        clients=clients,
        requests=len(results),
        tokens=tokens,
        wall=wall,
        ttft=ttft,
        itl=itl,
        per_step=generated / steps,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="an already running server (else one is started)")
    parser.add_argument("--model", help="for the started server: HF GPT-2 directory or GGUF (default: embedded)")
    parser.add_argument("--random_shape", choices=sorted(SHAPES), help="serve random weights of this shape")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--paged_reference", action="store_true", help="start the server on the numpy paged step")
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
    args = parser.parse_args()

    print("command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    with contextlib.ExitStack() as stack:
        if args.random_shape:
            args.model = random_model_file(args.random_shape, stack.enter_context(tempfile.TemporaryDirectory()))
        url = args.url or stack.enter_context(started_server(args))
        # Warm-up: one round of every level first, so that the step's programs for every batch
        # size and table width the levels reach are compiled before anything is timed.
        for c in args.concurrency:
            asyncio.run(level(url, c, 1, args.prompt_tokens, args.max_tokens, 1000 + c, args.temperature))
        rows = [
            asyncio.run(
                level(url, c, args.requests_per_client, args.prompt_tokens, args.max_tokens, c, args.temperature)
            )
            for c in args.concurrency
        ]
        prefix = asyncio.run(
            shared_prefix(url, args.prefix_requests, args.prefix_tokens, args.suffix_tokens, 4, seed=7)
        )
    single = rows[0]["tokens"] / rows[0]["wall"]
    single_decode = rows[0]["decode"]
    decoding = "greedy" if args.temperature == 0 else f"sampled at temperature {args.temperature}"
    print(f"prompt {args.prompt_tokens} tokens, {args.max_tokens} generated per request, {decoding}, streamed")
    print(
        "| clients | requests | tok/s (all) | x one client | decode tok/s (all) | x one client (decode) "
        "| TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | tokens per step |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        rate = r["tokens"] / r["wall"]
        print(
            f"| {r['clients']} | {r['requests']} | {rate:.1f} | {rate / single:.2f} | "
            f"{r['decode']:.1f} | {r['decode'] / single_decode:.2f} | "
            f"{np.percentile(r['ttft'], 50):.1f} | {np.percentile(r['ttft'], 99):.1f} | "
            f"{np.percentile(r['itl'], 50):.1f} | {np.percentile(r['itl'], 99):.1f} | {r['per_step']:.1f} |"
        )
    unshared = args.prefix_requests * (args.prefix_tokens + args.suffix_tokens)
    once = args.prefix_tokens + args.prefix_requests * args.suffix_tokens
    print(
        f"shared prefix: {args.prefix_requests} requests of {args.prefix_tokens} shared + {args.suffix_tokens} own "
        f"prompt tokens: {prefix['gpt_prefill_tokens_total']:.0f} prompt tokens computed (prefix once: {once}, "
        f"no sharing: {unshared}), {prefix['gpt_prefix_hit_tokens_total']:.0f} served from the prefix cache"
    )


if __name__ == "__main__":
    main()
