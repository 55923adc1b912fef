"""What ``cupygraph.jit`` is given: the config it resolves and ``JitOptions``, its options written once.

``JitOptions`` is the only list of ``jit``'s options: ``jit``'s overloads take their keyword
arguments from its constructor (``jit_signature``), and ``GraphedFunction`` reads them from it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any, Optional, ParamSpec, Protocol, TypeVar, Union, cast, overload

from ..config.defaults import apply_env_overrides, default_config
from ..config.files import load_config
from ..config.messages import did_you_mean
from ..config.model import CUDAGraphConfig
from ..config.modes import short_repr
from .arguments import Argnums, Positions

ConfigLike = Union[CUDAGraphConfig, dict[str, Any], str, "os.PathLike[str]", None]


def resolve_config(config: ConfigLike) -> CUDAGraphConfig:
    """A config object, a mapping of fields, or a path to a config file; ``CUPYGRAPH_DISABLE`` wins."""
    if config is None:
        resolved = default_config()
    elif isinstance(config, CUDAGraphConfig):
        resolved = config
    elif isinstance(config, dict):
        resolved = CUDAGraphConfig.from_dict(config)
    elif isinstance(config, (str, os.PathLike)):
        resolved = load_config(config)
    else:
        raise TypeError(
            f"config must be a CUDAGraphConfig, a dict of fields or a config file path, got {type(config).__name__}"
        )
    return apply_env_overrides(resolved)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JitOptions:
    """The options of ``jit`` (see ``GraphedFunction`` for what each one does to a call).

    config: a ``CUDAGraphConfig``, a dict of its fields or a config file (default: the default config).
    batch_argnums: positions of the arrays whose leading axis is the batch.
    static_argnums: positions of hashable Python values that are part of the key.
    constant_argnums: positions of arrays captured by address (weights).
    descriptor_fn: ``descriptor_fn(*args)`` gives the call's ``BatchDescriptor`` (or its size).
    out_batched: which outputs carry the batch axis: a bool, or the outputs' structure of bools.
    """

    config: ConfigLike = None
    batch_argnums: Argnums = (0,)
    static_argnums: Argnums = ()
    constant_argnums: Argnums = ()
    descriptor_fn: Optional[Callable[..., Any]] = None
    out_batched: Any = None

    def __post_init__(self) -> None:
        positions = self.positions()  # errors now, where the options are given
        if self.descriptor_fn is not None and not callable(self.descriptor_fn):
            raise TypeError(f"descriptor_fn must be a callable (given the call's arguments, it returns a "
                            f"BatchDescriptor or a row count), got {type(self.descriptor_fn).__name__} "
                            f"{short_repr(self.descriptor_fn)}")
        if not positions.batch and self.descriptor_fn is None:
            raise ValueError("give batch_argnums (arrays whose leading axis is the batch) or a descriptor_fn")

    @classmethod
    def given(cls, front: str, options: dict[str, Any]) -> JitOptions:
        """The options a front door (``front``: "jit", as messages name it) was given as keywords; an
        unknown name is a TypeError that names ``front`` and suggests the closest option."""
        names = [field.name for field in dataclasses.fields(cls)]
        for name in options:
            if name not in names:
                raise TypeError(f"{front}() got an unknown option {name!r};{did_you_mean(name, names)} "
                                f"options: {', '.join(names)}")
        return cls(**options)

    def positions(self, fn: Optional[Callable[..., Any]] = None) -> Positions:
        """The argument positions; given ``fn``, checked against its parameters too."""
        positions = Positions.parse(self.batch_argnums, self.static_argnums, self.constant_argnums)
        if fn is not None:
            positions.check_fits(fn)
        return positions


P = ParamSpec("P")
F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R", covariant=True)


class FrontDoor(Protocol[P, R]):
    """``@door``, ``door(fn, **options)`` and ``@door(**options)``, with the options of ``P``."""

    @overload
    def __call__(self, fn: F, /, *args: P.args, **kwargs: P.kwargs) -> R: ...

    @overload
    def __call__(self, fn: None = None, /, *args: P.args, **kwargs: P.kwargs) -> Callable[[F], R]: ...


def takes_options_of(
    options: Callable[P, JitOptions], result: type[R]
) -> Callable[[Callable[..., Any]], FrontDoor[P, R]]:
    """Type a decorator front door's keyword arguments as ``options``'s constructor parameters,
    so the option list is written once (in ``JitOptions``) and still checked by mypy."""

    def typed(front: Callable[..., Any]) -> FrontDoor[P, R]:
        return cast("FrontDoor[P, R]", front)

    return typed
