"""The settings of ``curate recaption``, checked on construction (before any model loads).

:class:`RecaptionConfig` parses ``--langs`` and ``--mix``, resolves the prompts and
checks the backend and sampling settings; :func:`curate.recaption.stage.recaption`
takes it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from curate.core import validate as v
from curate.core.errors import UserError
from curate.core.io import Location, locations
from curate.core.limits import ImageReading
from curate.core.records import IMAGE_TOKEN
from curate.core.settings import setting
from curate.core.stats import Counts, from_stats
from curate.generate.checks import check_backend, check_sampling
from curate.generate.settings import (
    BackendSettings, backend_of, max_new_tokens_setting, temperature_setting, top_p_setting,
)
from curate.recaption.checks import LANGS, CaptionRules


PathLike = str | os.PathLike[str]

#: Default prompt per language (``--prompt-en``, ``--prompt-zh``); ``<image>\n`` is put in front.
DEFAULT_PROMPTS = {
    "en": ("Write a detailed caption for this image in English. Describe the main subjects, their attributes "
           "and actions, the setting and background, and any text visible in the image. Answer with the "
           "caption only, as plain text."),
    "zh": "请用中文为这张图片写一段详细的描述，说明画面中的主要对象及其特征和动作、场景与背景，以及图中可见的文字。只输出描述本身，使用纯文本。",
}
#: Names of common languages, for the default prompt of a language other than English and Chinese.
LANGUAGE_NAMES = {
    "ar": "Arabic", "bn": "Bengali", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "es": "Spanish",
    "fa": "Persian", "fi": "Finnish", "fr": "French", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian",
    "id": "Indonesian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "ms": "Malay", "nl": "Dutch",
    "no": "Norwegian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish",
    "sw": "Swahili", "ta": "Tamil", "th": "Thai", "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu",
    "vi": "Vietnamese",
}
#: The prompt of a language other than English and Chinese (``{language}``: its name, or its code).
OTHER_PROMPT = ("Write a detailed caption for this image in {language}. Describe the main subjects, their attributes "
                "and actions, the setting and background, and any text visible in the image. Answer with the "
                "caption only, as plain text, in {language}.")


def _check_codes(flag: str, text: str, langs: list[str]) -> None:
    """Every language is ``en``, ``zh`` or a code py3langid identifies (the check of a caption's language)."""
    unknown = [lang for lang in langs if lang not in LANGS]
    if not unknown:
        return
    from curate.recaption.checks import known_languages

    bad = [lang for lang in unknown if lang not in known_languages()]
    if bad:
        raise UserError(f"{flag} {text!r}: unknown language code {bad[0]!r}; give ISO 639-1 codes that py3langid "
                        "identifies (en, zh, fr, de, es, ja, ko, ru, ar, hi...)")


def parse_langs(text: str | None) -> list[str]:
    """``"en,zh"`` → ``["en", "zh"]`` (None → both); any code py3langid identifies (``fr``, ``ja``...) is accepted;
    unknown or repeated languages are a UserError."""
    if text is None:
        return list(LANGS)
    langs = [p.strip().lower() for p in text.split(",") if p.strip()]
    if not langs or len(set(langs)) != len(langs):
        raise UserError(f"--langs {text!r}: give comma-separated language codes (en, zh, fr...) without repeats")
    _check_codes("--langs", text, langs)
    return langs


def parse_mix(text: str | None) -> dict[str, float] | None:
    """``"en=0.76,zh=0.24"`` → ``{"en": 0.76, "zh": 0.24}`` (normalised to sum 1); None stays None."""
    if text is None:
        return None
    mix: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        lang, sep, value = part.partition("=")
        lang = lang.strip().lower()
        try:
            weight = float(value)
        except ValueError:
            weight = float("nan")
        if not sep or not lang or lang in mix or not 0 <= weight < float("inf"):
            raise UserError(f"--mix {text!r}: expected LANG=WEIGHT pairs such as en=0.76,zh=0.24 "
                            "(language codes, finite weights >= 0)")
        mix[lang] = weight
    _check_codes("--mix", text, list(mix))
    total = sum(mix.values())
    if not mix or total <= 0:
        raise UserError(f"--mix {text!r}: the weights must not all be zero")
    return {lang: w / total for lang, w in mix.items()}


def resolve_prompts(langs: list[str], prompts: dict[str, str | None] | None) -> dict[str, str]:
    """The prompt of every language: given ones, else :data:`DEFAULT_PROMPTS` (:data:`OTHER_PROMPT` for another
    language); checked for one ``<image>`` at most."""
    out = {}
    for lang in langs:
        text = (prompts or {}).get(lang)
        if text is None:
            text = DEFAULT_PROMPTS.get(lang) or OTHER_PROMPT.format(
                language=LANGUAGE_NAMES.get(lang, f"the language whose ISO 639 code is '{lang}'"))
        if not text.strip():
            raise UserError(f"--prompt-{lang}: the prompt is empty")
        if text.count(IMAGE_TOKEN) > 1:
            raise UserError(f"--prompt-{lang}: a caption prompt holds at most one {IMAGE_TOKEN} (one image is captioned)")
        out[lang] = text
    return out


def _mix_text(mix: Mapping[str, float] | str | None) -> str | None:
    if mix is None or isinstance(mix, str):
        return mix
    return ",".join(f"{k}={w}" for k, w in mix.items())


@dataclass(frozen=True)
class RecaptionConfig(ImageReading):
    """Settings of ``curate recaption`` (see :func:`curate.recaption.stage.recaption`).

    Attributes:
        out: Output folder.
        backend: :func:`curate.generate.make_backend` keyword arguments (``model``, ``endpoint``...), or the
            :class:`BackendSettings` of the flags (kept as their keyword arguments).
        temperature, top_p, max_new_tokens: How captions are sampled (the seed is ``seed``).
        langs: Languages (``["en", "zh"]`` or ``"en,zh"``; default both); a list once built.
        mix: One caption per record, language drawn with these weights (``{"en": 0.76, "zh": 0.24}``
            or ``"en=0.76,zh=0.24"``); normalised once built; its languages must match ``langs``.
        prompt_en, prompt_zh: The prompt of each language (default: :data:`DEFAULT_PROMPTS`).
        prompts: The prompt of each language asked (set once built).
        rules: Caption check thresholds.
        seed: Seed of the sampling and of the ``mix`` draw.
        shard_size: Records per shard.
        image_root: Folder (or bucket prefix) relative image paths start from (default: each input file's own).
        max_image_bytes, max_image_pixels, max_images: What one record may cost in images
            (:class:`curate.core.limits.ImageReading`).
    """

    out: Location | PathLike = setting(help="Output folder.")
    backend: BackendSettings | Mapping[str, Any] = field(default_factory=dict)
    temperature: float = temperature_setting(0.7)
    top_p: float = top_p_setting(0.9)
    max_new_tokens: int = max_new_tokens_setting(512)
    langs: list[str] | tuple[str, ...] | str | None = setting(
        None, metavar="LANGS",
        help="Caption every image in each of these languages (comma-separated ISO 639-1 codes: en, zh, or any "
             "py3langid identifies, e.g. fr, de, ja; a caption in another language than asked is dropped as "
             "'language').  [default: en,zh]")
    mix: Mapping[str, float] | str | None = setting(
        None, metavar="LANG=W,...",
        help="Instead: one caption per image, its language drawn with these weights (seeded, keyed on the "
             "record id), e.g. en=0.76,zh=0.24 as LLaVA-OneVision-1.5's 65M/20M split.")
    prompt_en: str = setting(DEFAULT_PROMPTS["en"], metavar="TEXT",
                             help="English prompt ('<image>\\n' is put in front unless it holds <image>).")
    prompt_zh: str = setting(DEFAULT_PROMPTS["zh"], metavar="TEXT",
                             help="Chinese prompt ('<image>\\n' is put in front unless it holds <image>).")
    other_prompts: Mapping[str, str] | None = setting(
        None, cli=False, help="The prompt of each language other than en and zh, {code: text} (default: "
                              "OTHER_PROMPT naming the language).")
    rules: CaptionRules | None = None
    shard_size: int = setting(1000, help="Records per shard.")
    seed: int = setting(0, cli=False, help="Seed of the sampling and of the --mix draw (the verb's --seed).")
    image_root: Location | PathLike | None = setting(
        None, cli=False, help="Folder (or bucket prefix) relative image paths start from (default: each input "
                              "file's own; the verb's --image-root).")
    prompts: Mapping[str, str] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        locations(self, {"out": "--out", "image_root": "--image-root"})
        v.out_dir("--out", self.out)
        v.in_dir("--image-root", self.image_root)
        self.check_image_reading()
        v.at_least("--shard-size", self.shard_size, 1)
        given = self.langs
        langs = parse_langs(given if isinstance(given, str) or given is None else ",".join(given))
        weights = parse_mix(_mix_text(self.mix))
        if weights is not None:
            if given is not None and set(weights) != set(langs):
                raise UserError(f"--mix names {', '.join(weights)} but --langs names {', '.join(langs)}; "
                                "give the same languages (or only --mix)")
            langs = list(weights)
        object.__setattr__(self, "langs", langs)
        object.__setattr__(self, "mix", weights)
        object.__setattr__(self, "prompts", resolve_prompts(langs, {**dict(self.other_prompts or {}),
                                                                          "en": self.prompt_en, "zh": self.prompt_zh}))
        object.__setattr__(self, "backend", backend_of(self.backend))
        check_backend(self.backend)
        check_sampling({"temperature": self.temperature, "top_p": self.top_p, "max_new_tokens": self.max_new_tokens})


# Typed results of ``curate recaption`` (see :mod:`curate.core.stats`).
@dataclass(frozen=True)
class CaptionCounts:
    """Captions asked, kept, retried and failed by reason (one language, or all)."""

    images: int = 0
    kept: int = 0
    retried: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    mean_chars: float | None = None


@dataclass(frozen=True)
class RecaptionResult(Counts):
    """``curate recaption``: records out, captions overall and per language."""

    records_out: int = 0
    captions: CaptionCounts = field(default_factory=CaptionCounts)
    per_lang: dict[str, CaptionCounts] = field(default_factory=dict)

    def __post_init__(self) -> None:
        langs = {k: v if isinstance(v, CaptionCounts) else from_stats(CaptionCounts, v) for k, v in self.per_lang.items()}
        object.__setattr__(self, "per_lang", langs)
