"""Rows written back point at their images: the reader's resolved paths replace the row's relative ones."""

from __future__ import annotations

from curate.core.formats.writeback import with_resolved_paths


def test_paths_take_the_readers_resolution_and_bytes_stay() -> None:
    raw = {"id": "a", "images": ["img/1.jpg", {"bytes": None, "path": "img/2.jpg"}, {"bytes": b"x", "path": "3.jpg"}]}
    images = ["/data/img/1.jpg", "/data/img/2.jpg", b"x"]
    out = with_resolved_paths(raw, images)
    assert out["images"] == ["/data/img/1.jpg", {"bytes": None, "path": "/data/img/2.jpg"},
                             {"bytes": b"x", "path": "3.jpg"}]
    assert raw["images"][0] == "img/1.jpg"  # the row given is not changed
    one = with_resolved_paths({"image": "1.jpg"}, ["s3://bucket/set/1.jpg"])
    assert one == {"image": "s3://bucket/set/1.jpg"}
    unchanged = {"image": "/abs/1.jpg"}
    assert with_resolved_paths(unchanged, ["/abs/1.jpg"]) is unchanged
    assert with_resolved_paths({"images": ["a.jpg", "b.jpg"]}, ["/x/a.jpg"]) == {"images": ["a.jpg", "b.jpg"]}


def test_a_path_under_the_new_folder_is_written_relative_to_it() -> None:
    row = with_resolved_paths({"images": ["a.jpg", "b.jpg"]}, ["/out/records/img/a.jpg", "/data/b.jpg"],
                              relative_to="/out/records")
    assert row["images"] == ["img/a.jpg", "/data/b.jpg"]
    assert with_resolved_paths({"image": "a.jpg"}, ["s3://b/a.jpg"], relative_to="/out") == {"image": "s3://b/a.jpg"}
