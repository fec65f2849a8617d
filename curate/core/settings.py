"""Settings declared once: a config field carries its default, its help and how the command line spells it.

A stage's settings live in one frozen dataclass (``PackConfig``, ``EmbedConfig``...). Each field that a
user can set is declared with :func:`setting`: its default, its help text, and, when it differs from the
field's name, its flag. The verbs make their options from these fields (:func:`curate.verbs.options_of`: the
command line's flags and a recipe step's keys alike),
tasks take the config (or a part of it) and read each setting where it is used, and ``stats.json`` records
the settings the config holds. So a setting's name, default and help are written once. A verb's options that
are no field of its config (its inputs, where it runs) are declared with :func:`option`, in the same form;
:func:`convert` turns a recipe's value into an option's value as the command line turns its flag.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import types
import typing
from dataclasses import MISSING
from typing import Any


def setting(default: Any = MISSING, *, help: str, flag: str | None = None, metavar: str | None = None,  # noqa: A002
            choices: tuple[str, ...] | None = None, cli: bool = True, show_default: bool = True,
            default_factory: Any = MISSING, tokens: bool = False) -> Any:
    """A config field declared with what the command line needs to offer it.

    Args:
        default: its default (or ``default_factory``).
        help: the option's help text, written here only.
        flag: the option's name when it is not ``--`` + the field name with dashes.
        metavar: the option's placeholder in ``--help``.
        choices: the values it accepts (the option is a choice).
        cli: False for a setting that only Python callers (or another step) set.
        show_default: whether ``--help`` shows the default.
        tokens: a number of tokens: the command line also takes ``8k``/``8K`` (:func:`parse_token_count`).
    """
    meta = {"help": help, "flag": flag, "metavar": metavar, "choices": choices, "cli": cli,
            "show_default": show_default, "tokens": tokens}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class SettingInfo:
    """What the command line needs of one setting."""

    name: str
    flag: str
    help: str
    type: type
    default: Any
    required: bool
    optional: bool
    metavar: str | None
    choices: tuple[str, ...] | None
    show_default: bool
    tokens: bool = False
    #: repeatable (``--against A --against B``): its value is a tuple.
    multiple: bool = False
    #: an environment variable read when the option is not given (``CURATE_API_KEY``).
    envvar: str | None = None
    #: a number of bytes: the command line also takes ``256MiB``, ``2G`` (:func:`parse_byte_size`).
    size: bool = False
    #: a comma-separated list (``laion,coyo``): its value is a tuple of the stripped parts.
    split: bool = False
    #: an on/off flag without a value (``--trust-code``); a boolean setting with default True is ``--x/--no-x``.
    is_flag: bool = False

    @property
    def path(self) -> bool:
        """Whether its values are paths (a recipe resolves them: its inputs, earlier steps, its own folder)."""
        return self.type is os.PathLike

    @property
    def off_flag(self) -> str | None:
        """``--no-x`` of a boolean setting on by default, else None."""
        return f"--no-{self.flag[2:]}" if self.is_flag and self.default is True else None


def option(name: str, *, help: str, type: type = str, default: Any = None, flag: str | None = None,  # noqa: A002
           **more: Any) -> SettingInfo:
    """A verb's option that is not a field of its settings class (where and how it runs, its inputs, a flag that
    sets a field another way), declared once for the command line and recipes alike. ``type`` is ``int``, ``float``,
    ``str``, ``bool`` (a flag) or ``os.PathLike`` (a path); ``more``: the other :class:`SettingInfo` fields."""
    required = more.pop("required", False)
    return SettingInfo(name=name, flag=flag or "--" + name.replace("_", "-"), help=help, type=type, default=default,
                       required=required, optional=default is None and not required,
                       metavar=more.pop("metavar", None), choices=more.pop("choices", None),
                       show_default=more.pop("show_default", True), is_flag=type is bool, **more)


def _base(hint: Any) -> tuple[Any, bool]:
    """The value type of an annotation and whether it admits None: ``int | None`` → ``(int, True)``; a path
    (``str | os.PathLike[str]``) → ``(os.PathLike, ...)``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        members = [a for a in args if a is not type(None)]
        optional = len(members) < len(args)
        if len(members) == 1:
            return _base(members[0])[0], optional
        kinds = [typing.get_origin(m) or m for m in members]
        if str in kinds and os.PathLike in kinds:
            return os.PathLike, optional
        return kinds[0], optional
    return typing.get_origin(hint) or hint, False


def settings_of(cls: type) -> list[SettingInfo]:
    """The settings of a config class that the command line offers, in field order."""
    hints = typing.get_type_hints(cls)
    return [_info(f, hints) for f in dataclasses.fields(cls)
            if "help" in f.metadata and f.metadata.get("cli", True)]


def setting_info(cls: type, name: str) -> SettingInfo:
    """What the command line needs of the setting ``name`` of ``cls``, also one declared with ``cli=False`` (a verb
    that offers it with extra click arguments: repeatable, read from an environment variable...)."""
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    return _info(field, typing.get_type_hints(cls))


def _info(f: dataclasses.Field, hints: dict[str, Any]) -> SettingInfo:
    meta = f.metadata
    kind, optional = _base(hints[f.name])
    required = f.default is MISSING and f.default_factory is MISSING
    default = None if required else (f.default if f.default is not MISSING else f.default_factory())
    return SettingInfo(name=f.name, flag=meta.get("flag") or "--" + f.name.replace("_", "-"), help=meta["help"],
                       type=kind, default=default, required=required, optional=optional or default is None,
                       metavar=meta.get("metavar"), choices=meta.get("choices"),
                       show_default=meta.get("show_default", True), tokens=meta.get("tokens", False),
                       is_flag=kind is bool)


@functools.lru_cache(maxsize=1)
def flag_fields() -> dict[str, str]:
    """Every stage's settings by flag: ``{"--near-threshold": "near_threshold", ...}`` (the configs of
    :data:`curate.stages.STAGES` and the dataclasses they hold), for errors raised from Python."""
    from curate.stages import STAGES

    table: dict[str, str] = {"--out": "out"}
    seen: set[type] = set()

    def walk(cls: type) -> None:
        if cls in seen or not dataclasses.is_dataclass(cls):
            return
        seen.add(cls)
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - an annotation that does not resolve: its plain fields still count
            hints = {}
        for f in dataclasses.fields(cls):
            if "help" in f.metadata:
                table.setdefault(f.metadata.get("flag") or "--" + f.name.replace("_", "-"), f.name)
            for kind in (hints.get(f.name), *typing.get_args(hints.get(f.name))):
                if isinstance(kind, type):
                    walk(kind)

    for spec in STAGES.values():
        if spec.config:
            try:
                walk(spec.config.load())
            except ImportError:  # an optional stage whose extra is not installed
                continue
    return table


def build_config(cls: type, values: dict[str, Any], **given: Any) -> Any:
    """A stage's config from values named by its fields (a verb's flags, or a recipe step's settings): the one way
    the verbs build their settings. ``given`` are the values the verb sets itself (``threads`` from ``--workers``,
    the image limits...); they win over ``values``.

    Raises:
        TypeError: a value no field of ``cls`` takes (a verb's bug: its options are made from the fields), naming
            the closest field.
        UserError: a bad value (the config's own check, naming the flag).
    """
    import difflib

    fields = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        close = difflib.get_close_matches(unknown[0], fields, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise TypeError(f"{cls.__name__} has no setting {', '.join(unknown)}{hint}")
    return cls(**{**values, **given})



# ---------------------------------------------------------------------------
# --workers: the default of every sharded verb, and what bounds it by memory
# ---------------------------------------------------------------------------

#: Verbs whose workers each hold something large, with what it is: ``--help`` of the verb says it (``--workers``), and
#: a verb given a number here starts that many workers by default instead of one per core.
WORKER_MEMORY: dict[str, tuple[int | None, str]] = {
    "embed": (None, "each worker holds its own copy of the open_clip model and a batch of decoded images"),
    "balance": (None, "each worker holds its own copy of the open_clip model and a batch of decoded images"),
    "vocab embed": (None, "each worker holds its own copy of the open_clip model"),
    "tag": (None, "each worker holds the concept embeddings and their FAISS index"),
    "recaption": (1, "with a local --model each worker loads the whole model (a 7B model: about 16 GB in bf16), so "
                     "one by default; more only where memory allows, or serve it once and give --endpoint"),
    "rl-filter": (1, "with a local --model each worker loads the whole model (a 7B model: about 16 GB in bf16), so "
                     "one by default; more only where memory allows, or serve it once and give --endpoint"),
}


#: The help of ``--seed`` (every sharded verb's) and of ``--image-root`` (the verbs reading images), written once for
#: the verbs' shared options and the configs that hold them as fields.
SEED_HELP = "Seed of every random choice; the same seed gives the same outputs."
IMAGE_ROOT_HELP = ("Folder (or bucket prefix) the records' relative image paths start from, for annotations kept "
                   "apart from their images (LLaVA's --image-folder); default: each input file's own folder.")

#: Flags of the sharded verbs that decide where and how fast a verb runs, never what it writes (the executors give the
#: same bytes for any of them): a run's settings compared to decide whether a step must run again can leave them out.
OPERATIONAL_FLAGS = ("workers", "executor", "ray_address", "num_gpus", "cpus_per_actor")


def default_workers(verb: str | None = None) -> int:
    """Worker processes of a verb when ``--workers`` is not given: the cores this process may use
    (``os.sched_getaffinity``), or the verb's own number in :data:`WORKER_MEMORY`."""
    fixed = WORKER_MEMORY.get(verb or "", (None, ""))[0]
    if fixed is not None:
        return fixed
    from curate.core.threads import available_cpus

    return available_cpus()


# ---------------------------------------------------------------------------
# A value given as text (a recipe's YAML), converted as the command line converts it
# ---------------------------------------------------------------------------


def convert(info: SettingInfo, value: Any) -> Any:
    """The value of option ``info`` given ``value`` (a recipe's text, a number; a list for a repeatable option), as the
    command line makes it from its flag: a number, a choice, a path (text), a tuple of a repeatable or split option.

    Raises:
        ValueError: a value the option does not take, in the command line's words (``'x' is not a valid integer.``).
    """
    if info.multiple:
        return tuple(_one(info, v) for v in (value if isinstance(value, (list, tuple)) else [value]))
    return _one(info, value)


def _one(info: SettingInfo, value: Any) -> Any:
    if info.is_flag:
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not a valid boolean.")
        return value
    text = str(value)
    if info.split:
        return tuple(s.strip() for s in text.split(",")) if text else ()
    if info.choices:
        if text not in info.choices:
            raise ValueError(f"{text!r} is not one of {', '.join(repr(c) for c in info.choices)}.")
        return text
    if info.tokens:
        return parse_token_count(text)
    if info.size:
        return parse_byte_size(text)
    if info.type is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a valid integer.") from None
    if info.type is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a valid float.") from None
    return text


_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_byte_size(value: object) -> int:
    """A number of bytes: ``268435456``, ``256MiB``, ``256M`` or ``1.5GB`` (K, M, G, T: powers of 1024).

    Raises:
        ValueError: not such a number (at least 1).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip().lower().replace("_", "").replace(",", "")
    number = text.rstrip("kmgtib")
    unit = text[len(number):].replace("ib", "").replace("b", "") or ""
    try:
        size = float(number) * _BYTE_UNITS[unit[:1]] if len(unit) <= 1 else -1
    except (KeyError, ValueError):
        size = -1
    if not 1 <= size < 1 << 62 or size != size:
        raise ValueError(f"{value!r} is not a size in bytes (e.g. 268435456, 256MiB or 2G)")
    return int(size)


# ---------------------------------------------------------------------------
# Token counts: 8192, 8k, 8K, 32k, 1M
# ---------------------------------------------------------------------------

_TOKEN_UNITS = {"": 1, "k": 1024, "m": 1024 * 1024}


def parse_token_count(value: object) -> int:
    """A number of tokens: ``8192``, ``8k`` or ``8K`` (x 1024), ``1M`` (x 1024²), ``128_000`` or ``1.5k``.

    Raises:
        ValueError: not such a number (a whole number of tokens at least 1).
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number of tokens")
    if isinstance(value, int):
        return value
    text = str(value).strip().lower().replace("_", "").replace(",", "")
    unit = text[-1:] if text[-1:] in ("k", "m") else ""
    number = text[: len(text) - len(unit)]
    try:
        count = float(number) * _TOKEN_UNITS[unit]
    except ValueError:
        raise ValueError(f"{value!r} is not a number of tokens (e.g. 8192 or 8k)") from None
    if count != count or count != int(count) or abs(count) >= 1 << 62:
        raise ValueError(f"{value!r} is not a whole number of tokens (e.g. 8192 or 8k)")
    return int(count)
