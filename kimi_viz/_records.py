"""The kit's frozen records: :func:`frozen`, a frozen dataclass whose methods are written once.

``@dataclass(frozen=True)`` compiles six methods from source for every class when its module is
imported; the on-call commands import about seventy frozen records, and compiling them was a fifth
of ``kimi-viz whatif``'s run (``benchmarks/bench_cli.py``). A class decorated with :func:`frozen` is a
dataclass (``dataclasses.fields``, ``replace``, ``asdict`` as usual) whose ``__init__`` alone is
generated; the other five are the functions below, shared by every record:

* ``__eq__``, ``__hash__`` and ``__repr__`` compare, hash and show the fields exactly as the generated
  ones do: the fields with ``compare`` (``hash`` where set), those with ``repr``, the class's qualified
  name, ``NotImplemented`` for another class, ``...`` for a record inside itself;
* ``__setattr__`` and ``__delattr__`` raise :class:`dataclasses.FrozenInstanceError` as a frozen
  dataclass's do. The one assignment they let through is ``__init__``'s first one of each field, so an
  object is frozen once built; ``object.__setattr__`` in ``__post_init__`` works as with any frozen
  dataclass. (Its ``__dataclass_params__.frozen`` reads False: the check is these methods.)

``tests/test_records.py`` holds them to the generated ones. A method the class writes itself is kept.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from dataclasses import Field, FrozenInstanceError, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar, overload

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


def _setattr(self: Any, name: str, value: Any) -> None:
    own = self.__dict__
    if name in own or name not in self.__dataclass_fields__:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    own[name] = value  # __init__ setting a field for the first time (a record's fields live in its __dict__)


def _delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


SHARED = {"__eq__": _eq, "__hash__": _hash, "__repr__": _repr, "__setattr__": _setattr, "__delattr__": _delattr}


def _freeze(cls: type[T], kw_only: bool) -> type[T]:
    own = dict(cls.__dict__)
    record = dataclass(repr=False, eq=False, kw_only=kw_only)(cls)
    for name, method in SHARED.items():
        # __hash__: none written, or the None Python sets beside an own __eq__ (a frozen dataclass hashes then too)
        if own.get(name) is None if name == "__hash__" else name not in own:
            setattr(record, name, method)
    return record


@overload
def frozen(cls: type[T], /) -> type[T]: ...


@overload
def frozen(*, kw_only: bool = ...) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def frozen(cls: type[T] | None = None, /, *, kw_only: bool = False) -> Any:
    """Return ``cls`` as a frozen record: a dataclass with the shared methods above (its own ones kept).

    ``@frozen(kw_only=True)`` makes a wide record's fields keyword-only, so that every call names what it sets.
    """
    if cls is None:
        return lambda decorated: _freeze(decorated, kw_only)
    return _freeze(cls, kw_only)
