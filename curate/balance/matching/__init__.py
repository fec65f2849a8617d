"""Text matching of captions against a vocabulary (``curate match``): the rules, the automaton, the
texts of a record and their languages. The stage that runs it over records is :mod:`curate.balance.match`."""
