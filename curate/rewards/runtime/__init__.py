"""Where verifiers run: time limits in killable worker processes, the result cache, the code sandbox
(:mod:`.sandbox`, :mod:`.bwrap` and, inside it, :mod:`.box`)."""
