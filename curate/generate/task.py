"""A shard task that asks a generation backend (``curate recaption``, ``curate rl-filter``)."""

from __future__ import annotations

from typing import Any

from curate.core.limits import DEFAULT_MAX_IMAGES
from curate.core.images import DEFAULT_LIMITS, ImageLimits
from curate.core.shards import ShardTask
from curate.generate.base import GenerationBackend


class GenerationTask(ShardTask):
    """Holds the :func:`curate.generate.make_backend` arguments; opens the backend once per worker.

    The open backend (a loaded model, a connection pool) is never pickled: each
    worker process or Ray actor opens its own in :meth:`setup`. ``limits`` and ``max_images``
    (:class:`curate.core.limits.ImageReading`) bound what one record's images cost: the task checks
    them at the gate before a request, and a backend that reads pixels (a local model, a server's data
    URLs) reads within the same limits.
    """

    transient = ("_backend",)

    def __init__(self, backend: dict[str, Any], *, limits: ImageLimits = DEFAULT_LIMITS,
                 max_images: int = DEFAULT_MAX_IMAGES) -> None:
        self.backend_args = backend
        self.limits, self.max_images = limits, max_images
        self._backend: GenerationBackend | None = None

    def setup(self) -> None:
        """Open the backend (a local model loads once per worker)."""
        if self._backend is None:
            from curate.generate import make_backend

            args = dict(self.backend_args)
            if not args.get("rollouts"):  # stored answers read no pixels
                args.setdefault("max_image_bytes", self.limits.max_bytes)
                args.setdefault("max_image_pixels", self.limits.max_pixels)
            self._backend = make_backend(**args)

    def reading_settings(self) -> dict[str, Any]:
        """The image limits, as the task's settings record them (they decide which records are asked)."""
        return {"image_limits": self.limits.settings(), "max_images": self.max_images}

    @property
    def backend(self) -> GenerationBackend:
        """The open backend."""
        self.setup()
        assert self._backend is not None
        return self._backend
