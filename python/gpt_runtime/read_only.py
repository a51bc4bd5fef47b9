"""ReadOnly: a read-only attribute declared in one line, for the getters that only hand out what an
object holds. gpt imports it from here (gpt_runtime imports nothing of gpt).

    class Pool:
        block_size = ReadOnly[int]()                       # reads self._block_size
        norm = ReadOnly[str](of="spec", doc="The norm.")   # reads self.spec.norm

It behaves as the property it replaces (`@property def block_size(self) -> int: return
self._block_size`): instances read the value, the class reads the descriptor (whose __doc__ help()
shows), and assigning or deleting it raises the AttributeError a property without a setter or
deleter raises. Type checkers see an int on instances, and refuse assignments (the setter takes
Never)."""

import operator
from collections.abc import Callable
from typing import Any, Generic, Never, NoReturn, Self, TypeVar, overload

T = TypeVar("T")


class ReadOnly(Generic[T]):
    """A read-only attribute: `name = ReadOnly[T]()` in a class body reads the instance's `_name`;
    `of="other"` reads `other.name` instead (an attribute of the same name, of what the instance's
    `other` is). `doc`: the attribute's docstring."""

    def __init__(self, doc: str | None = None, *, of: str | None = None) -> None:
        self.__doc__ = doc
        self._of = of
        self.__name__ = ""  # the attribute's name, which __set_name__ gives
        self._read: Callable[[object], Any] = _unnamed

    def __set_name__(self, owner: type, name: str) -> None:
        self.__name__ = name
        self._read = operator.attrgetter(f"{self._of}.{name}" if self._of else f"_{name}")

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object, owner: type | None = None) -> "T | Self":
        if instance is None:
            return self
        value: T = self._read(instance)
        return value

    def __set__(self, instance: object, value: Never) -> NoReturn:
        raise AttributeError(f"property {self.__name__!r} of {type(instance).__name__!r} object has no setter")

    def __delete__(self, instance: object) -> NoReturn:
        raise AttributeError(f"property {self.__name__!r} of {type(instance).__name__!r} object has no deleter")


def _unnamed(instance: object) -> NoReturn:
    raise TypeError("a ReadOnly is declared in a class body, which names it: this one was made outside one")
