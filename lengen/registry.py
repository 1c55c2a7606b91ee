"""Name -> builder maps. Each kind (tasks, encodings, samplers, ...) owns one Registry, and each
entry is one explicit `REGISTRY.add(name, builder)` line next to its module import."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from lengen.errors import LengenError, unknown_name

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, hints: dict[str, str] | None = None):
        """`hints`: well-known other names -> the entry an unknown name is suggested as (nope -> none)."""
        self.kind = kind
        self.hints = hints or {}
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        if name in self._items:
            raise KeyError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of `add`."""
        return lambda item: self.add(name, item)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise LengenError(self.unknown(name)) from None

    def unknown(self, name: str) -> str:
        """The message for a name that is not registered, with a did-you-mean and the valid names."""
        return unknown_name(self.kind, name, self.names(), self.hints)

    def names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
