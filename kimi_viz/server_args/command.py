"""A server's launch command as input: split as a shell splits it, read with the release's own argument table.

``--server "CMD"`` takes the command as typed: ``python -m sglang.launch_server …`` or ``sglang serve …``
(``sglang serve MODEL`` too), with environment assignments in front (``SGLANG_VLM_CACHE_SIZE_MB=0 …``, also
after ``env``), wrappers such as ``nohup`` before it, line continuations (``\\`` at a line's end) and
redirections after it (``> server.log 2>&1 &``, which end the command). :func:`split_command` splits it with
:mod:`shlex` — nothing is run, expanded or looked up — and :func:`parse_command` reads the server's words with an
argument parser rebuilt from the release's row of :mod:`.table` (every spelling, alias and abbreviation the
release's own parser takes, its types and choices). An unknown flag is refused in one line naming the nearest
flag of that release, or the releases that have it.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any, NoReturn

from .._records import frozen
from ..errors import ServerInputError
from ..releases import RELEASES, release_span
from ..terminal import escape_value
from .literal import Arguments
from .log import ServerStart, StartupArguments
from .specs import OptionForm
from .table import args_of, nearest_option, releases_with

MAX_COMMAND = 64 << 10  # characters: a launch command is a few hundred; a larger one is not a command
MAX_WORDS = 4096
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_OPERATOR = re.compile(r"^(?:\d*[<>]|[|;&]|\(|\))")
_PYTHON = re.compile(r"(?:^|/)python(?:\d+(?:\.\d+)?)?$")
_LAUNCHERS = ("python -m sglang.launch_server", "sglang serve")
_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


@frozen
class LaunchCommand:
    """A launch command split as a shell would: its environment, its launcher and the server's own words."""

    env: dict[str, str]  # VAR=value assignments before the launcher, in order
    launcher: str  # "python -m sglang.launch_server" or "sglang serve"
    words: tuple[str, ...]  # the server's arguments (``sglang serve MODEL``'s model as ``--model-path MODEL``)


@frozen
class CommandValue:
    """One server argument a launch command gives: its value and the spelling typed."""

    dest: str
    value: object
    option: str  # as typed (an abbreviation or alias included)


@frozen
class ParsedCommand:
    """A launch command read with one release's argument table."""

    release: str
    command: LaunchCommand
    values: tuple[CommandValue, ...]  # the arguments given, in the order typed

    def value_of(self, dest: str) -> CommandValue | None:
        """Return the argument ``dest`` as given, or None when the command does not give it."""
        return next((v for v in self.values if v.dest == dest), None)


def _refuse(message: str) -> NoReturn:
    raise ServerInputError(f"--server: {message}")


def split_command(text: str) -> LaunchCommand:
    """Return ``text`` split as a shell splits it (never run); raise ServerInputError when it is no SGLang launch."""
    if not isinstance(text, str) or not text.strip():
        _refuse('empty; expected the launch command, e.g. "python -m sglang.launch_server --model-path M --tp 8"')
    if len(text) > MAX_COMMAND:
        _refuse(f"{len(text)} characters, over the {MAX_COMMAND} limit; expected one launch command")
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text) or "\x7f" in text:
        _refuse("holds control characters; expected the launch command as text")
    joined = re.sub(r"\\\r?\n", " ", text)  # line continuations
    try:
        words = shlex.split(joined, comments=True, posix=True)
    except ValueError as exc:
        _refuse(f"cannot be split as a shell would ({exc}); check its quotes")
    if len(words) > MAX_WORDS:
        _refuse(f"{len(words)} words, over the {MAX_WORDS} limit; expected one launch command")
    for index, word in enumerate(words):
        if _OPERATOR.match(word):  # a redirection, a pipe, `&` or `;`: the command ends there
            words = words[:index]
            break
    env: dict[str, str] = {}
    start = None
    for index, word in enumerate(words):
        python = word == "-m" and index > 0 and _PYTHON.search(words[index - 1]) is not None
        if python and index + 1 < len(words) and words[index + 1] == "sglang.launch_server":
            start, launcher = index + 2, _LAUNCHERS[0]
            break
        if word == "serve" and index > 0 and words[index - 1].rsplit("/", 1)[-1] == "sglang":
            start, launcher = index + 1, _LAUNCHERS[1]
            break
        if _ASSIGNMENT.match(word):
            name, _, value = word.partition("=")
            env[name] = value
    if start is None:
        shown = escape_value(" ".join(words[:6]))
        _refuse(
            f'{shown!r} … launches no SGLang server; expected "python -m sglang.launch_server …" or '
            '"sglang serve …" (environment assignments may stand in front)'
        )
    server = words[start:]
    if launcher == _LAUNCHERS[1] and server and not server[0].startswith("-"):
        server = ["--model-path", *server]  # `sglang serve MODEL`
    return LaunchCommand(env, launcher, tuple(server))


def human_readable_int(text: str) -> int:
    """Return the count SGLang's ``human_readable_int`` reads from ``text``: ``16384``, ``16k``, ``1Mi``."""
    text = text.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", text)
    if match:
        number, suffix = match.groups()
        if suffix in _IEC:
            if "." in number:
                raise ValueError(f"a decimal with {suffix}")
            return int(number) * _IEC[suffix]
        return int(Decimal(number) * _SI[suffix])
    return int(text)


def _converter(value_type: str | None) -> Any:
    """Return the function a release's parser applies to a typed value, from its type's name in the table."""
    if value_type == "int":
        return int
    if value_type == "float":
        return float
    if value_type == "human_readable_int":
        return human_readable_int
    if value_type is not None and ("json" in value_type or value_type == "loads"):
        return json.loads
    return str


class _StoreConstant(argparse.Action):
    """A spelling that takes a value yet stores a constant (SGLang's ``--monokernel-backend``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: str | None = None) -> None:
        setattr(namespace, self.dest, self.const)


class _Refused(argparse.Action):
    """A spelling the release's parser refuses (SGLang's ``DeprecatedAction`` that errors)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: str | None = None) -> None:
        _refuse(f"{option}: SGLang {parser.prog.split()[-1]} refuses this flag (it was removed)")


def _add(parser: argparse.ArgumentParser, dest: str, form: OptionForm) -> None:
    """Add the spellings of one form of ``dest`` as the release's parser declares them."""
    kwargs: dict[str, Any] = {"dest": dest, "default": argparse.SUPPRESS}
    if form.action == "error":
        kwargs.update(action=_Refused, nargs=0)
    elif form.action == "noop":
        kwargs.update(dest=f"_noop_{dest}", action="store_const", const=True)  # accepted, stores nothing of SGLang's
    elif form.action in ("store_true", "store_false") or (form.action == "store_const" and form.nargs == 0):
        const = {"store_true": True, "store_false": False}.get(form.action, form.const)
        kwargs.update(action="store_const", const=const)
    elif form.action == "store_const":  # takes one value (checked against its choices) and stores the constant
        kwargs.update(action=_StoreConstant, const=form.const, choices=form.choices, type=_converter(form.value_type))
    elif form.action == "count":
        kwargs["action"] = "count"
    else:
        if form.action == "append":
            kwargs["action"] = "append"
        if form.nargs is not None:
            kwargs["nargs"] = form.nargs
        if form.nargs == "?":
            kwargs["const"] = form.const
        kwargs["type"] = _converter(form.value_type)
        if form.choices:
            kwargs["choices"] = form.choices
    parser.add_argument(*form.options, **kwargs)


class _Parser(argparse.ArgumentParser):
    """An argument parser that raises ServerInputError instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        _refuse(f"{self.prog}'s parser refuses it: {message}; fix the launch command")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        _refuse(message or "the release's parser stopped")


@cache
def _parser(release: str) -> _Parser:
    """Return an argument parser taking what ``release``'s own takes (built once per release): every spelling of
    every dest, each parsing as that release's parser parses it."""
    parser = _Parser(prog=f"SGLang {release}", add_help=False, allow_abbrev=True)
    for spec in args_of(release).by_dest.values():
        forms = {spec.form(option).options: spec.form(option) for option in spec.options}
        for form in forms.values():
            _add(parser, spec.dest, form)
    return parser


def _unknown(option: str, release: str) -> NoReturn:
    name = option.split("=", 1)[0]
    others = releases_with(name)
    if others:
        spec = args_of(others[-1]).by_option[name]
        here = args_of(release).by_dest.get(spec.dest)
        spelled = "" if here is None else f"; SGLang {release} spells it {here.options[0]}"
        _refuse(f"{name}: SGLang {release} has no such flag (only {release_span(list(others))} take it){spelled}")
    nearest = nearest_option(name, release)
    if nearest is not None:
        _refuse(f"{name}: SGLang {release} has no such flag; did you mean {nearest}?")
    _refuse(f"{name}: SGLang {release} has no such flag; `python -m sglang.launch_server --help` lists its flags")


def parse_command(command: LaunchCommand, release: str) -> ParsedCommand:
    """Return the arguments ``command`` gives, read as SGLang ``release`` reads them; raise ServerInputError (one
    line) for an unknown flag, a value its type or choices refuse, or a flag missing its value."""
    parser = _parser(release)
    try:
        namespace, extra = parser.parse_known_args(list(command.words))
    except ServerInputError:
        raise
    except (ValueError, TypeError, InvalidOperation) as exc:  # a converter's own error, past argparse's wrapping
        _refuse(f"a value SGLang {release} cannot read ({exc})")
    for word in extra:
        if word.startswith("-") and len(word) > 1:
            _unknown(word, release)
    if extra:
        _refuse(f"{escape_value(extra[0])!r}: a word that belongs to no flag of SGLang {release}; check the command")
    given = {dest: value for dest, value in vars(namespace).items() if not dest.startswith("_noop_")}
    typed = _typed_options(command.words, parser)
    values = tuple(
        CommandValue(dest, given[dest], typed.get(dest, dest)) for dest in _order(command.words, typed, given)
    )
    return ParsedCommand(release, command, values)


def _typed_options(words: tuple[str, ...], parser: _Parser) -> dict[str, str]:
    """Return each dest given and the spelling typed for it (the last typed wins, as argparse's value does)."""
    typed: dict[str, str] = {}
    for word in words:
        if not word.startswith("--"):
            continue
        option = word.split("=", 1)[0]
        exact = parser._option_string_actions.get(option)
        matches = (
            [exact]
            if exact is not None
            else [action for name, action in parser._option_string_actions.items() if name.startswith(option)]
        )
        dests = {action.dest for action in matches}
        if len(dests) == 1:
            typed[dests.pop()] = option
    return typed


def _order(words: tuple[str, ...], typed: dict[str, str], given: dict[str, object]) -> list[str]:
    seen = [dest for dest in typed if dest in given]
    return seen + [dest for dest in given if dest not in typed]


def command_start(text: str) -> ServerStart:
    """Return the server the launch command ``text`` describes, as a start-up whose arguments are its flags (read by
    the newest release that takes them); raise ServerInputError when no release takes them."""
    split = split_command(text)
    refusal: ServerInputError | None = None
    for release in reversed(RELEASES):
        try:
            parsed = parse_command(split, release)
        except ServerInputError as exc:
            refusal = refusal or exc
            continue
        values = {given.dest: given.value for given in parsed.values}
        return ServerStart(StartupArguments(0, Arguments("command", values, (), False)), None, None, None)
    assert refusal is not None
    raise refusal


__all__ = [
    "MAX_COMMAND",
    "command_start",
    "CommandValue",
    "LaunchCommand",
    "ParsedCommand",
    "human_readable_int",
    "parse_command",
    "split_command",
]
