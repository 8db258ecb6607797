"""The kit's frozen records: :func:`frozen`, a frozen dataclass whose equality, hash and repr are shared.

``@dataclass(frozen=True)`` compiles six methods from source for every class when its module is
imported; the on-call commands import about seventy frozen records, and compiling their
``__eq__``, ``__hash__`` and ``__repr__`` was a seventh of ``kimi-viz whatif``'s run
(``benchmarks/bench_cli.py``). A class decorated with :func:`frozen` is that same frozen dataclass
(``dataclasses.fields``, ``replace``, ``asdict`` and ``FrozenInstanceError`` as usual) whose three
methods are the ones below, written once: they compare, hash and show the fields exactly as the
generated ones do — the fields with ``compare`` (``hash`` where set), those with ``repr``, the class's
qualified name, ``NotImplemented`` for another class. ``tests/test_records.py`` holds them to the
generated ones. A method the class writes itself is kept.
"""

from __future__ import annotations

import reprlib
from dataclasses import Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # typing has it from Python 3.11; the checker reads it here, the kit runs on 3.10 too
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Any:
        return lambda decorated: decorated


T = TypeVar("T")

# Per class: the names compared, hashed and shown, worked out on first use (fields are final by then).
_NAMES: dict[type, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {}


def _names(cls: type) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    names = _NAMES.get(cls)
    if names is None:
        every: tuple[Field[Any], ...] = fields(cls)
        names = _NAMES[cls] = (
            tuple(f.name for f in every if f.compare),
            tuple(f.name for f in every if (f.compare if f.hash is None else f.hash)),
            tuple(f.name for f in every if f.repr),
        )
    return names


def _values(record: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(getattr(record, name) for name in names)


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        compared = _names(self.__class__)[0]
        return _values(self, compared) == _values(other, compared)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(_values(self, _names(self.__class__)[1]))


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _names(self.__class__)[2])
    return f"{self.__class__.__qualname__}({shown})"


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def frozen(cls: type[T]) -> type[T]:
    """Return ``cls`` as a frozen dataclass with the shared ``__eq__``, ``__hash__`` and ``__repr__``."""
    own = dict(cls.__dict__)
    record = dataclass(frozen=True, repr=False, eq=False)(cls)
    if "__eq__" not in own:
        record.__eq__ = _eq  # type: ignore[method-assign]
    if own.get("__hash__") is None:  # none written, or the None Python sets beside an own __eq__
        record.__hash__ = _hash  # type: ignore[method-assign]
    if "__repr__" not in own:
        record.__repr__ = _repr  # type: ignore[method-assign]
    return record
