"""Run by test_interrupts.py in a process of its own: Ctrl-C (SIGINT, sent by a timer thread of
this process) at random moments of a decode loop and of generate(), then checks that the model and
the cache are as the completed steps left them. Prints one JSON object."""

import json
import os
import signal
import sys
import threading

import numpy as np

import gpt
from shapes import NANO, config, exercising_weights

TRIALS = int(sys.argv[1])
CFG = config(NANO)
MODEL = gpt.GPT.from_weights(CFG, exercising_weights(CFG), gpt.CompileOptions(disk_cache=False))
TOKENS = np.random.default_rng(1).integers(0, CFG.vocab_size, size=CFG.block_size)
PROMPT = [int(t) for t in TOKENS[:5]]


def interrupt_after(seconds):
    threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT)).start()


def decode_until_interrupted(cache):
    """Feeds TOKENS one decode step at a time, from the start again when the cache is full."""
    while True:
        if len(cache) == cache.max_len:
            cache.reset()
        MODEL.decode(int(TOKENS[len(cache)]), cache)


def check_cache(cache):
    """The cache's positions equal a fresh prefill of the tokens it counts, and decoding goes on
    from it as from the fresh one."""
    length = len(cache)
    fresh = MODEL.new_cache(cache.max_len)
    if length:
        MODEL.prefill(TOKENS[:length], fresh)
    scale = max(np.abs(fresh._keys).max(), np.abs(fresh._values).max(), 1e-30)
    error = max(
        np.abs(cache._keys[:, :, :length] - fresh._keys[:, :, :length]).max(initial=0),
        np.abs(cache._values[:, :, :length] - fresh._values[:, :, :length]).max(initial=0),
    )
    if length == cache.max_len:
        cache.reset()
        fresh.reset()
        length = 0
    following = int(TOKENS[length])
    expected = MODEL.decode(following, fresh)
    continued = MODEL.decode(following, cache)  # raises RuntimeError if the cache stayed claimed
    return float(error / scale), float(np.abs(continued - expected).max() / np.abs(expected).max())


def main():
    rng = np.random.default_rng(0)
    greedy = MODEL.generate(PROMPT, 100, temperature=0.0)
    MODEL.prefill(PROMPT, MODEL.new_cache(64))  # every program compiled before the first signal
    cache = MODEL.new_cache(64)
    report = {"decode": [], "generate": []}
    for _ in range(TRIALS):
        try:  # the timer is started inside: its signal may come before start() returns
            interrupt_after(float(rng.uniform(0.001, 0.03)))
            decode_until_interrupted(cache)
        except KeyboardInterrupt:
            pass
        report["decode"].append((len(cache), *check_cache(cache)))
    for trial in range(TRIALS):
        stream = trial % 2 == 0
        produced = []
        try:
            interrupt_after(float(rng.uniform(0.001, 0.03)))
            while True:
                produced = []
                for token in MODEL.generate(PROMPT, 100, temperature=0.0, stream=stream):
                    produced.append(token)
        except KeyboardInterrupt:
            pass
        # What was generated before the interrupt is the greedy continuation's start, and the
        # model generates the whole of it again.
        again = MODEL.generate(PROMPT, 100, temperature=0.0)
        report["generate"].append((produced == greedy[: len(produced)], again == greedy))
    print(json.dumps(report))


main()
