"""``cupygraph.jit`` on methods: a jitted function is a descriptor, as ``jax.jit``'s is.

``obj.method`` is a ``BoundFunction``: calling it calls the jitted function with ``obj`` as argument
0. So, as in JAX, ``self`` counts in ``batch_argnums``, ``static_argnums`` and ``constant_argnums``
(``batch_argnums=1`` for ``def forward(self, x)``), and it is a static argument: part of the graph
key by its hash and ``==``. An instance compared by identity (the default) has graphs of its own;
the graph cache holds it while one of them is held (``clear()`` lets go). Arrays the method reads
through ``self`` are read by address, as a closure's are: captures warn about them; pass weights as
arguments (``constant_argnums``) to have them checked and bound.

``stats()``, ``clear()``, ``describe()`` and the rest of the jitted function are reachable from the
bound form and are the function's: every instance's graphs together. ``warmup()`` captures for this
instance. ``@staticmethod`` works above or below ``@jit``; ``@classmethod`` goes above it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Optional


def plain_function(fn: Any) -> tuple[Callable[..., Any], bool]:
    """The function ``jit`` records from ``fn``, and whether it binds an instance when it is an
    attribute of a class (a ``staticmethod`` does not)."""
    if isinstance(fn, staticmethod):
        return fn.__func__, False
    if isinstance(fn, classmethod):
        raise TypeError(
            f"jit got a classmethod ({fn.__func__.__qualname__}); put @classmethod above @cupygraph.jit, so the "
            "class is passed as argument 0 (a static argument, as self is for a method)"
        )
    return fn, True


class BoundFunction(functools.partial):  # type: ignore[type-arg]
    """A jitted function with an instance as argument 0 (``obj.method``); the call itself is
    ``functools.partial``'s, in C, so the compiled path reaches the function directly."""

    @property
    def __self__(self) -> Any:
        return self.args[0]

    @property
    def __func__(self) -> Any:
        return self.func

    def warmup(self, *example_args: Any, sizes: Optional[Sequence[int]] = None, progress: bool = True,
               budget_s: Optional[float] = None) -> int:
        """The function's ``warmup`` for this instance: the examples without ``self`` (default: the last
        call's arguments, with this instance)."""
        function: Any = self.func
        return int(function.capture_ahead(self.args[0], example_args, sizes, progress, budget_s))

    def call_with_descriptor(self, descriptor: Any, *args: Any, **kwargs: Any) -> Any:
        function: Any = self.func
        return function.call_with_descriptor(descriptor, self.args[0], *args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # stats, clear, describe, registry, config, ...
        return getattr(self.func, name)

    def __repr__(self) -> str:
        return f"<bound {self.func!r} of {self.args[0]!r}>"
