"""Methods that work on an instance and on the class, as E2B's do:
``sandbox.kill()`` and ``Sandbox.kill(sandbox_id)``."""

from __future__ import annotations

import functools
from typing import Any, Callable, Generic, Optional, TypeVar, overload

from typing_extensions import Concatenate, ParamSpec

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=Callable[..., Any])


class either(Generic[P, R, C]):
    """``on_instance`` when reached through an instance, ``on_class`` (which
    takes the sandbox id first) when reached through the class."""

    def __init__(self, on_instance: Callable[Concatenate[Any, P], R], on_class: C) -> None:
        self._on_instance = on_instance
        self._on_class = on_class
        functools.update_wrapper(self, on_instance)  # type: ignore[arg-type]

    @overload
    def __get__(self, obj: None, owner: Optional[type] = None) -> C: ...

    @overload
    def __get__(self, obj: object, owner: Optional[type] = None) -> Callable[P, R]: ...

    def __get__(self, obj: Optional[object], owner: Optional[type] = None) -> Any:
        if obj is None:
            if isinstance(self._on_class, (classmethod, staticmethod)):
                # A classmethod's function wants the class it was reached through.
                return self._on_class.__get__(obj, owner)
            return self._on_class
        return functools.partial(self._on_instance, obj)
