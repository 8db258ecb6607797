"""The kit's frozen records (``kimi_viz._records.frozen``) compare, hash and show themselves exactly as
``@dataclass(frozen=True)`` does, and every frozen dataclass in the package is one of them."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any

import pytest

import kimi_viz
from kimi_viz._records import SHARED, frozen


def _point_class(decorate: Any) -> Any:
    @decorate
    class Point:
        """Fields of every kind: compared or not, shown or not, hashed against or beside ``compare``."""

        x: int
        y: int = 0
        label: str = field(default="", compare=False)
        secret: str = field(default="s", repr=False)
        weight: float = field(default=1.0, hash=False)
        salt: int = field(default=0, compare=False, hash=True)
        items: list[Any] = field(default_factory=list, hash=False)

    return Point


STANDARD = _point_class(dataclass(frozen=True))
OURS = _point_class(frozen)
VALUES = [
    {"x": 1},
    {"x": 1, "y": 2},
    {"x": 1, "label": "other"},
    {"x": 1, "secret": "t"},
    {"x": 1, "weight": 2.0},
    {"x": 1, "salt": 7},
    {"x": 1, "items": [1, 2]},
    {"x": 2, "y": 2, "label": "a", "secret": "b", "weight": 0.5, "salt": 3},
]


@pytest.mark.parametrize("a", VALUES, ids=str)
@pytest.mark.parametrize("b", VALUES, ids=str)
def test_equality_matches_the_generated_one(a, b):
    assert (OURS(**a) == OURS(**b)) is (STANDARD(**a) == STANDARD(**b))
    assert (OURS(**a) != OURS(**b)) is (STANDARD(**a) != STANDARD(**b))


@pytest.mark.parametrize("values", VALUES, ids=str)
def test_hash_and_repr_match_the_generated_ones(values):
    assert hash(OURS(**values)) == hash(STANDARD(**values))
    assert repr(OURS(**values)) == repr(STANDARD(**values))


def test_a_record_that_holds_itself_is_shown_as_the_generated_repr_shows_it():
    ours, standard = OURS(x=1), STANDARD(x=1)
    ours.items.append(ours)
    standard.items.append(standard)
    assert repr(ours) == repr(standard)
    assert repr(ours).endswith("Point(x=1, y=0, label='', weight=1.0, salt=0, items=[...])")


def test_another_class_with_the_same_fields_is_not_equal_and_frozen_errors_stay():
    assert OURS(x=1) != STANDARD(x=1)
    assert OURS(x=1).__eq__(STANDARD(x=1)) is NotImplemented
    with pytest.raises(dataclasses.FrozenInstanceError):
        OURS(x=1).x = 2  # type: ignore[misc]
    assert dataclasses.replace(OURS(x=1), y=5) == OURS(x=1, y=5)
    assert [f.name for f in dataclasses.fields(OURS)] == [f.name for f in dataclasses.fields(STANDARD)]


def test_a_subclass_compares_by_its_own_fields_and_not_equal_to_its_base():
    @frozen
    class Base:
        """A base record."""

        a: int

    @frozen
    class Child(Base):
        """A record that adds a field."""

        b: int = 0

    assert Child(1, 2) == Child(1, 2) and Child(1, 2) != Child(1, 3)
    assert Child(1) != Base(1)
    assert repr(Child(1, 2)).endswith("Child(a=1, b=2)")


def test_methods_a_class_writes_itself_are_kept():
    @frozen
    class Own:
        """A record with its own equality and repr (and so, as the generated one would, the shared hash)."""

        a: int

        def __eq__(self, other: object) -> bool:
            return True

        def __repr__(self) -> str:
            return "own"

    assert Own(1) == Own(2) and repr(Own(1)) == "own" and hash(Own(1)) == hash((1,))


def _package_dataclasses() -> list[type]:
    found = []
    for info in pkgutil.walk_packages(kimi_viz.__path__, "kimi_viz."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == info.name:
                found.append(value)
    return found


def test_every_frozen_dataclass_in_the_package_is_a_record_with_the_shared_methods():
    """No ``@dataclass(frozen=True)`` is left (it would compile its own methods): every frozen one is a record."""
    classes = _package_dataclasses()
    assert not [cls for cls in classes if cls.__dataclass_params__.frozen]  # type: ignore[attr-defined]
    records = [cls for cls in classes if cls.__setattr__ is SHARED["__setattr__"]]
    assert len(records) >= 100
    for cls in records:
        for name, method in SHARED.items():
            assert getattr(cls, name) is method or name in cls.__dict__, (cls, name)


def test_a_record_is_frozen_once_built_as_a_frozen_dataclass_is():
    """Every field, and any other name, refuses assignment and deletion after ``__init__``, with the same errors."""
    for cls in (OURS, STANDARD):
        point = cls(x=1)
        for name in ("x", "label", "items", "not_a_field"):
            with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{name}'"):
                setattr(point, name, 2)
            with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete field '{name}'"):
                delattr(point, name)
        assert point == cls(x=1)


def test_post_init_may_set_a_field_as_in_a_frozen_dataclass():
    @frozen
    class Normalised:
        """A record whose ``__post_init__`` rewrites a field the way the kit's scenarios do."""

        name: str

        def __post_init__(self) -> None:
            object.__setattr__(self, "name", self.name.lower())

    assert Normalised("ABC").name == "abc"
    with pytest.raises(dataclasses.FrozenInstanceError):
        Normalised("x").name = "y"  # type: ignore[misc]
