"""Paths as a public issue may name them: no absolute local path, no user name, no host name.

``issue.md`` and the emitted repro are meant to be pasted into a public tracker, so every path or
command they carry goes through :func:`public_path` (one path: relative to the current folder when
it lies below it, else its own name), :func:`public_command` (a command line: each word that names a
path, the command still runnable from the folder it was given in when its paths lie below it) or
:func:`public_text` (any other text: the words that name a path, the spacing kept).
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
from pathlib import Path

UNNAMED = "PATH"  # what a path whose own name is private (the user's, the home folder's or the machine's) shows
_WORD = re.compile(r"\S+")


def _home() -> Path | None:
    try:
        return Path.home()
    except (RuntimeError, KeyError, OSError):  # no HOME and no password entry
        return None


def private_names() -> set[str]:
    """Return the names a public output never shows: the user's, the home folder's and the machine's."""
    names = set()
    try:
        names.add(getpass.getuser())
    except (OSError, KeyError, ImportError):  # no user name in the environment nor in the password database
        pass
    home = _home()
    if home is not None:
        names.add(home.name)
    host = os.uname().nodename if hasattr(os, "uname") else os.environ.get("COMPUTERNAME", "")
    names.update((host, host.partition(".")[0]))
    return {name for name in names if name}


def _relative_parts(full: Path, here: Path | None) -> tuple[str, ...] | None:
    """Return the parts of ``full`` below the folder ``here`` (links resolved if need be); None when not below it."""
    if here is None:
        return None
    for path, base in ((full, here), (Path(os.path.realpath(full)), Path(os.path.realpath(here)))):
        try:
            return path.relative_to(base).parts
        except ValueError:
            continue
    return None


def public_path(path: str | os.PathLike[str]) -> str:
    """Return ``path`` as a public issue may name it: relative to the current folder when it lies below it, else
    its own name (the last part: a manifest's folder name, a file's name).

    ``~`` is read as the home folder only to find where the path lies: the answer never holds ``~``, the home
    folder, the user name or the host name. A relative answer that would pass through one of those names is cut
    to the path's own name, and a path whose own name is one of them is :data:`UNNAMED`.
    """
    text = os.path.expanduser(os.fspath(path))
    try:
        here: Path | None = Path.cwd()
    except OSError:  # the current folder was removed
        here = None
    full = Path(os.path.normpath(os.path.join(here or os.sep, text)))
    private = private_names()
    parts = _relative_parts(full, here)
    if parts is not None and not private.intersection(parts):
        return Path(*parts).as_posix() if parts else "."
    return full.name if full.name and full.name not in private else UNNAMED


def _names_a_path(word: str) -> bool:
    return "://" not in word and (word.startswith(("/", "~")) or "/" in word) and bool(re.search(r"\w", word))


def _public_word(word: str) -> str:
    if word.startswith("-") and "=" in word:  # --option=PATH
        option, _, value = word.partition("=")
        return f"{option}={_public_word(value)}" if value else word
    return public_path(word) if _names_a_path(word) else word


def public_command(command: str) -> str:
    """Return a command line with each word that names a path (``/…``, ``~…``, ``a/b``, ``--opt=PATH``) made public
    by :func:`public_path`, quoted again as a shell reads it; a command with no such word comes back unchanged.

    A path below the current folder stays a relative path, so the command still runs from that folder.
    """
    try:
        words = shlex.split(command)
    except ValueError:  # not a well-formed command line (an unclosed quote): treated as text
        return public_text(command)
    public = [_public_word(word) for word in words]
    return command if public == words else shlex.join(public)


def public_text(text: str) -> str:
    """Return ``text`` with each whitespace-separated word that names a path made public; the rest, spacing
    included, as it was."""
    return _WORD.sub(lambda match: _public_word(match.group(0)), text)


__all__ = ["UNNAMED", "private_names", "public_command", "public_path", "public_text"]
