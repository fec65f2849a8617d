"""The shared core every stage builds on: errors, I/O, stats, the shard contract, journal, progress, records and images."""
