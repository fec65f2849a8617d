"""A shard task that asks a generation backend (``curate recaption``, ``curate rl-filter``)."""

from __future__ import annotations

from typing import Any

from curate.core.shards import ShardTask
from curate.generate.base import GenerationBackend


class GenerationTask(ShardTask):
    """Holds the :func:`curate.generate.make_backend` arguments; opens the backend once per worker.

    The open backend (a loaded model, a connection pool) is never pickled: each
    worker process or Ray actor opens its own in :meth:`setup`.
    """

    transient = ("_backend",)

    def __init__(self, backend: dict[str, Any]) -> None:
        self.backend_args = backend
        self._backend: GenerationBackend | None = None

    def setup(self) -> None:
        """Open the backend (a local model loads once per worker)."""
        if self._backend is None:
            from curate.generate import make_backend

            self._backend = make_backend(**self.backend_args)

    @property
    def backend(self) -> GenerationBackend:
        """The open backend."""
        self.setup()
        assert self._backend is not None
        return self._backend
