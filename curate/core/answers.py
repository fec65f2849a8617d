"""The golds of VQA rows: their annotators' answers, and the options and letter of multiple-choice rows.

Shared by the reader (:mod:`curate.core.formats.rows`) and the verifiers' routing
(:mod:`curate.rewards.registry`); it imports nothing, so the rewards stay light inside RL trainers.

* **Annotators' answers**: TextVQA and DocVQA store ``answers`` as a list of strings, VQAv2
  as ``{"answer": ...}`` annotations; a row without ``answer`` is scored against any of them
  (:func:`annotator_answers`).
* **Multiple choice**: ScienceQA stores ``choices`` and ``answer``, the index of the right
  one (an integer), with ``hint`` as the context; AI2D exports store ``options`` and the
  index as text; A-OKVQA stores ``choices`` and ``correct_choice_idx``. Read as they are,
  the answer would be the text ``1`` and the options nowhere in the prompt. Such a row reads
  as LLaVA reads ScienceQA: the context, the question, the options lettered ``A.``, ``B.``, …
  and :data:`CHOICE_PROMPT`, answered by the option's letter (:func:`choice_question`), and
  that letter is its gold for the ``multiple-choice`` verifier (:func:`answer_letter`). MMMU stores its
  options as the text of a Python list (``"['8', '10']"``, ``"[]"`` for open questions): read as that list.
"""

from __future__ import annotations

from typing import Any, Mapping

OPTION_FIELDS = ("choices", "options")
"""Fields that hold a row's options, the first present wins."""
INDEX_FIELDS = ("answer", "correct_choice_idx")
"""Fields that may hold the index (or the text, or the letter) of a multiple-choice row's answer."""
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
CHOICE_PROMPT = "Answer with the option's letter from the given choices directly."


def annotator_answers(raw: Mapping[str, Any]) -> list[str]:
    """The distinct non-empty answers of ``answers`` (strings, or ``{"answer": ...}`` annotations), first seen first."""
    found = raw.get("answers")
    if not isinstance(found, (list, tuple)):
        return []
    out: list[str] = []
    for item in found:
        if isinstance(item, Mapping):
            item = item.get("answer")
        if item is None or isinstance(item, (list, tuple, Mapping)):
            continue
        text = str(item).strip()
        if text and text not in out:
            out.append(text)
    return out


def options_of(raw: Mapping[str, Any]) -> list[str] | None:
    """The row's options (``choices`` or ``options``: 2 to 26 strings or numbers, or the text of such a
    Python list), else None."""
    for field in OPTION_FIELDS:
        options = raw.get(field)
        if options is None:
            continue
        if isinstance(options, str):
            options = _listed(options)
        if (isinstance(options, (list, tuple)) and 2 <= len(options) <= len(LETTERS)
                and all(isinstance(o, (str, int, float)) and not isinstance(o, bool) for o in options)):
            return [str(o).strip() for o in options]
        return None
    return None


def answer_letter(raw: Mapping[str, Any], options: list[str]) -> str | None:
    """The letter of the row's answer among ``options``, or None when the row names none of them.

    The answer (``answer``, else ``correct_choice_idx``) may be an integer index, an index
    written as digits, one of the options' texts, or a letter within the options.

    Raises:
        ValueError: an integer index outside the options (the message says so).
    """
    value = next((raw[f] for f in INDEX_FIELDS if raw.get(f) not in (None, "")), None)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if not 0 <= value < len(options):
            raise ValueError(f"answer {value} is not the index of one of the {len(options)} options")
        return LETTERS[value]
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text in options:
        return LETTERS[options.index(text)]
    letter = text.strip("().").strip()
    if len(letter) == 1 and letter in LETTERS[:len(options)]:
        return letter
    if text.isdigit() and int(text) < len(options):
        return LETTERS[int(text)]
    return None


def multiple_choice(raw: Mapping[str, Any]) -> tuple[list[str], str] | None:
    """``(options, letter of the answer)`` of a multiple-choice row (options, and an answer naming one of them),
    else None.

    Raises:
        ValueError: an integer index outside the options (:func:`answer_letter`).
    """
    options = options_of(raw)
    letter = answer_letter(raw, options) if options else None
    return (options, letter) if letter is not None else None


def is_multiple_choice(raw: Mapping[str, Any]) -> bool:
    """Whether the row is a multiple-choice one (:func:`multiple_choice`; an index outside its options counts,
    so that scoring it reports the error)."""
    try:
        return multiple_choice(raw) is not None
    except ValueError:
        return True


def choice_question(raw: Mapping[str, Any], question: str, options: list[str]) -> str:
    """The prompt of a multiple-choice row: ``Context: hint`` (when the row has one), the question, the lettered
    options and :data:`CHOICE_PROMPT`, a line each."""
    hint = raw.get("hint")
    lines = [f"Context: {hint.strip()}"] if isinstance(hint, str) and hint.strip() else []
    lines.append(question.strip())
    lines.extend(f"{LETTERS[i]}. {option}" for i, option in enumerate(options))
    lines.append(CHOICE_PROMPT)
    return "\n".join(lines)


def _listed(text: str) -> Any:
    """The list written as ``text`` (a Python or JSON list literal of at most 100,000 characters), else None."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")) or len(text) > 100_000:
        return None
    import ast  # only for rows whose options are text

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
