"""Where a model loads from (curate.models.hub): folders, hub ids, the hub unreachable or switched off.

"Unreachable" is real: the hub's endpoint is a loopback port that nothing listens on, so a connection is
refused, and nothing can download whatever the machine's network is.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from curate.core.errors import UserError
from curate.models.hub import Source, hub_address, hub_reachable, locate, looks_like_path

MISSING_ID = "curate-tests/no-such-model-0"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def unreachable(monkeypatch: pytest.MonkeyPatch) -> str:
    """The hub at a closed loopback port, not in offline mode, no proxy."""
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(key, raising=False)
    port = closed_port()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    return f"127.0.0.1:{port}"


@pytest.fixture(autouse=True)
def _as_the_command_line_says_it():  # noqa: ANN202 - a fixture
    """The messages as the CLI prints them (flags); from Python they name the config fields instead."""
    from curate.core.errors import command_line

    with command_line():
        yield


def test_folder_loads_locally(tmp_path: Path) -> None:
    assert locate(tmp_path, "--processor") == Source(str(tmp_path), True)


@pytest.mark.parametrize("spec", ["/nonexistent/proc", "./proc", "../x/proc", "~/no/such/proc", "a/b/c",
                                  "bad name/x"])
def test_a_path_that_is_not_there_is_no_such_folder(spec: str) -> None:
    with pytest.raises(UserError, match=r"^--processor .*: no such folder$"):
        locate(spec, "--processor")


def test_a_file_is_not_a_folder(tmp_path: Path) -> None:
    f = tmp_path / "proc.json"
    f.write_text("{}")
    with pytest.raises(UserError, match="not a folder"):
        locate(f, "--processor")


def test_looks_like_path() -> None:
    assert looks_like_path("/a") and looks_like_path("./a") and looks_like_path("a/b/c") and looks_like_path("C:x")
    assert not looks_like_path("Qwen/Qwen2-VL-7B-Instruct") and not looks_like_path("gpt2")


def test_offline_hub_id_fails_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError) as exc:
        locate(MISSING_ID, "--processor")
    text = str(exc.value)
    assert "\n" not in text and text.startswith(f"--processor {MISSING_ID}: ")
    assert "HF_HUB_OFFLINE is set" in text and "--processor DIR" in text and f"hf download {MISSING_ID}" in text


def test_unreachable_hub_id_fails_naming_the_address(unreachable: str) -> None:
    assert not hub_reachable()
    with pytest.raises(UserError) as exc:
        locate(MISSING_ID, "--model")
    text = str(exc.value)
    assert f"{unreachable} cannot be reached" in text and "set HF_HUB_OFFLINE=1" in text and "--model DIR" in text


def test_reachable_hub_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listening endpoint counts as reachable: the id is handed to the loader, which may download."""
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(key, raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert locate(MISSING_ID, "--processor") == Source(MISSING_ID, False)


def test_proxy_is_what_is_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert hub_address() == ("proxy.internal", 3128)
    monkeypatch.delenv("HTTPS_PROXY")
    for key in ("https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.example")
    assert hub_address() == ("hf-mirror.example", 443)



def test_open_clip_weights_are_checked_without_loading(tiny_clip_spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``check_weights``: a local model passes; the default hub tag, offline and not cached, is one line."""
    from curate.models.specs import DEFAULT_MODEL, cached_hub_file, check_weights

    assert check_weights(tiny_clip_spec).text == tiny_clip_spec
    with pytest.raises(UserError, match="no such folder"):
        check_weights("local-dir:/no/such/clip")
    if cached_hub_file("timm/vit_base_patch32_clip_224.metaclip_400m", ["open_clip_model.safetensors"]):
        pytest.skip("MetaCLIP weights are in this machine's hub cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError) as exc:
        check_weights(DEFAULT_MODEL)
    assert str(exc.value).startswith(f"--model {DEFAULT_MODEL}: ") and "local-dir:FOLDER" in str(exc.value)
