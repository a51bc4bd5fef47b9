"""One call at a time on a buffer that calls write in place (a KV cache, a block pool), safe
against Ctrl-C; and calls that Ctrl-C interrupts only once they are done."""

import signal
import threading


class Claim:
    """`claim.run(fn, *args)` runs fn holding the claim, or raises RuntimeError(message) when
    another call holds it.

    A KeyboardInterrupt can arrive between any two bytecodes, also right after a lock is taken
    and before a `try` protects it, which would leave the buffer claimed for good (every later
    call failing with "in use"). So the lock is taken inside the `try`, and the `finally` lets
    it go by calling release() whatever happened: one C call that releases it when this thread
    holds it and raises RuntimeError when it does not (the acquire failed or never ran). An
    RLock, because only an RLock knows its owner; no call here nests, so it is never re-entered."""

    def __init__(self, message: str):
        self._lock = threading.RLock()
        self._message = message

    def run(self, fn, *args):
        try:
            if not self._lock.acquire(blocking=False):
                raise RuntimeError(self._message)
            return fn(*args)
        finally:
            try:
                self._lock.release()
            except RuntimeError:
                pass  # not held by this thread


def run_deferring_interrupts(fn, *args):
    """fn(*args) with Ctrl-C held back until it returns or raises, then delivered to the SIGINT
    handler that was in place (KeyboardInterrupt by default), as if it had come right then.

    For work whose changes must land together (the engine's step): a KeyboardInterrupt is raised
    between any two bytecodes, also in the middle of a commit or of the rollback of a failed
    one, where no try/except can restore order. Signal handlers run on the main thread only, so
    elsewhere fn just runs (no KeyboardInterrupt reaches another thread). Nor is anything held
    back where SIGINT is ignored or its handler was not set from Python (it could not be put
    back). The delay is what fn still had to do: its long calls into compiled code would have
    held the handler back anyway."""
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or previous is signal.SIG_IGN:
        return fn(*args)
    received = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(frame))
    try:
        return fn(*args)
    finally:
        # No Python call of ours before the restore, for an exception to skip it.
        signal.signal(signal.SIGINT, previous)
        if received:
            if callable(previous):
                previous(signal.SIGINT, received[0])
            else:  # SIG_DFL: the process ends, as it would have
                signal.raise_signal(signal.SIGINT)
