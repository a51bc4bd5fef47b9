"""The clock of generate()'s steps, which gpt.GPT and gpt_runtime.Model share (gpt imports it; this
package never imports gpt): a step's seconds less the one-time work it waited for (gpt's program
compiles, this runtime's CUDA graph captures), which counts apart."""

import time
from collections.abc import Callable
from typing import Any


def step_timer(stats: dict[str, Any], one_time_key: str, waited: Callable[[], float]) -> Callable:
    """timed(key, fn, *args): runs fn(*args), returns its result, and adds its seconds to
    stats[key] less what `waited()` (a running total of seconds of one-time work) grew by meanwhile,
    which goes to stats[one_time_key] instead."""

    def timed(key, fn, *args):
        waited_before = waited()
        start = time.perf_counter()
        result = fn(*args)
        one_time = waited() - waited_before
        stats[one_time_key] += one_time
        stats[key] += time.perf_counter() - start - one_time
        return result

    return timed
