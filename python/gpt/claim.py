"""One call at a time on a buffer that calls write in place (a KV cache, a block pool), safe
against Ctrl-C."""

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
