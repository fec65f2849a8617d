"""Caption cleaning and checks on real English and Chinese sentences (pass and fail cases for every rule)."""

from __future__ import annotations

import pytest

from curate.recaption.checks import (
    CaptionRules,
    check_caption,
    clean_caption,
    is_refusal,
    language_share,
    repetition,
    script_counts,
    tokens,
    trim_to_sentence,
)

CAT_EN = "A tabby cat sleeps on a red sofa next to a window with white curtains."
CAT_ZH = "一只虎斑猫趴在红色沙发上睡觉，旁边是一扇挂着白色窗帘的窗户。"


# -- cleaning ------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [
    f"Sure! Here is a detailed caption of the image:\n\n{CAT_EN}",
    f"Certainly. Here's a description of the photo: {CAT_EN}",
    f"<think>The user wants a caption. I see a cat on a sofa.</think>\n{CAT_EN}",
    f"The picture shows a cat, so I will describe it.</think>{CAT_EN}",
    f"**Caption:** \"{CAT_EN}\"",
    f"```text\n{CAT_EN}\n```",
    f"# Image Description\n\n{CAT_EN}",
    f"Caption: {CAT_EN}",
    f"{CAT_EN}\n\nLet me know if you need anything else!",
    f"{CAT_EN} I hope this helps.",
    f"“{CAT_EN}”",
    f"<answer>{CAT_EN}</answer>",
    f"Okay, here is the caption:\n**{CAT_EN}**",
])
def test_english_artefacts_are_removed(raw: str) -> None:
    assert clean_caption(raw) == CAT_EN
    assert check_caption(raw, "en").ok


@pytest.mark.parametrize("raw", [
    f"好的！以下是这张图片的详细描述：\n\n{CAT_ZH}",
    f"当然可以。这是图片的描述：{CAT_ZH}",
    f"<think>用户想要一段中文描述。</think>{CAT_ZH}",
    f"图片描述：{CAT_ZH}",
    f"**图片描述**\n{CAT_ZH}",
    f"「{CAT_ZH}」",
    f"“{CAT_ZH}”",
    f"{CAT_ZH}希望这个描述对你有帮助！",
    f"```\n{CAT_ZH}\n```",
])
def test_chinese_artefacts_are_removed(raw: str) -> None:
    assert clean_caption(raw) == CAT_ZH
    assert check_caption(raw, "zh").ok


@pytest.mark.parametrize("text", [
    "Great Wall of China winding over green hills at sunset.",           # "Great" is not "Great!"
    "Here is a view of the harbor: boats at anchor under a grey sky.",    # no caption word before the colon
    'A neon sign that says "Open late" above a bar door.',                # inner quotes stay
    "Okapi standing in a forest clearing, its legs striped like a zebra's.",
    "好大的一只猫趴在沙发上。",                                              # 好 without punctuation is a word
    "这是一座古老的石桥，横跨在平静的河面上。",                                 # 这是 without a colon
])
def test_clean_leaves_real_captions_alone(text: str) -> None:
    assert clean_caption(text) == text


def test_unclosed_think_leaves_nothing() -> None:
    assert clean_caption("<think>I need to look at the image carefully and") == ""
    assert check_caption("<think>Let me think about the cat", "en").reason == "empty"


def test_whitespace_is_normalised() -> None:
    assert clean_caption("  A cat\t on   a sofa.\n\n\n\nIt sleeps.  ") == "A cat on a sofa.\n\nIt sleeps."


# -- scripts and language ---------------------------------------------------------------------------

def test_script_units() -> None:
    c = script_counts("一枚Falcon 9火箭矗立在发射台上")
    assert (c.han, c.latin, c.other) == (11, 1, 0)
    c = script_counts("A shop sign that reads 北京路 hangs above the door")
    assert (c.han, c.latin, c.other) == (3, 9, 0)
    c = script_counts("Café crème, naïve façade — Привет мир")
    assert (c.han, c.latin, c.other) == (0, 4, 2)
    assert tokens("The Cat sat; 猫坐着 42") == ["the", "cat", "sat", "猫", "坐", "着", "42"]


@pytest.mark.parametrize("text,lang,ok", [
    (CAT_EN, "en", True),
    (CAT_ZH, "zh", True),
    ("一枚Falcon 9火箭矗立在发射台上，背景是黄昏的天空。", "zh", True),
    ("A shop sign that reads 北京路 hangs above the door.", "en", True),       # 9/12 Latin
    ("NASA宇航员艾琳·柯林斯身穿橙色飞行服的官方肖像。", "zh", True),
    (CAT_ZH, "en", False),                                                   # answered in Chinese
    (CAT_EN, "zh", False),                                                   # answered in English
    ("一只猫 sleeping on a red sofa next to the window.", "zh", False),        # 2 Han of 10 units
    ("Eine getigerte Katze schläft auf einem roten Sofa.", "en", True),      # Latin script: the check is the script
    ("赤いソファの上で猫が眠っています。", "zh", False),                           # Japanese: kana count against
    ("Кошка спит на красном диване у окна.", "en", False),                   # Cyrillic
])
def test_language_rule(text: str, lang: str, ok: bool) -> None:
    result = check_caption(text, lang)
    assert (result.reason != "language") == ok, (result, language_share(text, lang))


def test_language_threshold_is_the_rule() -> None:
    text = "A shop sign that reads 北京路 hangs above the door."  # 9 of 12 units: 75 %
    assert check_caption(text, "en", rules=CaptionRules(min_script_share=0.75)).ok
    assert check_caption(text, "en", rules=CaptionRules(min_script_share=0.76)).reason == "language"


# -- refusals ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "I'm sorry, but I can't help with identifying people in images.",
    "I’m sorry, I cannot describe this image.",
    "Sorry, I am unable to view images.",
    "I cannot provide a caption for this image because it may contain sensitive content.",
    "Unfortunately, I can't see the picture you attached.",
    "As an AI language model, I do not have the ability to see images, but a typical beach photo shows sand.",
    "The request is unclear. There is no image attached to your message, so I cannot describe it.",
    "I apologize, but no image was provided.",
    "抱歉，我无法查看这张图片。",
    "很抱歉，我不能识别图片中的人物。",
    "对不起，您没有提供任何图片。",
    "作为一个人工智能语言模型，我无法看到图片，但我可以帮你描述一般的场景。",
    "这个问题我没有办法回答。",
])
def test_refusals_are_caught(text: str) -> None:
    assert is_refusal(text)
    lang = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en"
    assert check_caption(text, lang).reason == "refusal"


@pytest.mark.parametrize("text,lang", [
    ("A birthday card that says 'I'm sorry' in pink letters lies on a white table.", "en"),
    ("A protest banner reading NO WAR hangs from a bridge over a river at dusk.", "en"),
    ("A robot toy with a sign saying 'I am an AI' stands on a desk.", "en"),
    ("一张写着“对不起”的粉色卡片放在白色桌子上。", "zh"),
    (CAT_EN, "en"),
    (CAT_ZH, "zh"),
])
def test_captions_mentioning_apologies_are_not_refusals(text: str, lang: str) -> None:
    assert not is_refusal(text)
    assert check_caption(text, lang).ok


# -- repetition ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,lang,rule", [
    ("Wow!!!!!!!!!! A cat is sleeping on a red sofa.", "en", "character"),
    ("A cat is very very very very sleepy on the sofa.", "en", "token"),
    ("A dog runs on the beach. A dog runs on the beach. A dog runs on the beach.", "en", "phrase"),
    ("哈哈哈哈，一只猫在沙发上睡觉。", "zh", "token"),
    ("一只猫在沙发上。一只猫在沙发上。一只猫在沙发上。", "zh", "phrase"),
    (" ".join(f"a man in a {c} shirt and a woman in a {c} hat" for c in
              ("red", "blue", "green", "white", "black", "grey", "pink")), "en", "trigrams"),
])
def test_degenerate_repetition_is_caught(text: str, lang: str, rule: str) -> None:
    why = repetition(text)
    assert why, text
    assert {"character": "character", "token": "token", "phrase": "phrase", "trigrams": "distinct"}[rule] in why
    assert check_caption(text, lang).reason == "repetition"


@pytest.mark.parametrize("text,lang", [
    ("Three dogs, two cats and one parrot share a sunny living room; the dogs sleep, the cats play.", "en"),
    ("The score on the board reads 1000000 to 0 in big white digits.", "en"),         # digits may repeat
    ("Rows of red, white and blue flags line a long street. Red flags outnumber blue ones.", "en"),
    ("天空中飘着一朵朵白云，草地上开满了红红的花，孩子们在河边跑来跑去。", "zh"),          # reduplication is normal
    ("A caption of normal length about a market: stalls sell fish, fruit, bread, cheese, flowers, spices, "
     "tea, honey, olives, shoes, books and old maps, while buyers walk between them under striped awnings "
     "and a clock tower rises behind the square.", "en"),
])
def test_normal_captions_are_not_repetitive(text: str, lang: str) -> None:
    assert repetition(text) == ""
    assert check_caption(text, lang).ok


# -- empty, garbled, short, truncated -------------------------------------------------------------------

@pytest.mark.parametrize("raw", ["", "   ", "```\n```", "<think>only thinking</think>", "**Caption:**", "12345 ..."])
def test_empty(raw: str) -> None:
    assert check_caption(raw, "en").reason == "empty"


def test_garbled_and_short() -> None:
    assert check_caption("A cat sleeps on a \ufffd sofa.", "en").reason == "garbled"
    assert check_caption("A cat sleeps\x07 on a sofa.", "en").reason == "garbled"
    assert check_caption("Cat.", "en").reason == "too_short"
    assert check_caption("一只猫", "zh").ok  # three Han characters are three units
    assert check_caption("猫。", "zh").reason == "too_short"
    assert check_caption("A sleeping cat.", "en").ok


def test_truncated_answers_are_trimmed_to_the_last_sentence() -> None:
    cut = f"{CAT_EN} Sunlight falls across the cushions and a"
    assert trim_to_sentence(cut) == CAT_EN
    result = check_caption(cut, "en", truncated=True)
    assert result.ok and result.caption == CAT_EN
    assert check_caption(cut, "en", truncated=False).caption.endswith("and a")
    zh_cut = f"{CAT_ZH}阳光照在"
    assert check_caption(zh_cut, "zh", truncated=True).caption == CAT_ZH
    assert check_caption("A tabby cat sleeps on a red sofa next to a", "en", truncated=True).reason == "truncated"
    assert check_caption(cut, "en", truncated=True, rules=CaptionRules(truncated="drop")).reason == "truncated"
    assert check_caption(cut, "en", truncated=True, rules=CaptionRules(truncated="keep")).caption == cut
    assert trim_to_sentence("It is 3.5 m tall and") == ""  # a decimal point is not a sentence end


def test_other_languages_are_identified() -> None:
    """A language other than en and zh is checked by py3langid's identification (issue 49)."""
    fr = "Un chat tigré dort sur un canapé rouge près d'une fenêtre aux rideaux blancs."
    de = "Eine getigerte Katze schläft auf einem roten Sofa neben einem Fenster mit weißen Vorhängen."
    assert check_caption(fr, "fr").ok and check_caption(de, "de").ok
    wrong = check_caption(CAT_EN, "fr")
    assert wrong.reason == "language" and wrong.detail == "identified as en, not fr (py3langid)"
    assert check_caption(de, "fr").reason == "language"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="truncated"):
        CaptionRules(truncated="cut")  # type: ignore[arg-type]
