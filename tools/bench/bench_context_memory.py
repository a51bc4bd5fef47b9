"""What a GGUF model holds at a given context: RSS after load, after its whole KV cache is written,
a prefill and some decode steps, and the peak, per KV cache format.

    PYTHONPATH=bazel-bin/python python3 tools/bench/bench_context_memory.py /tmp/llama-8b.q4_k_m.gguf \
        --ctx 4096 --kv-cache q8_0,f16

Each format runs in a process of its own (so that its RSS and peak are its own): GPT.from_gguf with
`weights="auto"`, `context=--ctx` and the format; then a cache of --ctx positions whose every page is
written (a full context's cache is resident; a fresh one is not, until written), a prefill of
--prompt tokens and --decode steps. Run it once before measuring, so that the load is a later start
(the packed weights from the disk cache): a first start's peak holds the mapped file too.
"""

import argparse
import json
import subprocess
import sys

from machine import describe_cpu

GIB = 2**30


def measure(path: str, ctx: int, kv_cache: str, prompt: int, decode: int) -> dict:
    """One process's figures (run as `--child`)."""
    import numpy as np

    import gpt

    def status() -> dict:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f)
        return {key: int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM")}

    model = gpt.GPT.from_gguf(path, options=gpt.CompileOptions(weights="auto", kv_cache=kv_cache), context=ctx)
    after_load = status()["VmRSS"]
    cache = model.new_cache(ctx)
    for buffer in (cache._keys, cache._values):
        buffer[...] = 0  # every page resident, as a full context's cache is
    logits = model.prefill(list(range(1000, 1000 + prompt)), cache)
    for _ in range(decode):
        logits = model.decode(int(np.argmax(logits.reshape(-1, logits.shape[-1])[-1])), cache)
    end = status()
    return {"after_load": after_load, "cache": cache.nbytes, "after_run": end["VmRSS"], "peak": end["VmHWM"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a GGUF file")
    parser.add_argument("--ctx", type=int, default=4096, help="the context (positions) the model and cache hold")
    parser.add_argument("--kv-cache", default="q8_0,f16", help="comma-separated KV cache formats")
    parser.add_argument("--prompt", type=int, default=512, help="prompt tokens prefilled into the cache")
    parser.add_argument("--decode", type=int, default=16, help="decode steps after the prefill")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.model, args.ctx, args.child, args.prompt, args.decode)))
        return
    print("command: PYTHONPATH=bazel-bin/python python3 tools/bench/bench_context_memory.py " + " ".join(sys.argv[1:]))
    print(f"cpu: {describe_cpu()}; context {args.ctx}, prefill {args.prompt} tokens, {args.decode} decode steps\n")
    print("| KV cache | cache GiB | RSS after load GiB | RSS after prefill + decode | peak |")
    print("|---|---|---|---|---|")
    for kv_cache in args.kv_cache.split(","):
        command = [sys.executable, __file__, args.model, "--ctx", str(args.ctx), "--prompt", str(args.prompt)]
        command += ["--decode", str(args.decode), "--child", kv_cache]
        figures = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        run, peak = figures["after_run"], figures["peak"]
        print(
            f"| {kv_cache} | {figures['cache'] / GIB:.3f} | {figures['after_load'] / GIB:.2f} | "
            f"{run / GIB:.2f} GiB ({run / 1e9:.2f} GB) | {peak / GIB:.2f} GiB ({peak / 1e9:.2f} GB) |"
        )


if __name__ == "__main__":
    main()
