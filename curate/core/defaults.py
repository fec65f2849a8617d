"""Defaults that several stages' settings share, in a module that imports nothing: a stage's settings
(``curate.balance.config``, ``packer.config``) name them without loading the sharding code."""

DEFAULT_SHARD_SIZE = 5000
"""Records per shard of a sharded stage (``--shard-size``)."""

DEFAULT_MAX_IMAGES = 64
"""Images one record may hold (``--max-images-per-record``): interleaved documents and multi-image
conversations hold a few to a few dozen; a record past it is errored ``too_many_images`` in the one
record loop (:func:`curate.core.shards.readable_records`) before any image is read."""

MAX_WORKERS = 4096
"""Worker processes or actors at most (``--workers``): each is a process with its own copy of a model."""
MAX_THREADS = 1024
"""Threads of one kind per worker at most (``--threads``, ``--decode-threads``, ``--concurrency``)."""
