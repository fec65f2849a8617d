"""Where verifiers run: time limits in killable worker processes, the result cache, the code sandbox."""
