"""How many of curate's own modules one verb run passes through (a function of theirs is called).

    .venv/bin/python scripts/modules_used.py pack data/sample/records.jsonl --processor PROC --out /tmp/p
    .venv/bin/python scripts/modules_used.py --list balance data/sample/records.jsonl --vocab ... --out /tmp/b

Runs the verb in this process (``--workers 1``, the default) under a profile hook that records the
file of every Python function called, and prints the count of ``curate``/``packer`` modules among them
(``--list``: and their names). A measure of breadth: how much a reader must open to follow one run.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    """Run the verb of ``argv`` and print the modules it passed through."""
    show = "--list" in argv
    argv = [a for a in argv if a != "--list"]
    seen: set[str] = set()
    roots = (str(ROOT / "curate"), str(ROOT / "packer"))

    def hook(frame, event, arg):  # noqa: ANN001, ANN202 - sys.setprofile's signature
        if event == "call":
            name = frame.f_code.co_filename
            if name.startswith(roots):
                seen.add(name)

    from curate.cli import cli

    sys.setprofile(hook)
    try:
        cli.main(argv, standalone_mode=False)
    finally:
        sys.setprofile(None)
    modules = sorted(str(Path(p).relative_to(ROOT).with_suffix("")).replace("/", ".") for p in seen)
    print(f"{argv[0]}: {len(modules)} modules of curate and packer")
    if show:
        print("\n".join(f"  {m}" for m in modules))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
