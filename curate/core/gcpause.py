"""Python's cyclic garbage collector paused around work that makes many long-lived objects and little garbage.

Importing torch, transformers or matplotlib and building a processor or a model create
hundreds of thousands of container objects that live as long as the process. Each
automatic collection of the oldest generation walks all of them again: measured here,
loading a Qwen2-VL processor took ≈1 s longer with the collector running (7 full
collections over ≈435K objects) and found ≈10 MB of garbage. Column work (``resample``)
makes few Python objects, yet the collections that its imports trigger walk every object
of every module loaded so far. :func:`paused_gc` turns automatic collection off for such a
block; what the block leaves behind is collected by the next automatic collection after it.

At interpreter exit the collector walks every object again, more than once as modules are
torn down: a ``curate pack`` that had loaded a processor spent 1.7 s exiting (≈520K
objects). :func:`settle_for_exit` collects once and freezes what is left, for a process
that is about to exit: 0.65 s.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def paused_gc() -> Iterator[None]:
    """No automatic garbage collection inside the block (nested and concurrent blocks included); the collector's
    state from before the outermost block is restored when the last block ends. ``gc.collect()`` still works."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()


def settle_for_exit() -> None:
    """Collect the garbage once (finalizers run, cyclic garbage with open files included), then freeze every
    object left so that the collections of interpreter shutdown skip them. Only for a process about to exit:
    objects made after this are collected as usual, but none of the frozen ones ever again."""
    gc.collect()
    gc.freeze()
