"""Threads: compiled calls release the GIL, so two threads run them at once, with the results
each would get alone, also while both compile the programs they need; and the limit on the
threads compiled code may use."""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import gpt
from shapes import MID, NANO, config, exercising_weights, token_ids

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


# -- the thread limit (issue 29): libomp aborted the process at 100,000 threads --------------------


@pytest.mark.parametrize("threads", [gpt.config.MAX_THREADS + 1, 20_000, 100_000, 2**62])
def test_more_threads_than_the_limit_are_refused_by_name(threads):
    with pytest.raises(ValueError, match=f"CompileOptions.threads={threads} is more than MAX_THREADS="):
        gpt.CompileOptions(threads=threads)


@pytest.mark.parametrize("threads", [0, -1, True, 2.0, "4"])
def test_threads_that_are_not_a_positive_int_are_refused(threads):
    with pytest.raises(ValueError, match="CompileOptions.threads must be None or a positive int"):
        gpt.CompileOptions(threads=threads)


def test_the_limit_itself_runs_and_gives_one_threads_logits():
    """MAX_THREADS is a count OpenMP can start here (at least 256, 4 per core): the model runs,
    with the logits of one thread."""
    assert gpt.config.MAX_THREADS >= max(256, os.cpu_count())
    cfg = config(NANO)
    weights = exercising_weights(cfg)
    ids = token_ids(cfg, 40)
    most = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(disk_cache=False, threads=gpt.config.MAX_THREADS))
    one = gpt.GPT.from_weights(cfg, weights, gpt.CompileOptions(disk_cache=False, threads=1))
    np.testing.assert_allclose(most.forward(ids), one.forward(ids), rtol=1e-5, atol=1e-5)


def test_the_cli_refuses_too_many_threads_with_exit_2_not_an_abort():
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__))))
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "gpt", "generate", "--threads", "100000", "--max_new_tokens", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])  # an abort is -6 (SIGABRT)
    assert "is more than MAX_THREADS=" in result.stderr
    assert time.perf_counter() - start < 60  # refused before any model is compiled
