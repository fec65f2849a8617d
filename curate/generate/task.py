"""A shard task that asks a generation backend (``curate recaption``, ``curate rl-filter``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from curate.core.images import ImageLimits
from curate.core.shards import ShardTask
from curate.generate.base import GenerationBackend


class GenerationSettings(Protocol):
    """The part of a generating stage's config a :class:`GenerationTask` reads (``RecaptionConfig``,
    ``RlFilterConfig``): the backend's :func:`curate.generate.make_backend` arguments and the image limits
    (:class:`curate.core.limits.ImageReading`)."""

    @property
    def backend(self) -> Mapping[str, Any]: ...

    @property
    def image_limits(self) -> ImageLimits: ...

    @property
    def max_images(self) -> int: ...


class GenerationTask(ShardTask):
    """Holds the :func:`curate.generate.make_backend` arguments of its config; opens the backend once per worker.

    The open backend (a loaded model, a connection pool) is never pickled: each
    worker process or Ray actor opens its own in :meth:`setup`. ``limits`` and ``max_images``
    (the config's :class:`curate.core.limits.ImageReading`) bound what one record's images cost: the task checks
    them at the gate before a request, and a backend that reads pixels (a local model, a server's data
    URLs) reads within the same limits.
    """

    transient = ("_backend",)

    def __init__(self, config: GenerationSettings) -> None:
        """The task of a run's ``config`` (checked when it was built): its backend arguments and image limits."""
        self.backend_args = dict(config.backend)
        self.limits, self.max_images = config.image_limits, config.max_images
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
