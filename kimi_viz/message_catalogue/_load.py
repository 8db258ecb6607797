"""Read the catalogue's entries from its TOML files (``data/``), checking each as it is read.

``data/common.toml`` says how an entry is written and holds the names and texts every stage file
shares; each stage file holds its entries as ``[[message]]`` tables. :func:`load` turns them into
:class:`~kimi_viz.message_catalogue.messages.Message` objects, in file order. The files are package data, so a mistake
in one (an unknown key, a missing field, an unknown name, a bad release span or stage) is the kit's
own bug: it raises ``ValueError`` naming the file and the entry's key the first time the catalogue is read.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from ..releases import release_order
from . import messages
from .messages import Message, Site, Stage

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli, tomllib's own code as published before it joined the standard library
    import tomli as tomllib

DATA = Path(__file__).resolve().parent / "data"

NAME = re.compile(r"[A-Z][A-Z0-9_]*")  # a site's FILE or FUNCTION in capitals: a name of [names]
TEXT = re.compile(r"\{([A-Z][A-Z0-9_]*)\}")  # {NAME} in a meaning or an after: a text of [texts]

# The keys of a [[message]] table and the type of each value.
ENTRY_KEYS: dict[str, type] = {
    "key": str,
    "name": str,
    "template": str,
    "stage": str,
    "sites": list,
    "fields": list,
    "meaning": str,
    "after": str,
    "origin": str,
    "aliases": list,
}
FILE_KEYS = ("stage", "moved", "names", "texts", "message")
MOVED_KEYS = ("old_file", "new_file", "new_since")


def span(text: str) -> tuple[str, ...]:
    """Return the releases of ``"0.5.18+"`` (0.5.18 and every later release of the table), of ``"0.5.17-0.5.18"``
    (both included) or of a single ``"0.5.17"``.

    A site SGLang still has in the newest release is written open, so a new release is one entry of the table;
    the releases are those of the table when the catalogue is read."""
    order = release_order()
    first, dash, last = text.partition("-")
    if not dash and first.endswith("+"):
        first = last = first[:-1]
        if first in order:
            last = order[-1]
    last = last or first
    for release in (first, last):
        if release not in order:
            raise ValueError(
                f"release span {text!r}: {release!r} is none of {', '.join(order)} (a span is A+, A-B or A)"
            )
    start, end = order.index(first), order.index(last)
    if end < start:
        raise ValueError(f"release span {text!r} runs backwards")
    return order[start : end + 1]


def _read(path: Path) -> dict[str, Any]:
    with path.open("rb") as file:
        try:
            return tomllib.load(file)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{path.name}: {error}") from None


def _table(value: object, where: str, *, names: bool = True) -> dict[str, str]:
    """Return a table of strings: ``[names]`` and ``[texts]`` (their names in capitals), or ``[moved]``."""
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{where}: expected a table of strings")
    lower = sorted(name for name in value if names and not NAME.fullmatch(name))
    if lower:
        raise ValueError(f"{where}: {lower}: a name is written in capitals (A-Z, 0-9, _)")
    return value


class _StageFile:
    """One stage file's settings: its stage, the names and texts it sees, how its moved sites read."""

    def __init__(self, path: Path, data: dict[str, Any], names: dict[str, str], texts: dict[str, str]) -> None:
        self.file = path.name
        unknown = sorted(set(data) - set(FILE_KEYS))
        if unknown:
            raise ValueError(f"{self.file}: unknown key(s) {unknown}; a stage file has {', '.join(FILE_KEYS)}")
        if not isinstance(data.get("message"), list):
            raise ValueError(f"{self.file}: no [[message]] entries")
        self.stage = self.stage_of(data.get("stage"), self.file)
        self.names = self.extend(names, _table(data.get("names", {}), f"{self.file}: [names]"), "names")
        self.texts = self.extend(texts, _table(data.get("texts", {}), f"{self.file}: [texts]"), "texts")
        self.moved = _table(data.get("moved", {}), f"{self.file}: [moved]", names=False)
        order = release_order()
        if self.moved and (sorted(self.moved) != sorted(MOVED_KEYS) or self.moved["new_since"] not in order[1:]):
            raise ValueError(
                f"{self.file}: [moved] has {', '.join(MOVED_KEYS)}, new_since one of {', '.join(order[1:])}; "
                f"not {self.moved}"
            )

    def extend(self, shared: dict[str, str], own: dict[str, str], table: str) -> dict[str, str]:
        """Return the names (or texts) of common.toml and this file's own, each defined once."""
        twice = sorted(set(shared) & set(own))
        if twice:
            raise ValueError(f"{self.file}: [{table}] {twice} are already in common.toml: each is defined once")
        return {**shared, **own}

    @staticmethod
    def stage_of(value: object, where: str) -> Stage:
        for stage in Stage:
            if stage.value == value:
                return stage
        raise ValueError(f"{where}: stage {value!r} is none of {', '.join(repr(s.value) for s in Stage)}")

    def name(self, value: str, where: str) -> str:
        """Return a site's FILE or FUNCTION, a name of [names] resolved."""
        if not NAME.fullmatch(value):
            return value
        if value not in self.names:
            raise ValueError(f"{where}: unknown name {value!r} (names are defined in [names])")
        return self.names[value]

    def text(self, value: str, where: str) -> str:
        """Return a meaning or an after with each ``{NAME}`` replaced by its text of [texts]."""

        def replace(match: re.Match[str]) -> str:
            if match[1] not in self.texts:
                raise ValueError(f"{where}: unknown text {{{match[1]}}} (texts are defined in [texts])")
            return self.texts[match[1]]

        return TEXT.sub(replace, value)

    def sites(self, value: object, where: str) -> tuple[Site, ...]:
        """Return the sites one item of ``sites`` stands for: one, or two for a moved site."""
        if isinstance(value, dict):
            return self.moved_sites(value, where)
        if not (isinstance(value, list) and len(value) == 4 and all(isinstance(v, str) for v in value)):
            raise ValueError(f"{where}: a site is [FILE, FUNCTION, KIND, RELEASES] or a moved site, not {value!r}")
        file, function, kind, releases = value
        return (Site(self.name(file, where), self.name(function, where), kind, self.span(releases, where)),)

    def moved_sites(self, value: dict[str, Any], where: str) -> tuple[Site, ...]:
        """Return the two sites of a moved site: the old file's up to ``new_since``, the new file's from it."""
        named = {"function"} if "function" in value else {"old", "new"}
        if not (
            self.moved
            and named | {"kind"} <= set(value) <= named | {"kind", "since", "new_file"}
            and all(isinstance(v, str) for v in value.values())
        ):
            raise ValueError(
                f"{where}: a moved site is {{ function = F, kind = K }} or {{ old = F, new = F, kind = K }}, "
                f"maybe with since and new_file, in a file with a [moved] table; not {value!r}"
            )
        old, new = (value["function"],) * 2 if "function" in value else (value["old"], value["new"])
        order = release_order()
        new_since = self.moved["new_since"]
        until = order[order.index(new_since) - 1]
        old_file, new_file = self.moved["old_file"], value.get("new_file", self.moved["new_file"])
        kind, since = value["kind"], value.get("since", order[0])
        return (
            Site(self.name(old_file, where), self.name(old, where), kind, self.span(f"{since}-{until}", where)),
            Site(self.name(new_file, where), self.name(new, where), kind, self.span(f"{new_since}+", where)),
        )

    @staticmethod
    def span(text: str, where: str) -> tuple[str, ...]:
        try:
            return span(text)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None

    def message(self, entry: object, index: int) -> Message:
        """Return the :class:`~kimi_viz.message_catalogue.messages.Message` of one ``[[message]]`` table."""
        key = entry.get("key") if isinstance(entry, dict) else None
        where = f"{self.file}: message {key!r}" if isinstance(key, str) else f"{self.file}: message #{index + 1}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: not a table")
        for field, kind in ENTRY_KEYS.items():
            if field in entry and not isinstance(entry[field], kind):
                raise ValueError(f"{where}: {field} is a {kind.__name__}, not {entry[field]!r}")
        unknown = sorted(set(entry) - set(ENTRY_KEYS))
        missing = [field for field in ("key", "sites") if field not in entry]
        problems = [f"unknown key(s) {unknown}"] * bool(unknown) + [f"missing {missing}"] * bool(missing)
        if problems or ("name" in entry) == ("template" in entry):
            raise ValueError(
                f"{where}: {'; '.join(problems) or 'both or neither of name and template'} (an entry has key, "
                f"sites and either name, a MSG_* constant of kimi_viz.message_catalogue.messages, or template; it may "
                f"have "
                f"{', '.join(ENTRY_KEYS)})"
            )
        fields = {field: entry[field] for field in ("fields", "origin", "name", "aliases") if field in entry}
        for field in ("fields", "aliases"):
            if field in fields:
                if not all(isinstance(v, str) for v in fields[field]):
                    raise ValueError(f"{where}: {field} holds strings only")
                fields[field] = tuple(fields[field])
        for field in ("meaning", "after"):
            if field in entry:
                fields[field] = self.text(entry[field], where)
        template = self.template(entry, where)
        stage = self.stage_of(entry["stage"], where) if "stage" in entry else self.stage
        sites = tuple(site for value in entry["sites"] for site in self.sites(value, where))
        try:
            return Message(entry["key"], template, stage, sites, **fields)
        except ValueError as error:  # the template's fields, their forms: Message says which
            raise ValueError(f"{where}: {str(error).removeprefix(entry['key'] + ': ')}") from None

    @staticmethod
    def template(entry: dict[str, Any], where: str) -> str:
        if "template" in entry:
            return entry["template"]
        name = entry["name"]
        text = getattr(messages, name, None) if name.startswith("MSG_") else None
        if not isinstance(text, str):
            raise ValueError(f"{where}: name {name!r} is no MSG_* constant of kimi_viz.message_catalogue.messages")
        return text


def load(stage_files: tuple[str, ...], folder: Path = DATA) -> tuple[Message, ...]:
    """Return the entries of ``folder/<stage>.toml`` for each stage file, in order (with ``common.toml``)."""
    common = _read(folder / "common.toml")
    unknown = sorted(set(common) - {"names", "texts"})
    if unknown:
        raise ValueError(f"common.toml: unknown key(s) {unknown}; it has [names] and [texts]")
    names = _table(common.get("names", {}), "common.toml: [names]")
    texts = _table(common.get("texts", {}), "common.toml: [texts]")
    catalogue: list[Message] = []
    seen: dict[str, str] = {}
    for stage_file in stage_files:
        path = folder / f"{stage_file}.toml"
        data = _read(path)
        stage = _StageFile(path, data, names, texts)
        for index, entry in enumerate(data["message"]):
            message = stage.message(entry, index)
            if message.key in seen:
                raise ValueError(
                    f"{path.name}: message {message.key!r}: the key is already an entry of {seen[message.key]}"
                )
            seen[message.key] = path.name
            catalogue.append(message)
    return tuple(catalogue)
