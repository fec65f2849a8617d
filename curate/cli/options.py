"""The click side of the verbs: flags made from their declared options, parsed into values for their ``prepare``.

A verb's options are declared once, outside click (:mod:`curate.verbs`: a config's fields plus the shared executor,
image-limit and ``--image-root`` options); :func:`verb_command` makes its click command from them, whose callback
only hands the parsed values to the verb. ``curate run`` calls the same verbs with a recipe's values.
"""

from __future__ import annotations

import os
from typing import Any

import click

from curate.core.settings import SettingInfo
from curate.verbs import Prepared, Values, Verb


def verb_command(verb: Verb, group: click.Group) -> click.Command:
    """The click command of ``verb`` added to ``group``: its flags made from the verb's options (where each is declared
    once), its callback the verb's ``prepare`` given the parsed values. The group runs the returned
    :class:`~curate.verbs.Prepared`; a flag the verb no longer takes (:attr:`~curate.verbs.Verb.moved`) is one line
    saying where it went."""

    def callback(**params: Any) -> Prepared:
        return verb.prepare(values_of(click.get_current_context(), params))

    callback.__module__ = verb.prepare.__module__
    callback.__name__ = callback.__qualname__ = f"{verb.name.replace('-', '_')}_cmd"
    fn: Any = options(*verb.options, verb=verb.name)(callback)
    if verb.argument is not None:
        arg = verb.argument
        fn = click.argument(arg.name, nargs=-1 if arg.multiple else 1, required=arg.required, metavar=arg.metavar,
                            type=click.Path(path_type=str))(fn)
    command = group.command(verb.name.rsplit(" ", 1)[-1], help=verb.prepare.__doc__)(fn)
    command.moved = verb.moved  # read by curate.cli.group.VerbCommand.parse_args
    return command


def values_of(ctx: click.Context, params: dict[str, Any]) -> Values:
    """A command's parsed flags as :class:`~curate.verbs.Values`: given, those not left at their default."""
    given = [name for name in params if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)]
    return Values(params, given)


def options(*infos: SettingInfo, verb: str = ""):  # noqa: ANN201 - click decorator
    """The click options of declared options (:func:`curate.core.settings.setting`, :func:`~curate.core.settings.option`),
    in this order (``verb``: whose ``--workers`` default and help they are)."""

    def decorate(fn):  # noqa: ANN001, ANN202
        for info in reversed(infos):
            fn = _option(info, verb)(fn)
        return fn

    return decorate


class WorkersOption(click.Option):
    """``--workers``: one per available core by default; ``--help`` says what each worker holds where memory bounds
    it, and a verb's own default (:data:`curate.core.settings.WORKER_MEMORY`, declared there once)."""

    verb = ""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from curate.core.settings import WORKER_MEMORY

        fixed, note = WORKER_MEMORY.get(self.verb, (None, ""))
        base = self.help or ""
        default = "one per available core" if fixed is None else str(fixed)
        self.help = f"{base} Memory: {note}.  [default: {default}]" if note else f"{base}  [default: {default}]"
        try:
            return super().get_help_record(ctx)
        finally:
            self.help = base


def _workers_option(info: SettingInfo, verb: str):  # noqa: ANN202 - click decorator
    from curate.core.settings import default_workers

    def decorate(fn):  # noqa: ANN001, ANN202
        fn = click.option(info.flag, info.name, type=int, default=lambda: default_workers(verb), cls=WorkersOption,
                          show_default=False, help=info.help)(fn)
        fn.__click_params__[-1].verb = verb
        return fn

    return decorate


class TokenCount(click.ParamType):
    """A number of tokens: ``8192``, ``8k`` or ``8K`` (x 1024), ``1M``
    (:func:`curate.core.settings.parse_token_count`)."""

    name = "tokens"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from curate.core.settings import parse_token_count

        try:
            return parse_token_count(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class ByteSize(click.ParamType):
    """A number of bytes: ``268435456``, ``256MiB``, ``256M`` or ``1.5GB`` (:func:`curate.core.settings.parse_byte_size`)."""

    name = "bytes"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from curate.core.settings import parse_byte_size

        try:
            return parse_byte_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def config_options(cls: type, *names: str, exclude: tuple[str, ...] = ()):  # noqa: ANN201 - click decorator
    """The click options of a config class's settings (:func:`curate.core.settings.settings_of`): all of them but
    ``exclude``, or ``names`` in that order. Each option's flag, type, default and help come from the config's
    field, where they are written once; the verb passes the values straight to the config."""
    from curate.core.settings import settings_of

    infos = {info.name: info for info in settings_of(cls)}
    unknown = [n for n in (*names, *exclude) if n not in infos]
    if unknown:
        raise TypeError(f"{cls.__name__} has no command-line setting {', '.join(unknown)}")
    chosen = [infos[n] for n in names] if names else [i for i in infos.values() if i.name not in exclude]
    return options(*chosen)


class SettingOption(click.Option):
    """An option made from a declared option (:func:`options`; a test tells it from one written by hand)."""


def _split(ctx: click.Context, param: click.Parameter, value: str | tuple | None) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, tuple) else tuple(s.strip() for s in value.split(",")) if value else ()


def _option(info: SettingInfo, verb: str = ""):  # noqa: ANN202 - a SettingInfo -> a click decorator
    if info.name == "workers" and info.default is None:
        return _workers_option(info, verb)
    more: dict[str, Any] = {"cls": SettingOption}
    if info.envvar:
        more.update(envvar=info.envvar, show_envvar=True)
    if info.is_flag:
        if info.default is True:
            return click.option(f"{info.flag}/{info.off_flag}", info.name, default=True, show_default=True,
                                help=info.help, **more)
        return click.option(info.flag, info.name, is_flag=True, default=info.default, help=info.help,  # click 8.3: UNSET
                            **more)
    if info.choices:
        kind: Any = click.Choice(info.choices)
    elif info.tokens:
        kind = TokenCount()
    elif info.size:
        kind = ByteSize()
    elif info.type is os.PathLike:
        kind = click.Path(path_type=str)
    else:
        kind = info.type if info.type in (int, float, str) else str
    if info.split:
        more["callback"] = _split
    shown = info.show_default and info.default not in (None, "", ())
    given = {"required": True} if info.required else {"default": None if info.split else info.default}
    return click.option(info.flag, info.name, type=kind, metavar=info.metavar, show_default=shown, help=info.help,
                        multiple=info.multiple, **more, **given)
