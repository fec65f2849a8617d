"""curate: prepare the training data of vision-language models.

Stages (one module each) read records and write records plus a ``stats.json``;
they compose through files. See README.md for the command-line verbs.
"""

__version__ = "0.1.0"
