"""The gate's reasons: documented where users read them, and what decoder failures map to."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, UnidentifiedImageError

from curate.core.images import REASONS, ImageError, reason_of

DOC = Path(__file__).resolve().parents[4] / "docs" / "images.md"


def test_every_reason_is_in_the_users_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert [r for r in REASONS if f"| `{r}` |" not in text] == []


def test_decoder_failures_become_reasons() -> None:
    cases = {Image.DecompressionBombError("too big"): "decompression_bomb",
             UnidentifiedImageError("cannot identify"): "not_an_image",
             NotImplementedError("Unimplemented pixel format"): "unsupported_format",
             OSError("Unable to locate Ghostscript on paths"): "unsupported_format",
             OSError("image file is truncated (3 bytes not processed)"): "truncated",
             ValueError("seek of closed file"): "unreadable_image",
             ImageError("too_large", "x"): "too_large"}
    assert {type(e).__name__ + str(e): reason_of(e) for e in cases} == \
        {type(e).__name__ + str(e): r for e, r in cases.items()}
    assert set(cases.values()) <= set(REASONS)


def test_details_carry_no_object_address() -> None:
    """The same file gives the same detail in every run and process (rejects.parquet is byte-identical)."""
    import io

    from curate.core.images import check

    details = set()
    for _ in range(2):
        try:
            check(io.BytesIO(b"not an image at all").getvalue())
        except ImageError as exc:
            details.add(exc.detail)
    assert len(details) == 1 and "0x" not in details.pop()
