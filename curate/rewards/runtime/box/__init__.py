"""What runs inside the code sandbox: the runner and its confinement, the per-test child, the seccomp filters, the
audit hook.

Standard library only and no import of ``curate``: the sandbox sees this folder alone (bound
read-only), not the rest of the package. The host imports :mod:`.wire` (the frames both sides
speak), :mod:`.seccomp` (the filter it hands to bubblewrap) and :func:`.runner.digest` (how an
expected output is compared) from here, so each is declared once.
"""
