"""The verbs of the ``curate`` command line, one module per role.

Each module registers its verbs on :data:`curate.cli.cli` when imported;
``curate/cli.py`` imports them all at its end. Verbs stay thin: they parse
flags and call the one function that holds the logic.

pack.py       pack, verify, energon-prepare
balance.py    embed, tag, resample, balance
vocab.py      vocab build, vocab embed
rl.py         score, serve-rewards, rl-filter
recaption.py  recaption
"""
