from collections.abc import Callable
from typing import Any

MAX_ARGUMENTS: int

def references(item: list[Any]) -> tuple[int, int, int, int]: ...

class Replayer:
    served: int
    passed: int
    plan: Any
    def __init__(
        self, *, array_type: type, shapes: tuple[tuple[int, ...], ...], dtypes: tuple[Any, ...], plan: Any,
        entry: Any, token: Any, run: Any, binder: Any, slot: Any, recording: Any, backend: Any, lock: Any,
        current_stream: Callable[[], Any], use_tick: Callable[[], int], graph_launch: int = 0, device: int = -1,
    ) -> None: ...
    def replay(self, args: tuple[Any, ...]) -> Any: ...

class FastFunction:
    _replayer: Replayer | None
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
