"""Caption checks for ``curate recaption``: artefact cleaning, then the rules a caption must pass.

Everything here is a pure function of the text. :func:`check_caption` runs, in order:

1. **cleaning** (:func:`clean_caption`): ``<think>…</think>`` blocks (an unclosed
   ``<think>`` drops the rest; text before a lone ``</think>`` is dropped);
   ``<answer>``/``<caption>``/``<description>`` tags; Markdown code fences;
   chat preambles in English and Chinese ("Sure! Here is a detailed caption of the
   image:", "Caption:", "好的，以下是这张图片的描述：", "图片描述：", as a line of
   its own or before the text), Markdown headings and ``**bold**``/``__bold__``
   markers; closing offers ("Let me know if…", "希望这个描述对你有帮助");
   surrounding quotes (``"…"``, ``'…'``, ``“…”``, ``「…」``, ``『…』``, ``«…»``);
   runs of spaces, and more than one blank line.
2. **truncated** (only for an answer that hit ``max_new_tokens``): with the
   ``trim`` policy (default) the caption is cut after its last complete sentence
   (``. ! ?`` followed by a space, or ``。！？``); nothing complete left → ``truncated``.
   ``drop`` rejects every truncated answer; ``keep`` keeps it as it is.
3. **empty**: no letter or ideograph left.
4. **garbled**: a U+FFFD replacement character or a control character (other than
   tab and newline).
5. **refusal**: the caption *starts* with an apology or a refusal ("I'm sorry", "Sorry",
   "Apologies", "I apologize", "Unfortunately, I", "I'm unable", "I'm not able", "I can't",
   "I cannot", "I won't", "I don't have"; "抱歉", "很抱歉", "对不起", "不好意思", "我无法",
   "我不能", "我没有办法", "我看不到"), or its first :attr:`CaptionRules.refusal_window`
   (200) characters hold a model disclaimer anywhere: "as an AI", "as a language model",
   "I'm unable to see/view/access/describe/…", "I can't describe/provide/help/identify…",
   "there is no image", "no image was provided", "作为(一个)人工智能/AI/语言模型",
   "无法查看/看到/识别…(这张)图片", "我无法/不能/没有办法回答/描述/查看…", "没有提供图片",
   "看不到图片". A caption that *quotes* an apology ("a card that says 'I'm sorry'") passes.
6. **repetition** (tokens: lower-cased Latin or other-script words, digit runs, and
   every Han, kana or Hangul character on its own): any character other than a digit
   or a space repeated :attr:`max_char_run` (8) times in a row; one token repeated
   :attr:`max_token_repeats` (4) times in a row; a phrase of 2 to
   :attr:`max_phrase_tokens` (50) tokens repeated :attr:`max_phrase_repeats` (3)
   times in a row; or, from :attr:`distinct_min_tokens` (40) tokens on, fewer than
   :attr:`min_distinct_trigrams` (50 %) distinct token trigrams.
7. **language**: for a language other than English and Chinese, the caption's language as ``py3langid``
   identifies it must be the one asked for. For ``en`` and ``zh``: *units* are Han characters (one each), kana and Hangul characters
   (one each), and words (maximal runs of letters of one script; Latin letters are
   ``A–Z``, ``a–z`` and the accented letters of Latin-1 and Latin Extended). An
   English caption needs Latin words ≥ :attr:`min_script_share` (70 %) of its units;
   a Chinese one needs Han characters ≥ 70 % of its units. Digits and punctuation
   are not units, so "一枚Falcon 9火箭矗立在发射台上" passes as Chinese (11 Han, 1 Latin word)
   and "A shop sign that reads 北京路 hangs above the door" as English (9 Latin words, 3 Han).
8. **too_short**: fewer than :attr:`min_units` (3) units.

The first failing rule gives the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from curate.core.settings import setting

LANGS = ("en", "zh")  # checked by their script; any other language py3langid knows, by identification
_IDENTIFIER: list[Any] = []  # the language identifier, loaded once per process when a caption needs it
REASONS = ("truncated", "empty", "garbled", "refusal", "repetition", "language", "too_short", "too_long")
TRUNCATED_POLICIES = ("trim", "drop", "keep")


@dataclass(frozen=True)
class CaptionRules:
    """Thresholds of the caption checks (see the module docstring)."""

    min_script_share: float = 0.7
    min_units: int = 3
    max_char_run: int = 8
    max_token_repeats: int = 4
    max_phrase_repeats: int = 3
    max_phrase_tokens: int = 50
    distinct_min_tokens: int = 40
    min_distinct_trigrams: float = 0.5
    refusal_window: int = 200
    truncated: Literal["trim", "drop", "keep"] = setting(
        "trim", choices=TRUNCATED_POLICIES,
        help="Answers that hit --max-new-tokens: cut after the last complete sentence, reject, or keep.")

    def __post_init__(self) -> None:
        if self.truncated not in TRUNCATED_POLICIES:
            raise ValueError(f"truncated must be one of {', '.join(TRUNCATED_POLICIES)}, got {self.truncated!r}")
        if not 0.0 <= self.min_script_share <= 1.0:
            raise ValueError(f"min_script_share must be within [0, 1], got {self.min_script_share}")


@dataclass(frozen=True)
class CaptionCheck:
    """The outcome of :func:`check_caption`.

    Attributes:
        caption: The cleaned (and, for a trimmed truncated answer, cut) caption.
        reason: None when the caption passes, else one of :data:`REASONS`.
        detail: Which rule failed, with the figure that failed it ('' when it passes).
    """

    caption: str
    reason: str | None
    detail: str = ""

    @property
    def ok(self) -> bool:
        """True when the caption passes every check."""
        return self.reason is None


# ---------------------------------------------------------------------------
# Scripts and tokens
# ---------------------------------------------------------------------------

_HAN = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_KANA_HANGUL = r"\u3040-\u30ff\u31f0-\u31ff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"
_LATIN = r"A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff"
_HAN_RE = re.compile(f"[{_HAN}]")
_KANA_RE = re.compile(f"[{_KANA_HANGUL}]")
_LATIN_RE = re.compile(f"[{_LATIN}]")
# One token: a Han/kana/Hangul character, a Latin word, another word of letters, or a digit run.
_TOKEN_RE = re.compile(f"[{_HAN}{_KANA_HANGUL}]|[{_LATIN}]+|(?:(?![{_HAN}{_KANA_HANGUL}{_LATIN}])[^\\W\\d_])+|\\d+")


@dataclass(frozen=True)
class ScriptCounts:
    """Units of a text by script (see the module docstring): Han characters, Latin words, the rest."""

    han: int
    latin: int
    other: int

    @property
    def units(self) -> int:
        """All units."""
        return self.han + self.latin + self.other


def tokens(text: str) -> list[str]:
    """The text's tokens: lower-cased words, digit runs, and single Han/kana/Hangul characters."""
    return [t.lower() for t in _TOKEN_RE.findall(text)]


def script_counts(text: str) -> ScriptCounts:
    """Count the units of a text by script (digit runs are not units)."""
    han = latin = other = 0
    for tok in _TOKEN_RE.findall(text):
        if tok[0].isdigit():
            continue
        if _HAN_RE.match(tok):
            han += 1
        elif _LATIN_RE.match(tok):
            latin += 1
        else:
            other += 1
    return ScriptCounts(han, latin, other)


def known_languages() -> frozenset[str]:
    """Every language a caption may be asked in: ``en``, ``zh`` and the codes py3langid identifies."""
    return identifier().codes() | frozenset(LANGS)


def identifier() -> Any:
    """py3langid's model (:class:`curate.balance.matching.languages.LanguageIdentifier`), loaded once."""
    if not _IDENTIFIER:
        from curate.balance.matching.languages import LanguageIdentifier

        _IDENTIFIER.append(LanguageIdentifier())
    return _IDENTIFIER[0]


def language_share(text: str, lang: str) -> float:
    """Share of the units in the script of ``lang`` (Latin words for ``en``, Han for ``zh``); 0 when none."""
    counts = script_counts(text)
    if counts.units == 0:
        return 0.0
    if lang == "en":
        return counts.latin / counts.units
    if lang == "zh":
        return counts.han / counts.units
    raise ValueError(f"unknown language {lang!r}; use one of {', '.join(LANGS)}")


# ---------------------------------------------------------------------------
# Cleaning
# ---------------------------------------------------------------------------

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.S | re.I)
_THINK_OPEN = re.compile(r"<think>.*\Z", re.S | re.I)
_THINK_CLOSE = re.compile(r"\A.*</think>", re.S | re.I)
_WRAP_TAGS = re.compile(r"</?(?:answer|caption|description)>", re.I)
_FENCE_LINE = re.compile(r"^[ \t]*(?:```|~~~)[\w+-]*[ \t]*$", re.M)
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]+", re.M)
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", re.S)
_ACK = r"(?:sure|certainly|of course|absolutely|okay|ok|alright|great|no problem)"
_CAPTION_WORD = (r"(?:detailed\s+|short\s+|brief\s+|concise\s+)?(?:image\s+|photo\s+|picture\s+)?"
                 r"(?:caption|description|alt[- ]text|summary)")
_IMAGE_WORDS = r"(?:caption|description|alt[- ]text|summary|image|picture|photo)"
_ZH_IMAGE_WORDS = r"(?:描述|说明|标题|字幕|图片|图像|照片)"
_PREAMBLES = [
    # "Sure!", "Certainly.", "Okay," at the very start (the punctuation is required: "Great Wall ..." stays)
    re.compile(rf"\A{_ACK}[!.,:;]+[ \t]*", re.I),
    # "Here is a detailed caption for the image:" / "Below is a description of the photo:"
    re.compile(rf"\A(?:here\s+is|here's|here\s+are|below\s+is|the\s+following\s+is)\b[^:\n]{{0,100}}?"
               rf"\b{_IMAGE_WORDS}\b[^:\n]{{0,60}}:[ \t]*", re.I),
    # "Caption:", "Image description -", or a header line "Detailed Description"
    re.compile(rf"\A{_CAPTION_WORD}[ \t]*(?:[:\-–—]|\n)\s*", re.I),
    # 好的！ 当然。 没问题，
    re.compile(r"\A(?:好的|当然(?:可以)?|没问题|可以|好)[!！。.,，~～:：]+[ \t]*"),
    # 以下是这张图片的详细描述： / 下面是…： / 这是…：
    re.compile(rf"\A(?:以下是|下面是|这是)[^：:\n]{{0,50}}?{_ZH_IMAGE_WORDS}[^：:\n]{{0,20}}[：:][ \t]*"),
    # 图片描述： 描述： 标题：, or a header line 图片描述
    re.compile(r"\A(?:这张)?(?:图片|图像|照片)?(?:的)?(?:详细)?(?:描述|说明|标题|字幕)[ \t]*(?:[：:]|\n)\s*"),
]
_CLOSERS = [
    re.compile(r"(?:\n|(?<=[.!?])[ \t]+)(?:let me know\b|i hope (?:this|that) helps\b|feel free to\b|"
               r"if you (?:need|have|want|would like)\b)[^\n]*\Z", re.I),
    re.compile(r"(?:\n|(?<=[。！？]))[ \t]*(?:希望(?:这|以上)|如果(?:你|您)(?:还)?(?:需要|有)|如需)[^\n]*\Z"),
]
_QUOTES = [('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"), ("「", "」"), ("『", "』"), ("«", "»"), ("`", "`")]


def _strip_preamble(text: str) -> str:
    """Remove chat preambles at the start, repeatedly ("Sure! Here is a caption:" → two steps)."""
    while True:
        before = text
        for pattern in _PREAMBLES:
            text = pattern.sub("", text, count=1).lstrip()
        if text == before:
            return text


def _strip_quotes(text: str) -> str:
    while len(text) >= 2:
        for left, right in _QUOTES:
            inner = text[1:-1]
            if text[0] == left and text[-1] == right and left not in inner and right not in inner:
                text = inner.strip()
                break
        else:
            return text
    return text


def clean_caption(text: str) -> str:
    """Remove chat artefacts from a model answer (see the module docstring); returns plain caption text."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _THINK_BLOCK.sub("", text)
    text = _THINK_OPEN.sub("", text)
    text = _THINK_CLOSE.sub("", text)
    text = _WRAP_TAGS.sub("", text)
    text = _FENCE_LINE.sub("", text)
    text = _BOLD.sub(r"\2", text)
    text = _HEADING.sub("", text)
    text = text.strip()
    for _ in range(3):  # preamble, quotes and closers can nest: '"Sure: "A cat."'
        before = text
        text = _strip_preamble(text)
        for pattern in _CLOSERS:
            text = pattern.sub("", text).rstrip()
        text = _strip_quotes(text.strip())
        if text == before:
            break
    lines = [re.sub(r"[ \t\u3000]+", " ", line).strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


# ---------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?:[.!?][\"'”’)\]]*(?=\s|\Z)|[。！？][\"'”’」』）)]*)")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffd]")
_REFUSAL_START = re.compile(
    r"\A\W*(?:(?:i'?m|i\s+am|we'?re|we\s+are)\s+(?:so\s+|very\s+|really\s+|truly\s+)?sorry\b|sorry\b|apologies\b|"
    r"i\s+apologi[sz]e\b|unfortunately,?\s+(?:i|we)\b|(?:i'?m|i\s+am)\s+(?:not\s+able|unable)\b|"
    r"i\s+(?:can(?:'|no)?t|can\s+not|won'?t|will\s+not|do\s+not\s+have|don'?t\s+have)\b|"
    r"(?:很|非常|十分)?抱歉|对不起|不好意思|我(?:无法|不能|没有办法|没办法|看不到|不具备))",
    re.I,
)
_REFUSAL_ANYWHERE = re.compile(
    r"\bas\s+an?\s+(?:ai|artificial\s+intelligence|language\s+model|text-based)\b|\bas\s+a\s+language\s+model\b|"
    r"\b(?:i'?m|i\s+am)\s+(?:unable|not\s+able)\s+to\s+(?:see|view|access|open|process|analy[sz]e|describe|"
    r"interpret|display)\b|"
    r"\bthere\s+is\s+no\s+image\b|\bno\s+image\s+(?:is|was|has\s+been)\s+(?:provided|attached|uploaded|shared|included)\b|"
    r"\bi\s+(?:can(?:'|no)?t|can\s+not)\s+(?:see|view|access|open)\s+(?:the|this|any|your)\s+(?:image|picture|photo)\b|"
    r"\b(?:i\s+(?:can(?:'|no)?t|can\s+not|am\s+unable\s+to|am\s+not\s+able\s+to)|i'?m\s+(?:unable|not\s+able)\s+to)\s+"
    r"(?:describe|caption|provide|help|assist|identify|comply)\b|"
    r"我(?:无法|不能|没有办法|没办法)(?:回答|描述|查看|看到|识别|提供|处理|帮助)|"
    r"作为(?:一[个名])?(?:人工智能|AI|ai|语言模型|文本模型)|无法(?:查看|看到|识别|打开|访问|处理|分析)(?:这张|该|此|您的|你的)?(?:图片|图像|照片)|"
    r"没有(?:提供|上传|附上)(?:任何)?(?:图片|图像|照片)|看不到(?:任何)?(?:图片|图像|照片)",
    re.I,
)


def trim_to_sentence(text: str) -> str:
    """Cut a text after its last complete sentence ('' when none is complete)."""
    last = None
    for m in _SENTENCE_END.finditer(text):
        last = m.end()
    return text[:last].rstrip() if last is not None else ""


def is_refusal(text: str, window: int = 200) -> bool:
    """Whether a caption is a refusal or a model disclaimer (see the module docstring)."""
    head = text[:window].replace("\u2019", "'")
    return bool(_REFUSAL_START.search(head) or _REFUSAL_ANYWHERE.search(head))


def repetition(text: str, rules: CaptionRules | None = None) -> str:
    """Which repetition rule a text breaks ('' when none): a character run, a token or phrase loop, low variety."""
    rules = rules or CaptionRules()
    run = rules.max_char_run
    m = re.search(rf"([^\d\s])\1{{{run - 1},}}", text)
    if m:
        return f"character {m.group(1)!r} repeated {len(m.group(0))} times"
    toks = tokens(text)
    n = len(toks)
    streak = 1
    for i in range(1, n):
        streak = streak + 1 if toks[i] == toks[i - 1] else 1
        if streak >= rules.max_token_repeats:
            return f"token {toks[i]!r} repeated {streak} times in a row"
    need = rules.max_phrase_repeats
    for k in range(2, min(rules.max_phrase_tokens, n // need) + 1):
        streak = 0  # positions i where toks[i] == toks[i - k], consecutively
        for i in range(k, n):
            streak = streak + 1 if toks[i] == toks[i - k] else 0
            if streak >= k * (need - 1):
                return f"a phrase of {k} tokens repeated {need} times in a row: {' '.join(toks[i - k + 1:i + 1])!r}"
    if n >= rules.distinct_min_tokens:
        grams = [tuple(toks[i:i + 3]) for i in range(n - 2)]
        share = len(set(grams)) / len(grams)
        if share < rules.min_distinct_trigrams:
            return f"only {share:.0%} distinct token trigrams over {n} tokens"
    return ""


def check_caption(text: str, lang: str, *, truncated: bool = False, rules: CaptionRules | None = None) -> CaptionCheck:
    """Clean a model answer and check it as a caption in ``lang`` (``en``, ``zh`` or any code py3langid knows).

    Args:
        text: The answer as the model wrote it.
        lang: The language the caption must be in.
        truncated: Whether the answer stopped at ``max_new_tokens``.
        rules: Thresholds (defaults: :class:`CaptionRules`).

    Returns:
        The cleaned caption and the first failing rule (None when it passes).
    """
    rules = rules or CaptionRules()
    caption = clean_caption(text)
    if truncated and rules.truncated != "keep":
        if rules.truncated == "drop":
            return CaptionCheck(caption, "truncated", "the answer reached max_new_tokens")
        caption = trim_to_sentence(caption)
        if not caption:
            return CaptionCheck(caption, "truncated", "the answer reached max_new_tokens before a sentence ended")
    counts = script_counts(caption)
    if counts.units == 0:
        return CaptionCheck(caption, "empty", "no letters left after cleaning" if text.strip() else "empty answer")
    bad = _CONTROL.search(caption)
    if bad:
        return CaptionCheck(caption, "garbled", f"character U+{ord(bad.group(0)):04X}")
    if is_refusal(caption, rules.refusal_window):
        return CaptionCheck(caption, "refusal", caption[:80])
    rep = repetition(caption, rules)
    if rep:
        return CaptionCheck(caption, "repetition", rep)
    if lang not in LANGS:
        found = identifier().identify(caption)
        if found != lang:
            return CaptionCheck(caption, "language", f"identified as {found or 'no language'}, not {lang} (py3langid)")
    share = 1.0 if lang not in LANGS else (counts.latin if lang == "en" else counts.han) / counts.units
    if share < rules.min_script_share:
        script = "Latin words" if lang == "en" else "Han characters"
        return CaptionCheck(caption, "language", f"{script} are {share:.0%} of {counts.units} units "
                                                 f"(need {rules.min_script_share:.0%})")
    if counts.units < rules.min_units:
        return CaptionCheck(caption, "too_short", f"{counts.units} units (need {rules.min_units})")
    return CaptionCheck(caption, None)
