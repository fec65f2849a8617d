"""``curate vocab embed``: a vocabulary file → ``V×D`` float16 concept embeddings, cached.

Row ``i`` of the output is line ``i + 1`` of the vocabulary, embedded with the
model's text tower (optionally through a prompt template such as
``a photo of {}``) and L2-normalised. MetaCLIP 1 (and every model with CLIP's
English BPE tokenizer) reads Latin script only; a multilingual one (MetaCLIP 2
worldwide, XLM-R tokenizer) reads every entry. An entry in a script the text tower
cannot read is embedded through its English gloss when the gloss file beside the
vocabulary (``NAME.gloss.tsv``, from ``curate vocab build``'s CC-CEDICT glosses) has
one; otherwise it is not embedded as noise: its row is zero (and :mod:`curate.balance.tag`
never returns zero rows) and it is counted per script. ``--scripts all`` overrides
the choice.

Cache: ``CACHE/<key>/`` with ``key`` = hash(model fingerprint, vocabulary hash,
template, scripts, gloss file). ``CACHE`` is ``--cache-dir``, else ``$CURATE_CACHE/concepts``,
else ``~/.cache/curate/concepts``. The vocabulary is embedded in chunks of
:data:`CHUNK` entries, each saved as ``parts/<chunk>.npy`` as soon as it is done,
so a killed run resumes at the first missing chunk; the finished matrix is
``concepts.npy`` + ``meta.json`` there, and a second run only copies it.

Speed: tokenizing (pure Python) runs in a background thread while the model
embeds the previous chunk; within a chunk texts are sorted by token count so
that batches are cut after their longest text (see
:meth:`curate.models.encoders.Encoder.encode_tokens`). The earlier wordfreq-only
``vocab/500k.txt`` with the tiny test CLIP on 2 cores: 26 s on an idle machine
(tokenizing its 250K English entries was most of it; its 250K Chinese ones were
skipped), about 100 s on a busy one. The current file embeds all 500K rows (its
~300,000 Chinese ones through their glosses): 39 s of CPU, 279 s of wall time on a
machine loaded 15 deep. A real ViT-B/32 text tower on a CPU takes hours: use a
GPU, or let the chunks resume.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from curate.balance.config import SCRIPT_CHOICES, VocabEmbedConfig, check_template
from curate.models.encoders import Encoder, load_encoder
from curate.core.errors import UserError
from curate.balance.concepts import copy_concepts, sidecar_path
from curate.core.io import atomic_open, curate_cache, file_sha256, read_json, url_of, write_json
from curate.core.remote import local_file, writing
from curate.core.progress import StageProgress
from curate.core.shards import Shard, ShardContext, ShardTask
from curate.core.stats import StageStats
from curate.core.validate import configure
from curate.balance.vocab.files import default_gloss_path, load_glosses, load_vocab
from curate.balance.vocab.filters import entry_script

CHUNK = 16384


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where concept embeddings are cached (see the module docstring)."""
    if cache_dir:
        return Path(cache_dir)
    return curate_cache("concepts")


def read_vocab(path: str | os.PathLike[str]) -> list[str]:
    """Read and check a vocabulary (UTF-8, one entry per line, no blank or repeated line)."""
    return load_vocab(Path(path))


def resolve_scripts(scripts: str, encoder: Encoder) -> tuple[str, ...]:
    """The scripts to embed: ``auto`` → what the tokenizer reads; ``all`` → every entry."""
    if scripts not in SCRIPT_CHOICES:
        raise UserError(f"--scripts {scripts}: use one of {', '.join(SCRIPT_CHOICES)}")
    if scripts == "auto":
        return encoder.scripts
    return tuple(scripts.split(","))


def readable_mask(entries: list[str], scripts: tuple[str, ...]) -> tuple[np.ndarray, Counter]:
    """Which entries the encoder reads, and how many are skipped per script."""
    if "all" in scripts:
        return np.ones(len(entries), dtype=bool), Counter()
    mask = np.zeros(len(entries), dtype=bool)
    skipped: Counter = Counter()
    for i, text in enumerate(entries):
        script = entry_script(text)
        if script in scripts:
            mask[i] = True
        else:
            skipped[script] += 1
    return mask, skipped


def embed_texts(entries: list[str], scripts: tuple[str, ...],
                glosses: dict[str, str] | None) -> tuple[list[str], np.ndarray, Counter, int]:
    """What each row embeds: the entry when the encoder reads its script, else its English gloss when the gloss file
    has one and the encoder reads it, else nothing (a zero row, counted as skipped per script).

    Returns:
        (the texts, which rows are embedded, skipped per script, how many rows embed a gloss).
    """
    mask, skipped = readable_mask(entries, scripts)
    if not glosses or not skipped:
        return entries, mask, skipped, 0
    texts = list(entries)
    skipped = Counter()
    glossed = 0
    for i in np.flatnonzero(~mask).tolist():
        gloss = glosses.get(entries[i])
        if gloss is not None and entry_script(gloss) in scripts:
            texts[i] = gloss
            mask[i] = True
            glossed += 1
        else:
            skipped[entry_script(entries[i])] += 1
    return texts, mask, skipped, glossed


def gloss_file(vocab: Path) -> Path | None:
    """The gloss file beside a local vocabulary (``NAME.gloss.tsv``, written by ``curate vocab build``), if any."""
    path = default_gloss_path(Path(vocab))
    return path if path.is_file() else None


def _embed_chunk(encoder: Encoder, tokens: Any, batch_size: int) -> np.ndarray:
    """Embed the token rows of one chunk in length-sorted batches; rows back in input order."""
    import torch

    if tokens.shape[0] == 0:
        return np.zeros((0, encoder.dim), np.float32)
    lengths = tokens.argmax(dim=-1) if encoder.info.get("truncate_text") else torch.zeros(tokens.shape[0])
    order = torch.argsort(lengths, stable=True)
    out = np.zeros((tokens.shape[0], encoder.dim), np.float32)
    for lo in range(0, len(order), batch_size):
        idx = order[lo:lo + batch_size]
        out[idx.numpy()] = encoder.encode_tokens(tokens[idx])
    return out


def _cpu_threads_beside_tokenizer() -> int:
    return max(1, (os.cpu_count() or 1) - 1)


def embed_vocab(vocab: str | os.PathLike[str] | None = None, config: VocabEmbedConfig | None = None, *,
                encoder: Encoder | None = None, show_progress: bool = True, executor: Any = None,
                **settings: Any) -> dict[str, Any]:
    """Embed every vocabulary entry (see the module docstring); returns the run's metadata.

    Args:
        vocab: vocabulary file (one concept per line); overrides ``config.vocab``.
        config: the settings (see :class:`VocabEmbedConfig`): ``out`` (where to write the ``V×D``
            float16 ``.npy``, a copy of the cached matrix, and its ``.json`` sidecar; None leaves
            the result in the cache only), ``model``, ``template``, ``precision``, ``device``,
            ``batch_size``, ``scripts``, ``cache_dir`` (default: see :func:`cache_root`) and
            ``threads`` (default: all cores but one, which tokenizes).
        encoder: an already loaded encoder (overrides model/precision/device).
        show_progress: show a progress bar.
        executor: run the chunks as shards of a stage on this executor (``--executor ray``,
            or local worker processes); None embeds them here, tokenizing the next chunk in a
            thread while the model embeds the current one. Both give the same bytes.
        **settings: fields of :class:`VocabEmbedConfig`, instead of or over ``config``.

    Returns:
        Metadata: ``path`` (the cached matrix), ``out``, ``rows``, ``dim``, ``embedded``,
        ``skipped`` (per script), ``cached`` (True when nothing was computed), ``key``, ...
    """
    config = configure(VocabEmbedConfig, config, vocab=vocab, **settings)
    if config.out is None:
        return _embed_vocab(config, None, encoder, show_progress, executor)
    with writing(config.out.parent) as folder:  # a bucket: the matrix and its sidecar uploaded at the end
        return _embed_vocab(config, folder / config.out.name, encoder, show_progress, executor)


def _embed_vocab(config: VocabEmbedConfig, out: Path | None, encoder: Encoder | None, show_progress: bool,
                 executor: Any) -> dict[str, Any]:
    """:func:`embed_vocab` writing ``out``, a local path (the file's own, or in the staging folder of a bucket)."""
    vocab = local_file(config.vocab, "--vocab")
    assert vocab is not None
    batch_size, threads = config.batch_size, config.threads
    template, scripts, cache_dir = check_template(config.template), config.scripts, config.cache_dir
    model, precision, device = config.model, config.precision, config.device
    entries = read_vocab(vocab)
    if not entries:
        raise UserError(f"{config.vocab}: the vocabulary is empty")
    enc = encoder or load_encoder(model, precision=precision, device=device)
    allowed = resolve_scripts(scripts, enc)
    vhash = file_sha256(vocab)
    glosses_at = gloss_file(vocab)
    key_src = {"model": enc.fingerprint, "vocab": vhash, "template": template, "scripts": list(allowed)}
    if glosses_at is not None:  # keyed only when there is one: a vocabulary without glosses keeps its cache
        key_src["glosses"] = file_sha256(glosses_at)
    key = hashlib.sha256(json.dumps(key_src, sort_keys=True).encode()).hexdigest()[:24]
    folder = cache_root(cache_dir) / key
    final, meta_path = folder / "concepts.npy", folder / "meta.json"
    t0 = time.perf_counter()
    cached = final.is_file() and meta_path.is_file()
    if cached:
        meta = read_json(meta_path)
    else:
        if executor is None:
            meta = _compute(entries, enc, allowed, template, folder, batch_size, threads, show_progress, glosses_at)
        else:
            source = str(config.vocab) if config.vocab.is_remote else str(vocab.resolve())  # what every node reads
            meta = _compute_sharded(config, source, enc, allowed, folder, executor, _chunks_folder(out, key),
                                    glosses_at)
        meta.update({"model": enc.fingerprint, "model_spec": enc.spec, "precision": enc.precision,
                     "vocab_sha256": vhash, "vocab_path": str(config.vocab if config.vocab.is_remote else
                                                               vocab.resolve()),
                     "template": template, "scripts": list(allowed), "key": key,
                     "gloss_sha256": key_src.get("glosses")})
        write_json(meta_path, meta)
    result = {**meta, "path": str(final), "cached": cached, "cache_dir": str(folder),
              "seconds": round(time.perf_counter() - t0, 3)}
    if out is not None:
        copy_concepts(final, out)
        write_json(sidecar_path(out), {k: v for k, v in result.items() if k not in ("seconds", "cached")})
        result["out"] = str(config.out)
    return result


def _chunks_folder(out: Path | None, key: str) -> Path | None:
    """Where sharded chunks are written when the output is in a bucket: in its staging folder, so they reach the
    driver through the bucket from nodes that share nothing else (None: in the cache folder)."""
    if out is None or url_of(out.parent) is None:
        return None
    return out.parent / "_concepts" / key


def _compute(entries: list[str], enc: Encoder, allowed: tuple[str, ...], template: str | None, folder: Path,
             batch_size: int, threads: int | None, show_progress: bool,
             glosses_at: Path | None = None) -> dict[str, Any]:
    """Embed missing chunks into ``folder/parts`` and assemble ``folder/concepts.npy``."""
    import torch

    parts = folder / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    entries, mask, skipped, glossed = embed_texts(entries, allowed, load_glosses(glosses_at) if glosses_at else None)
    n_chunks = (len(entries) + CHUNK - 1) // CHUNK
    todo = [c for c in range(n_chunks) if not (parts / f"{c:06d}.npy").is_file()]
    previous = torch.get_num_threads()
    torch.set_num_threads(threads or min(previous, _cpu_threads_beside_tokenizer()))

    def tokenize(c: int) -> tuple[int, np.ndarray, Any]:
        return (c, *_tokenize_chunk(enc, entries, mask, template, c))

    pending = set(todo)
    done_rows = sum(min(CHUNK, len(entries) - c * CHUNK) for c in range(n_chunks) if c not in pending)
    try:
        with StageProgress("embed concepts", len(entries), unit="concepts", enabled=show_progress) as bar, \
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize") as pool:
            bar.advance(done_rows)
            ahead: Future | None = pool.submit(tokenize, todo[0]) if todo else None
            for k, c in enumerate(todo):
                assert ahead is not None
                _, idx, tokens = ahead.result()
                ahead = pool.submit(tokenize, todo[k + 1]) if k + 1 < len(todo) else None
                block = _chunk_block(enc, len(entries), c, idx, tokens, batch_size)
                with atomic_open(parts / f"{c:06d}.npy", "wb") as fh:
                    np.save(fh, block)
                bar.advance(block.shape[0])
    finally:
        torch.set_num_threads(previous)
    return _assemble(folder, parts, len(entries), enc.dim, n_chunks, mask, skipped, batch_size, glossed)


def _tokenize_chunk(enc: Encoder, entries: list[str], mask: np.ndarray, template: str | None,
                    c: int) -> tuple[np.ndarray, Any]:
    """Row indices and tokens of the readable entries of chunk ``c``."""
    import torch

    idx = np.flatnonzero(mask[c * CHUNK:(c + 1) * CHUNK]) + c * CHUNK
    texts = [entries[i] if template is None else template.replace("{}", entries[i]) for i in idx.tolist()]
    return idx, enc.tokenize(texts) if texts else torch.zeros((0, 1), dtype=torch.long)


def _chunk_block(enc: Encoder, n_entries: int, c: int, idx: np.ndarray, tokens: Any, batch_size: int) -> np.ndarray:
    """The float16 rows of chunk ``c`` (zero rows for unreadable entries)."""
    size = min(CHUNK, n_entries - c * CHUNK)
    block = np.zeros((size, enc.dim), np.float16)
    block[idx - c * CHUNK] = _embed_chunk(enc, tokens, batch_size).astype(np.float16)
    return block


def _assemble(folder: Path, parts: Path, n_entries: int, dim: int, n_chunks: int, mask: np.ndarray,
              skipped: Counter, batch_size: int, glossed: int = 0) -> dict[str, Any]:
    """Concatenate the chunk files into ``folder/concepts.npy``; return the metadata."""
    final = folder / "concepts.npy"
    # written, not memory-mapped: a full disk is an OSError (no space left) that removes the temporary file, where
    # pages of a mapping past the free space would kill the process (SIGBUS) and leave it behind
    with atomic_open(final, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float16)),
                                                  "fortran_order": False, "shape": (n_entries, dim)})
        for c in range(n_chunks):
            fh.write(np.ascontiguousarray(np.load(parts / f"{c:06d}.npy"), dtype=np.float16).data)
    shutil.rmtree(parts, ignore_errors=True)
    return {"rows": n_entries, "dim": dim, "embedded": int(mask.sum()), "embedded_by_gloss": glossed,
            "skipped": dict(sorted(skipped.items())), "skipped_total": int(sum(skipped.values())),
            "chunk": CHUNK, "batch_size": batch_size}


class Chunk(NamedTuple):
    """A vocabulary chunk shard's ``meta``: rows ``index·CHUNK`` to ``(index+1)·CHUNK``."""

    index: int


class Loaded(NamedTuple):
    """The encoder the driver loaded, as each worker loads it again: its spec, precision and device."""

    spec: str
    precision: str
    device: str


class ConceptChunkTask(ShardTask):
    """Embeds one chunk of :data:`CHUNK` vocabulary entries (``shard.meta`` a :class:`Chunk`) into ``parts/``."""

    stage = "vocab-embed"
    unit = "concepts"
    transient = ("_state",)

    def __init__(self, config: VocabEmbedConfig, *, vocab: str, encoder: Loaded, scripts: tuple[str, ...],
                 glosses: str | None = None) -> None:
        """Embed with ``config``'s template, batch size and threads; what the driver found at run time: ``vocab``,
        the vocabulary file every node reads (a local path or a bucket's URL), ``encoder``, the model it loaded
        (given to :func:`embed_vocab` or loaded from ``config``), ``scripts``, the scripts that model reads, and
        ``glosses``, the gloss file beside the vocabulary (None: none)."""
        self.config, self.vocab, self.encoder, self.scripts, self.glosses = config, vocab, encoder, scripts, glosses
        self.template = check_template(config.template)
        self._state: tuple[Encoder, list[str], np.ndarray] | None = None

    def settings(self) -> dict[str, Any]:
        """The chunks depend on the model, vocabulary, template, scripts and batch size."""
        return {"model": self.encoder.spec, "vocab": file_sha256(local_file(self.vocab)), "template": self.template,
                "glosses": file_sha256(Path(self.glosses)) if self.glosses else None,
                "scripts": list(self.scripts), "batch_size": self.config.batch_size,
                "precision": self.encoder.precision}

    def setup(self) -> None:
        """Load the encoder and the vocabulary once per worker."""
        if self._state is None:
            import torch

            enc = load_encoder(self.encoder.spec, precision=self.encoder.precision, device=self.encoder.device)
            if self.config.threads:
                torch.set_num_threads(self.config.threads)
            entries = read_vocab(local_file(self.vocab))  # a local path, or a bucket's object (a cached copy)
            glosses = load_glosses(Path(self.glosses)) if self.glosses else None
            texts, mask, _, _ = embed_texts(entries, self.scripts, glosses)
            self._state = (enc, texts, mask)

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Tokenize and embed one chunk."""
        self.setup()
        assert self._state is not None
        enc, entries, mask = self._state
        c = int(shard.meta.index)
        idx, tokens = _tokenize_chunk(enc, entries, mask, self.template, c)
        block = _chunk_block(enc, len(entries), c, idx, tokens, self.config.batch_size)
        path = work / "parts" / f"{c:06d}.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, block)
        stats = StageStats()
        stats.seen("vocabulary", block.shape[0])
        stats.kept("vocabulary", block.shape[0])  # every row is written: embedded, or zero when unreadable
        stats.extra["embedded"] = len(idx)
        ctx.progress(block.shape[0])
        return stats


def _compute_sharded(config: VocabEmbedConfig, vocab: str, enc: Encoder, allowed: tuple[str, ...], folder: Path,
                     executor: Any, chunks: Path | None = None, glosses_at: Path | None = None) -> dict[str, Any]:
    """Embed the chunks of ``vocab`` (the file every node reads) as shards of a stage on ``executor`` (into ``chunks``,
    default ``folder``), then assemble as :func:`_compute` does."""
    from curate.core.remote import drop_prefix
    from curate.executors import run_stage

    entries = read_vocab(local_file(vocab))
    _, mask, skipped, glossed = embed_texts(entries, allowed, load_glosses(glosses_at) if glosses_at else None)
    n_chunks = (len(entries) + CHUNK - 1) // CHUNK
    shards = [Shard(c, meta=Chunk(c), size=min(CHUNK, len(entries) - c * CHUNK)) for c in range(n_chunks)]
    task = ConceptChunkTask(config, vocab=vocab, encoder=Loaded(enc.spec, enc.precision, str(enc.device)),
                            scripts=allowed, glosses=str(glosses_at) if glosses_at else None)
    where = chunks or folder
    run_stage(task, shards, where, executor=executor, seed=0, desc="embed concepts")
    folder.mkdir(parents=True, exist_ok=True)
    meta = _assemble(folder, where / "parts", len(entries), enc.dim, n_chunks, mask, skipped, config.batch_size,
                     glossed)
    if chunks is not None:  # in a bucket's staging folder: the bucket's copy is done with too
        drop_prefix(chunks)
        shutil.rmtree(chunks, ignore_errors=True)
    shutil.rmtree(where / "_shards", ignore_errors=True)
    return meta
