"""LRU cache of deterministic isolated-task results, shared by the scoring calls."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from curate.rewards.runtime.limits import Task


def _size(arg: Any) -> int:
    if isinstance(arg, str):
        return len(arg)
    if isinstance(arg, tuple):
        return sum(len(a) if isinstance(a, str) else 1 for a in arg) + 1
    return 1


class ResultCache:
    """Thread-safe LRU cache of deterministic task results (successes only)."""

    def __init__(self, capacity: int = 50_000, max_key_chars: int = 20_000) -> None:
        self.capacity = capacity
        self.max_key_chars = max_key_chars
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def key(self, task: Task, pool: str = "verifiers") -> Any:
        """Cache key of ``task`` on ``pool`` or ``None`` when it is too big or unhashable.

        The size counts the characters of string arguments and of the strings inside tuple
        arguments (a program's test inputs), so a key never holds megabytes of inputs.
        """
        try:
            size = sum(_size(a) for a in task.args)
            if size > self.max_key_chars:
                return None
            k = (pool, task.fn, task.args)
            hash(k)
            return k
        except TypeError:
            return None

    def get(self, key: Any) -> float | None:
        """Cached value or ``None``."""
        if key is None:
            return None
        with self._lock:
            v = self._data.get(key)
            if v is not None:
                self._data.move_to_end(key)
            return v

    def put(self, key: Any, value: float) -> None:
        """Store a value (evicting the least recently used)."""
        if key is None:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.capacity:
                self._data.popitem(last=False)
