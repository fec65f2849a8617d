"""Function words of English and Chinese, and character debris: what a concept vocabulary leaves out.

Function words carry grammar, not content: articles and determiners, pronouns, prepositions (and Chinese
localizers used as postpositions: 桌子**上**), conjunctions, auxiliaries and modals, particles (Chinese
structural, aspect and sentence-final particles: 的 了 着 吗), the commonest degree and negation adverbs, and
Chinese classifiers (个 只 张). An entry is a function word when it is one of these lists, or when it is made of
them only (``such as``, ``这个`` = 这 + 个, ``我们的``). The lists are written here (no stop-word package: those lists
mix in content words such as "world" or "国家"); vocab/README.md prints them.

Debris: a character three or more times in a row (``xdddddd``, ``zzz``, ``哈哈哈``), a unit of one to three
letters three or more times (``hahaha``, ``lalala``), a Latin word of four or more letters without a vowel
(``xddd``, ``hmmm``), and the parts of web addresses and markup (``http``, ``www``, ``com``, ``nbsp``).
"""

from __future__ import annotations

import functools

import regex

ENGLISH: frozenset[str] = frozenset("""
a an the this that these those some any no every each either neither all both half several many much more most
few fewer less least other another such what which whatever whichever whose how why
i me my mine myself you your yours yourself yourselves he him his himself she her hers herself it its itself
we us our ours ourselves they them their theirs themselves one oneself who whom whoever whomever
something anything nothing everything someone anyone everyone somebody anybody everybody nobody none
thee thou thy ye ya y'all
about above across after against along alongside amid amidst among amongst around as at atop before behind below
beneath beside besides between beyond but by concerning despite down during except for from in inside into like
near of off on onto out outside over per regarding since than through throughout till to toward towards under
underneath unlike until unto up upon via with within without versus vs thru
and or nor so yet because although though while whilst whereas if unless whether once when whenever where
wherever lest whereby wherein
be am is are was were been being have has had having do does did doing will would shall should can could may might
must ought cannot gonna wanna gotta
not also very too just only even still already again ever there here then now thus hence therefore however
etc ie eg ok okay yes yeah oh ah uh um
""".split())

CHINESE: frozenset[str] = frozenset("""
的 地 得 之 所 者 们 了 着 过 吗 呢 吧 啊 呀 嘛 哦 啦 么 罢了 而已
把 被 让 给 叫 在 从 自 自从 向 往 朝 对 对于 关于 于 与 和 跟 同 及 以及 或 或者 还是 而 而且 并 并且 但 但是 可是
然而 因为 所以 因此 如果 假如 要是 虽然 尽管 即使 然后 于是 那么 只要 只有 除了 为 为了 以 以便 由 由于 按 按照 根据 通过 经过
这 那 哪 这个 那个 哪个 这些 那些 哪些 这里 那里 哪里 这儿 那儿 哪儿 这样 那样 这么 那么 怎么 怎样 什么 谁 为什么 多少 几
我 你 您 他 她 它 我们 你们 他们 她们 它们 咱 咱们 自己 大家 别人 人家 某 某些 各 各个 每 每个 其 其他 其它 其中
是 有 没有 没 不 别 也 都 就 还 又 再 才 很 太 最 更 挺 非常 十分 比较 已经 曾经 正在 正 将 将要 会 能 能够 可以 要 应 应该 该
可能 需要 得以 一些 一点 一下 些 个 只 张 条 位 辆 棵 匹 朵 等 等等
此 其 之 而 则 乃 亦 且 即 若 因 虽 均 皆 仍 曾 已 却 当 可 未 并 又 即使 还有
上 下 里 中 内
""".split())

CLASSIFIERS = "个只张条位辆棵匹朵件本把台头片块支根双对副套群种次"

#: Parts of web addresses and markup, dropped as debris.
WEB_PARTS: frozenset[str] = frozenset(
    "http https www com org net html htm php asp aspx jpg jpeg png gif amp nbsp quot href src utm url".split())

_REPEATED_CHAR = regex.compile(r"(\p{L})\1\1")
_REPEATED_UNIT = regex.compile(r"(?:^|\s)(\p{L}{1,3})\1{2,}(?:$|\s)")
_NO_VOWEL = regex.compile(r"(?i)\b[b-df-hj-np-tv-xz]{4,}\b")


def _tiled(text: str, words: frozenset[str], longest: int) -> bool:
    """Whether ``text`` is a sequence of ``words`` (no spaces: Chinese)."""
    ok = [True] + [False] * len(text)
    for end in range(1, len(text) + 1):
        ok[end] = any(ok[start] and text[start:end] in words for start in range(max(0, end - longest), end))
    return ok[-1]


@functools.cache
def _longest_chinese() -> int:
    return max(len(w) for w in CHINESE)


def is_function_word(text: str) -> bool:
    """Whether a normalised entry is a function word, or made of function words only (see the module docstring)."""
    low = text.lower()
    if low in ENGLISH or low in CHINESE:
        return True
    words = low.replace("-", " ").split()
    if len(words) > 1 and all(w in ENGLISH for w in words):
        return True
    return len(low) > 1 and " " not in low and _tiled(low, CHINESE, _longest_chinese())


def has_function_edge(text: str) -> bool:
    """Whether a multi-word English entry begins or ends with a function word (``get to``, ``take-in``, ``it's time``).

    Words are split at spaces and hyphens; a clitic (``it's``) counts as its word (``it``).
    """
    words = [w.split("'")[0] if not w.endswith("n't") else "not" for w in text.lower().replace("-", " ").split()]
    return len(words) > 1 and (words[0] in ENGLISH or words[-1] in ENGLISH)


def is_debris(text: str) -> bool:
    """Whether a normalised entry is character debris or part of a web address (see the module docstring)."""
    low = text.lower()
    if _REPEATED_CHAR.search(low) or _REPEATED_UNIT.search(low) or _NO_VOWEL.search(low):
        return True
    return any(w in WEB_PARTS for w in low.split())
