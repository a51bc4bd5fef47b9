"""Ctrl-C: it reaches the caller at once, even in the middle of a compile, and leaves the model
and its KV caches as the completed steps left them."""

import json
import os
import signal
import subprocess
import sys
import time

import gpt

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/python: the helper modules
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([PACKAGE, TESTS]))


def test_ctrl_c_at_random_moments_of_decoding_and_generating_loses_nothing():
    child = subprocess.run(
        [sys.executable, os.path.join(TESTS, "interrupted_child.py"), "20"],
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
    )
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout)
    lengths = [length for length, _, _ in report["decode"]]
    assert len(set(lengths)) > 5, lengths  # the signals fell at many different steps
    for length, cache_error, continued_error in report["decode"]:
        # The positions the cache counts are exactly those a fresh prefill writes (prefill and
        # decode are different programs: equal to float rounding), and decoding continues.
        assert cache_error < 1e-5 and continued_error < 1e-4, (length, cache_error, continued_error)
    assert report["generate"] == [[True, True]] * 20


COMPILING_CHILD = """
import sys, time, gpt
# Hundreds of layers: a compile of seconds (tools/bench/bench_compile.py), whatever the machine.
cfg = gpt.GPTConfig(n_layer=300, n_head=1, n_embd=8, vocab_size=64, block_size=64)
model = gpt.GPT.random(cfg, seed=0, options=gpt.CompileOptions(disk_cache=False))
print("compiling", flush=True)
start = time.perf_counter()
try:
    model.forward([1, 2, 3])
except KeyboardInterrupt:
    interrupted = time.perf_counter() - start
    if sys.argv[1:] == ["exit"]:
        print(interrupted, flush=True)
        raise  # the process ends while the compile still runs
    logits = model.forward([1, 2, 3])  # waits for the compile the interrupt left running
    print(interrupted, model.compile_seconds(), logits.shape, flush=True)
"""


def interrupt_a_compile(*arguments):
    child = subprocess.Popen(
        [sys.executable, "-c", COMPILING_CHILD, *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert child.stdout.readline().strip() == "compiling"
    time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=600)
    return child.returncode, out, err


def test_ctrl_c_during_a_compile_arrives_at_once_and_the_compile_is_kept():
    returncode, out, err = interrupt_a_compile()
    assert returncode == 0, err
    interrupted, compile_seconds, shape = out.split(maxsplit=2)
    # Delivered within a fraction of a second, long before the compile ended (without the
    # compile thread it arrived only when the compile had finished) ...
    assert float(interrupted) < 1.0 and float(compile_seconds) > float(interrupted) + 0.5, out
    # ... which went on and was used by the next call: one program, compiled once.
    assert shape.strip() == "(3, 64)"


def test_a_process_ended_by_ctrl_c_during_a_compile_exits_cleanly():
    # It waits for the compile thread rather than tearing it down inside C++ (which aborted with
    # "terminate called without an active exception"), then dies of SIGINT as Python does.
    returncode, out, err = interrupt_a_compile("exit")
    assert float(out) < 1.0, out
    assert returncode == -signal.SIGINT, err
    assert "KeyboardInterrupt" in err and "terminate" not in err and "Fatal Python error" not in err
