"""Lazy public names for a package: each is imported from its module on first use, then kept.

Every package of the kit exports its public names this way, so ``import kimi_viz`` (or any of its
sub-packages) imports nothing heavy until a name is used. One naming rule makes this safe: no
function shares its name with a module beside it (a verb's own module is private, ``split/_replay.py``),
so a name kept on the package is never replaced by a submodule of the same name when that submodule
is imported.
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the capture shim milliseconds per process
if TYPE_CHECKING:  # pragma: no cover - the capture shim imports this in every process: nothing more at run time
    from collections.abc import Callable
    from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return ``(__getattr__, __dir__)`` for ``package``: ``exports`` maps each public name to its module.

    A module name starting with ``kimi_viz`` is absolute; any other is relative to ``package``.
    """

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = where if where.startswith("kimi_viz") else f"{package}.{where}"
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(vars(sys.modules[package])))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
