"""Threads: compiled calls release the GIL, so two threads run them at once, with the results
each would get alone, also while both compile the programs they need."""

import threading
import time

import numpy as np

import gpt
from shapes import MID, config, exercising_weights, token_ids

CFG = config(MID)
WEIGHTS = exercising_weights(CFG)
OPTIONS = gpt.CompileOptions(disk_cache=False, threads=1)
MODEL = gpt.GPT.from_weights(CFG, WEIGHTS, OPTIONS)
IDS = token_ids(CFG, 256)


def test_a_compiled_call_lets_other_python_threads_run():
    MODEL.forward(IDS)  # compiled before the measurement
    ticks = []
    stop = threading.Event()

    def tick():  # wakes every millisecond, and can only count while it holds the GIL
        while not stop.is_set():
            ticks.append(None)
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        before = len(ticks)
        start = time.perf_counter()
        for _ in range(5):
            MODEL.forward(IDS)
        seconds = time.perf_counter() - start
        during = len(ticks) - before
    finally:
        stop.set()
        ticker.join()
    # Holding the GIL through the five calls would leave the ticker a handful of chances (between
    # calls); released, it ticks through them (at least one tick in every 5 ms, very loosely).
    assert seconds > 0.05, seconds  # long enough for the count to mean something
    assert during > max(20, seconds / 0.005), (during, seconds)


def test_two_threads_compiling_and_calling_one_model_get_what_each_gets_alone():
    lengths = [5, 12, 40, 100, 256]
    alone = {n: MODEL.forward(IDS[:n]) for n in lengths}
    results = {0: [], 1: []}
    shared = gpt.GPT.from_weights(CFG, WEIGHTS, OPTIONS)  # nothing compiled: the threads race to compile

    def work(worker):
        for n in lengths * 3:
            results[worker].append((n, shared.forward(IDS[:n])))

    threads = [threading.Thread(target=work, args=(worker,)) for worker in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for outputs in results.values():
        assert len(outputs) == 3 * len(lengths)
        for n, logits in outputs:
            np.testing.assert_array_equal(logits, alone[n])
