"""The settings of each concept-balancing step, checked on construction.

A verb builds one of these from its flags and passes it down; Python callers may
build them too (or pass keyword settings to the stage functions, which build
one). Every ``__post_init__`` refuses a bad value with one line naming the flag,
before any model loads or any image is embedded.

The choices the CLI offers (``WEIGHTINGS``, ``MODES``, ``INDEXES``,
``SCRIPT_CHOICES``) are defined here once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from curate.core import validate as v
from curate.core.limits import DEFAULT_SHARD_SIZE, ImageReading, MAX_THREADS
from curate.core.errors import UserError
from curate.core.io import Location, locations
from curate.core.limits import ImageReading
from curate.core.settings import IMAGE_ROOT_HELP, SEED_HELP, setting
from curate.core.stats import Counts
from curate.models.specs import DEFAULT_MODEL, PRECISIONS


PathLike = str | os.PathLike[str]

DEFAULT_BATCH = 64  # images per forward pass
DEFAULT_TEXT_BATCH = 1024  # texts per forward pass
DEFAULT_TEXT_SHARD_SIZE = 50000  # records per shard of curate match
DEFAULT_TOP_K = 5
#: Bounds of flags whose cost grows with their value (checked before any work): concepts kept per record, IVF
#: lists, records searched exactly to measure recall, images and texts per forward pass.
MAX_TOP_K, MAX_NLIST, MAX_RECALL_SAMPLE, MAX_BATCH, MAX_TEXT_BATCH = 1000, 1 << 20, 1 << 20, 1 << 16, 1 << 20
DEFAULT_NLIST: int | None = None  # auto: see curate.balance.tag.auto_nlist()
DEFAULT_NPROBE = 16
DEFAULT_FRACTION = 0.5  # curate balance without --target/--fraction
WEIGHTINGS = ("mean", "max", "sum")
MODES = ("inverse", "metaclip", "worldwide")
INDEXES = ("flat", "ivf")
SCRIPT_CHOICES = ("auto", "latin", "latin,cjk", "all")
MATCHES = ("embeddings", "text")  # curate balance --match: nearest concept embeddings, or MetaCLIP's substring match
RULES = ("curate", "metaclip")  # --rules of text matching (curate.balance.matching.rules)
PER = ("record", "text")  # --per: a record's texts matched and counted together, or each text (MetaCLIP)
DEFAULT_T = 20000  # MetaCLIP 1's t at 400M pairs (--mode metaclip)
DEFAULT_T_WORLDWIDE = 170000  # MetaCLIP 2's t for English (--mode worldwide)


def check_template(template: str | None) -> str | None:
    """A template must hold ``{}`` exactly once (``a photo of {}``); empty or ``{}`` means none."""
    if template is None or template == "" or template == "{}":
        return None
    if template.count("{}") != 1:
        raise UserError(f"--template {template!r}: put {{}} exactly once where the concept goes, "
                        "e.g. 'a photo of {}'")
    return template


def _top_k() -> Any:
    """``--top-k``, declared once: tag, match and balance (whose tag or match step takes it) offer it."""
    return setting(None, help=f"Concepts per record (default: {DEFAULT_TOP_K} when tagging by concept embeddings, "
                              "every match when matching text).")


def _model(model: str, precision: str, threads: int | None) -> None:
    if not model:
        raise UserError("--model: give an open_clip model spec, e.g. ViT-B-32-quickgelu:metaclip_400m")
    v.one_of("--precision", precision, PRECISIONS)
    v.at_least("--threads", threads, 1)


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """The open_clip model of the verbs that run one (``embed``, ``vocab embed``, ``balance``)."""

    model: str = setting(DEFAULT_MODEL, metavar="SPEC",
                         help="open_clip model: ARCH:PRETRAINED (hub tag), ARCH:/path/checkpoint.{pt,safetensors} "
                              "(ARCH an open_clip name or an ARCH.json beside the file), local-dir:FOLDER or "
                              "hf-hub:ORG/REPO.")
    precision: str = setting("fp32", choices=PRECISIONS, help="Model precision; fp16 needs a GPU, bf16 is about 2× "
                                                              "faster than fp32 on recent CPUs.")
    device: str = setting("auto", help="auto, cpu, cuda, cuda:N or mps.")
    threads: int | None = setting(None, help="torch CPU threads per worker (default: cores ÷ workers; while "
                                             "embedding the vocabulary, cores − 1 beside the tokenizer thread).")


@dataclass(frozen=True, kw_only=True)
class EmbedConfig(ImageReading, ModelSettings):
    """Settings of ``curate embed`` (see :func:`curate.balance.embed.embed`); the image limits:
    :class:`~curate.core.limits.ImageReading`."""

    out: Location | PathLike = setting(help="Output folder.")
    batch_size: int = setting(DEFAULT_BATCH, help="Images per forward pass.")
    shard_size: int = setting(DEFAULT_SHARD_SIZE, help="Records per shard (one .npy each).")
    decode_threads: int | None = setting(None, help="Threads decoding images while the model runs (default: cores, "
                                                    "at most 8).")
    seed: int = setting(0, help=SEED_HELP, cli=False)
    image_root: Location | PathLike | None = setting(None, flag="--image-root", metavar="DIR", help=IMAGE_ROOT_HELP)

    def __post_init__(self) -> None:
        locations(self, {"out": "--out", "image_root": "--image-root"})
        v.out_dir("--out", self.out)
        v.in_dir("--image-root", self.image_root)
        self.check_image_reading()
        _model(self.model, self.precision, self.threads)
        v.at_least("--batch-size", self.batch_size, 1)
        v.at_most("--batch-size", self.batch_size, MAX_BATCH, "images decoded and held at once")
        v.at_least("--shard-size", self.shard_size, 1)
        v.at_least("--decode-threads", self.decode_threads, 1)
        v.at_most("--decode-threads", self.decode_threads, MAX_THREADS)


@dataclass(frozen=True, kw_only=True)
class VocabEmbedConfig(ModelSettings):
    """Settings of ``curate vocab embed`` (see :func:`curate.balance.vocab.embed.embed_vocab`).

    The vocabulary is read and checked here (it must exist and hold at least one
    entry), so an unusable one is refused before anything is embedded.
    """

    vocab: Location | PathLike = setting(help="Vocabulary file (one concept per line).")
    out: Location | PathLike | None = setting(None, help="Output .npy (V×D float16, vocabulary line order); a .json "
                                                         "beside it says what it holds.")
    template: str | None = setting(None, metavar="TEXT", help="Prompt template with {} for the concept, e.g. 'a photo "
                                                              "of {}' (default: the bare concept).")
    batch_size: int = setting(DEFAULT_TEXT_BATCH, help="Texts per forward pass.")
    scripts: str = setting("auto", choices=SCRIPT_CHOICES,
                           help="Entries to embed by script; auto = what the tokenizer reads (CLIP's BPE: latin only). "
                                "The others get zero rows and are never tagged.")
    cache_dir: Location | PathLike | None = setting(None, help="Concept embedding cache (default: "
                                                               "$CURATE_CACHE/concepts or ~/.cache/curate/concepts).")

    def __post_init__(self) -> None:
        locations(self, {"vocab": "--vocab", "out": "--out"}, local={"cache_dir": "--cache-dir"})
        v.in_file("--vocab", self.vocab)
        from curate.balance.vocab.files import load_vocab  # its imports only when a vocabulary is named
        from curate.core.remote import local_file

        if not v.later(self.vocab) and not load_vocab(local_file(self.vocab, "--vocab")):  # type: ignore[arg-type]
            raise UserError(f"--vocab {self.vocab}: the vocabulary is empty; give a file with one concept per line")
        v.out_file("--out", self.out)
        v.cache_dir("--cache-dir", self.cache_dir)
        _model(self.model, self.precision, self.threads)
        v.at_least("--batch-size", self.batch_size, 1)
        v.at_most("--batch-size", self.batch_size, MAX_TEXT_BATCH, "texts tokenized and held at once")
        v.one_of("--scripts", self.scripts, SCRIPT_CHOICES)
        check_template(self.template)


@dataclass(frozen=True, kw_only=True)
class TagConfig:
    """Settings of ``curate tag`` (see :func:`curate.balance.tag.tag`)."""

    out: Location | PathLike = setting(help="Output folder.")
    top_k: int | None = _top_k()
    index: str = setting("flat", choices=INDEXES,
                         help="flat = exact inner product; ivf = FAISS IVF (prints recall@K against exact search).")
    nlist: int | None = setting(DEFAULT_NLIST, help="IVF lists (default: 4·√V rounded to a power of 2, e.g. 2,048 "
                                                    "for 500K concepts).")
    nprobe: int = setting(DEFAULT_NPROBE, help="IVF lists searched per query.")
    recall_sample: int = setting(1000, help="Embeddings (seeded sample) used to measure IVF recall@K.")
    id_column: str | None = setting(None, help="Id column of clip-retrieval metadata (default: id, key, image_path "
                                               "or url).")
    seed: int = setting(0, help=SEED_HELP, cli=False)

    def __post_init__(self) -> None:
        locations(self, {"out": "--out"})
        v.out_dir("--out", self.out)
        if self.top_k is None:
            object.__setattr__(self, "top_k", DEFAULT_TOP_K)
        v.at_least("--top-k", self.top_k, 1)
        v.at_most("--top-k", self.top_k, MAX_TOP_K, "concepts kept per record")
        v.one_of("--index", self.index, INDEXES)
        v.at_least("--nlist", self.nlist, 1)
        v.at_most("--nlist", self.nlist, MAX_NLIST, "IVF lists, each trained and searched")
        v.at_least("--nprobe", self.nprobe, 1)
        v.at_most("--nprobe", self.nprobe, MAX_NLIST)
        v.at_least("--recall-sample", self.recall_sample, 1)
        v.at_most("--recall-sample", self.recall_sample, MAX_RECALL_SAMPLE, "exact searches to measure recall")


@dataclass(frozen=True, kw_only=True)
class ResampleConfig:
    """Settings of ``curate resample`` (see :func:`curate.balance.resample.resample`)."""

    out: Location | PathLike = setting(help="Output folder.")
    target: int | None = setting(None, help="Records to draw (with replacement beyond the pool).")
    fraction: float | None = setting(None, help="Target as a fraction of the tagged records (>1: copies).")
    seed: int = setting(0, help="Seed of the draw.")
    mode: str = setting("inverse", choices=MODES,
                        help="inverse = weights from inverse concept frequency; metaclip = keep with p = t / "
                             "max(count, t); worldwide = MetaCLIP 2's, a t per language set from English's tail share.")
    t: int | None = setting(None, help="MetaCLIP's threshold (default 20,000 with --mode metaclip; with --mode "
                                       "worldwide English's, default 170,000, which sets every language's).")
    tail_share: float | None = setting(None, help="--mode worldwide: every language's tail share, instead of "
                                                  "English's at --t.")
    per: str | None = setting(None, choices=PER,
                              help="On tags with a row per text (match --per text): count per text and draw "
                                   "image-text pairs as MetaCLIP 2 does (default in MetaCLIP's modes), or merge each "
                                   "record's texts.")
    weighting: str = setting("mean", choices=WEIGHTINGS,
                             help="How a record's K inverse frequencies combine into its weight.")
    temperature: float = setting(1.0, help="Exponent τ in freq^-τ: 1 fully inverse, 0 uniform.")
    use_k: int | None = setting(None, help="Use only each record's J best tags for frequencies and weights "
                                           "(default: all K).")
    vocab: Location | PathLike | None = setting(None, help="Vocabulary, to name the top concepts in stats.json.")
    records: tuple[Location | PathLike, ...] | list[PathLike] | None = setting(
        None, cli=False, help="Input record files/folders; the selected records are written to OUT/records/ in "
                              "their layout. Repeatable.")
    plot: bool = setting(True, cli=False, help="Draw OUT/balance.png.")
    pass_text_only: bool = setting(False, cli=False, help="Write the records without images to OUT/records/ too, "
                                                          "untouched (curate balance: they have no image to tag).")
    image_root: Location | PathLike | None = setting(None, flag="--image-root", metavar="DIR", help=IMAGE_ROOT_HELP)

    def __post_init__(self) -> None:
        locations(self, {"out": "--out", "vocab": "--vocab", "records": "--records", "image_root": "--image-root"})
        v.out_dir("--out", self.out)
        v.in_dir("--image-root", self.image_root)
        for path in self.records or ():
            v.in_path("--records", path)
        v.one_of("--mode", self.mode, MODES)
        v.one_of("--weighting", self.weighting, WEIGHTINGS)
        if self.mode == "inverse":
            if (self.target is None) == (self.fraction is None):
                raise UserError("give exactly one of --target N or --fraction F")
            v.at_least("--target", self.target, 1)
            v.above("--fraction", self.fraction, 0.0)
            v.finite("--temperature", self.temperature)
            v.at_least("--temperature", self.temperature, 0)
        elif self.target is not None or self.fraction is not None:
            raise UserError(f"--mode {self.mode} sets the size itself through --t; drop --target/--fraction")
        if self.t is None:  # MetaCLIP 1's t, or MetaCLIP 2's t for English
            object.__setattr__(self, "t", DEFAULT_T_WORLDWIDE if self.mode == "worldwide" else DEFAULT_T)
        v.at_least("--t", self.t, 1)
        if self.per is not None:
            v.one_of("--per", self.per, PER)
        if self.tail_share is not None:
            if self.mode != "worldwide":
                raise UserError("--tail-share sets every language's t in --mode worldwide; use --t otherwise")
            v.within("--tail-share", self.tail_share, 0.0, 1.0)
            v.above("--tail-share", self.tail_share, 0.0)
        v.at_least("--use-k", self.use_k, 1)
        v.in_file("--vocab", self.vocab)


@dataclass(frozen=True, kw_only=True)
class MatchConfig:
    """Settings of ``curate match`` (see :func:`curate.balance.match.match`).

    The records and the vocabulary are the step's inputs, passed beside the config
    (as ``tag`` takes its embeddings and concepts).
    """

    out: Location | PathLike = setting(help="Output folder.")
    text_field: str | None = setting(None, help="Match this raw field (e.g. alt_text, or a caption beside a "
                                                "conversation) instead of the assistant messages; a row with no "
                                                "conversation, caption, text, problem or question is read as a caption "
                                                "record from this field (resample --records then finds it too).")
    rules: str = setting("curate", choices=RULES,
                         help="metaclip = MetaCLIP 2's rules exactly (case as written, entries as given, counted per "
                              "text); curate folds case and strips entries (docs/metaclip.md).")
    case_sensitive: bool = setting(False, help="curate's rules but case compared as written.")
    per: str | None = setting(None, choices=PER,
                              help="Match and count each text of a record (its captions or turns) on its own, as "
                                   "MetaCLIP does, or the record's texts joined (default: text with --rules metaclip, "
                                   "else record).")
    lang_id: bool = setting(False, help="Identify each text's language (py3langid, offline) and count per language, "
                                        "for --mode worldwide (implied by --vocab LANG=FILE).")
    top_k: int | None = _top_k()
    shard_size: int = setting(DEFAULT_TEXT_SHARD_SIZE, help="Records per shard.")
    seed: int = setting(0, help=SEED_HELP, cli=False)
    image_root: Location | PathLike | None = setting(None, cli=False, help=IMAGE_ROOT_HELP)

    def __post_init__(self) -> None:
        locations(self, {"out": "--out", "image_root": "--image-root"})
        v.out_dir("--out", self.out)
        v.in_dir("--image-root", self.image_root)
        v.at_least("--top-k", self.top_k, 1)
        v.at_most("--top-k", self.top_k, MAX_TOP_K, "matches kept per record")
        v.at_least("--shard-size", self.shard_size, 1)
        v.one_of("--rules", self.rules, RULES)
        if self.per is not None:
            v.one_of("--per", self.per, PER)
        else:  # MetaCLIP counts per text (per caption); curate's rules by default per record
            object.__setattr__(self, "per", "text" if self.rules == "metaclip" else "record")
        if self.text_field is not None and not self.text_field.strip():
            raise UserError("--text-field: give a field name (e.g. caption), or leave it out to match the "
                            "assistant messages")


class _FlatOrSteps(type):
    """``BalanceConfig(out=..., vocab=...)`` is :meth:`BalanceConfig.build`; with ``embed=`` it holds step configs."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if not args and "embed" not in kwargs:
            return cls.build(**kwargs)  # type: ignore[attr-defined]
        return super().__call__(*args, **kwargs)


#: The step configs ``curate balance`` nests, by the name of its field holding each. A flat setting of
#: :meth:`BalanceConfig.build` goes to every one of them that declares it (``model`` to embed and vocab, ``seed``
#: to embed, tag and resample...); ``text`` only with ``match="text"``.
STEPS: dict[str, type] = {"embed": EmbedConfig, "vocab": VocabEmbedConfig, "tag": TagConfig,
                          "resample": ResampleConfig, "text": MatchConfig}
#: Fields the flat settings never set: each is given by :meth:`BalanceConfig.build` itself (the output folder,
#: the vocabulary, the vocabulary's text batch) or belongs to another step (``per`` is the text match's).
_GIVEN = {"embed": {"out"}, "vocab": {"out", "vocab", "batch_size"}, "tag": {"out"},
          "resample": {"out", "vocab", "per"}, "text": {"out"}}


@dataclass(frozen=True)
class BalanceConfig(metaclass=_FlatOrSteps):
    """Settings of ``curate balance``: one config per step it runs (:data:`STEPS`), all in one folder;
    ``BalanceConfig(out=..., vocab=..., model=..., fraction=...)`` takes the flat settings of :meth:`build`."""

    embed: EmbedConfig
    vocab: VocabEmbedConfig
    tag: TagConfig
    resample: ResampleConfig
    write_records: bool = True
    match: str = setting("embeddings", choices=MATCHES,
                         help="How records get their concepts: nearest concept embeddings, or MetaCLIP's substring "
                              "matching of each record's text against --vocab (no model; no embeddings/ or "
                              "concepts.npy; the steps of curate match).")
    text: MatchConfig | None = None  # the text match's settings, when match == "text"
    vocabularies: tuple[tuple[str, str], ...] | None = None  # (language, file) with --match text, one per language

    def __post_init__(self) -> None:
        v.one_of("--match", self.match, MATCHES)
        if self.match == "text" and self.text is None:
            raise UserError("--match text: no text-match settings (build the config with BalanceConfig.build)")
        if self.vocabularies and self.match != "text":
            raise UserError("--vocab LANG=FILE: a vocabulary per language is for --match text; "
                            "give one vocabulary file to embed")

    @property
    def out(self) -> Location:
        """The run's output folder."""
        return Location(self.embed.out)

    @property
    def text_vocab(self) -> PathLike | dict[str, str]:
        """What text matching reads: the vocabulary file, or ``{language: file}``."""
        return dict(self.vocabularies) if self.vocabularies else self.vocab.vocab

    @classmethod
    def build(cls, *, out: PathLike, vocab: PathLike | dict[str, PathLike], write_records: bool = True,
              text_batch_size: int = DEFAULT_TEXT_BATCH, match: str = "embeddings", **settings: Any) -> BalanceConfig:
        """The step configs (:data:`STEPS`) from flat settings (the flags of ``curate balance``).

        Each setting goes to every step config declaring it; ``batch_size`` is the image batch,
        ``text_batch_size`` the vocabulary's; without ``target``/``fraction`` the inverse mode keeps
        :data:`DEFAULT_FRACTION`. With ``match="text"`` the records' text is matched against the vocabulary
        (``text_field``, ``rules``, ``case_sensitive``, ``per``, ``lang_id``; ``top_k`` caps the matches kept,
        default every one) instead of embedding images and concepts; ``vocab`` may then be ``{language: file}``,
        one vocabulary per language.

        Raises:
            UserError: a bad setting (named by its flag).
            TypeError: a setting no step declares.
        """
        v.out_dir("--out", out)
        v.one_of("--match", match, MATCHES)
        vocabularies = None
        if isinstance(vocab, dict):
            if match != "text":
                raise UserError("--vocab LANG=FILE: a vocabulary per language is for --match text; "
                                "give one vocabulary file to embed")
            if not vocab:
                raise UserError("--vocab: give a vocabulary file, or LANG=FILE per language")
            vocabularies = tuple((str(k), str(vocab[k])) for k in sorted(vocab))
            vocab = vocabularies[0][1]  # checked like any vocabulary; each is read again by the match
        if settings.get("mode", "inverse") == "inverse" and settings.get("target") is None \
                and settings.get("fraction") is None:
            settings["fraction"] = DEFAULT_FRACTION
        if settings.get("shard_size") is None:  # the text match shards as embed does, not as curate match
            settings["shard_size"] = DEFAULT_SHARD_SIZE
        parts: dict[str, dict[str, Any]] = {}
        for name, kind in STEPS.items():
            fields = set(kind.__dataclass_fields__) - _GIVEN[name]
            parts[name] = {k: val for k, val in settings.items() if k in fields}
        unknown = sorted(set(settings) - {k for part in parts.values() for k in part})
        if unknown:
            raise TypeError(f"BalanceConfig.build: unknown setting(s) {', '.join(unknown)}")
        text = None
        if match == "text":
            text = MatchConfig(out=out, **{**parts["text"], "lang_id": bool(parts["text"].get("lang_id"))
                                           or vocabularies is not None})
        # vocabulary first: an empty or unreadable vocabulary is refused before anything else is checked
        vocab_cfg = VocabEmbedConfig(vocab=vocab, out=Location(out) / "concepts.npy", batch_size=text_batch_size,
                                     **parts["vocab"])
        return cls(embed=EmbedConfig(out=out, **parts["embed"]), vocab=vocab_cfg,
                   tag=TagConfig(out=out, **parts["tag"]),
                   resample=ResampleConfig(out=out, vocab=None if vocabularies else vocab, **parts["resample"]),
                   write_records=write_records, match=match, text=text, vocabularies=vocabularies)


__all__ = ["BalanceConfig", "EmbedConfig", "MatchConfig", "ResampleConfig", "TagConfig", "VocabEmbedConfig"]


# Typed results of the balancing steps (see :mod:`curate.core.stats`).
@dataclass(frozen=True)
class EmbedResult(Counts):
    """``curate embed``: records and images embedded, the embedding size, the shards."""

    records_embedded: int = 0
    images_embedded: int = 0
    dim: int = 0
    shards: int = 0


@dataclass(frozen=True)
class VocabEmbedResult:
    """``curate vocab embed``: concepts embedded, skipped per script, whether the cache answered."""

    rows: int = 0
    embedded: int = 0
    dim: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    cached: bool = False
    cache_dir: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class TagResult(Counts):
    """``curate tag``: records tagged, usable concepts, the embeddings read."""

    records_tagged: int = 0
    concepts_embedded: int = 0
    embedding_files: int = 0
    layout: str = ""


@dataclass(frozen=True)
class BalanceReport:
    """Concept coverage and head share before and after resampling (:func:`curate.balance.report.compare`)."""

    concepts_covered_before: int = 0
    concepts_covered_after: int = 0
    head_share_before: float = 0.0
    head_share_after: float = 0.0
    normalized_entropy_before: float = 0.0
    normalized_entropy_after: float = 0.0


@dataclass(frozen=True)
class ResampleResult(Counts):
    """``curate resample``: records selected from the tagged pool, copies, balance before/after."""

    pool: int = 0
    records_selected: int = 0
    copies_total: int = 0
    with_replacement: bool = False
    balance: BalanceReport = field(default_factory=BalanceReport)
    records_written: dict[str, Any] | None = None
    languages: dict[str, Any] | None = None


@dataclass(frozen=True)
class BalanceResult(Counts):
    """``curate balance``: the figures of every step in one folder."""

    records_embedded: int = 0
    pool: int = 0
    records_selected: int = 0
    copies_total: int = 0
    with_replacement: bool = False
    balance: BalanceReport = field(default_factory=BalanceReport)
    records_written: dict[str, Any] | None = None
    languages: dict[str, Any] | None = None
    text_only: int = 0  #: records without images, written to records/ untouched (not selected, not dropped)
    records_out: int = 0  #: records_selected + text_only


def language_lines(languages: dict[str, Any] | None, most: int = 8) -> list[str]:
    """What ``resample``/``balance`` print of the per-language figures (MetaCLIP's modes on tags with languages)."""
    if not languages:
        return []
    lines = []
    if "tail_share" in languages:
        lines.append(f"tail share {languages['tail_share']:.4f} in every language ({languages['tail_share_from']})")
    for lang, f in list(languages["per_language"].items())[:most]:
        lines.append(f"  {lang}: t={f['t'] if f['t'] is not None else '-'}  kept {f['kept']:,} of "
                     f"{f['candidates']:,} ({f['kept_share']:.3f}); share {f['pool_share']:.3f} → "
                     f"{f['selection_share']:.3f}")
    return lines


def records_lines(written: dict[str, Any] | None, out: str | os.PathLike[str]) -> list[str]:
    """What ``resample``/``balance`` print of ``OUT/records/``: the records written, and a warning when selected
    ids were not in the record files given (other files, or ids read otherwise than when they were tagged)."""
    if written is None:
        return []
    lines = [f"records: {out}/records/ ({written['records']:,} written)"]
    missing = int(written.get("selected_not_found", 0))
    if missing:
        lines.append(f"[yellow]{missing:,} selected ids are in none of the record files given: give the records "
                     "that were tagged (ids read by this curate version; see stats.json records_written)[/yellow]")
    return lines


def wall_timings(stats: Any, started: float) -> dict[str, float]:
    """A step's ``timings`` for ``stats.json``: its stats' timings (by step) and the wall time since ``started``
    (a :func:`time.perf_counter` reading)."""
    import time

    return {**stats.to_dict()["timings"], "wall": round(time.perf_counter() - started, 3)}
