"""Defaults that several stages' settings share, in a module that imports nothing: a stage's settings
(``curate.balance.config``, ``packer.config``) name them without loading the sharding code."""

DEFAULT_SHARD_SIZE = 5000
"""Records per shard of a sharded stage (``--shard-size``)."""
