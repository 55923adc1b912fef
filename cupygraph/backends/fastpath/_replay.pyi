from collections.abc import Callable
from typing import Any

MAX_ARGUMENTS: int
MAX_BANKS: int
MAX_POSITIONS: int
MAX_SLOTS: int

def references(item: list[Any]) -> tuple[int, int, int, int]: ...
def tick() -> int: ...

class ReplayCounts:
    replays: int
    bound_calls: int
    last_used: int
    last_bank: int
    @property
    def hits(self) -> dict[int, int]: ...

class FamilyState:
    @property
    def generation(self) -> int: ...
    def bump(self) -> None: ...

class Record:
    served: int
    passed: int
    generation: int
    counts: ReplayCounts
    def __init__(
        self, *, array_type: type, arguments: tuple[Any, ...], shapes: tuple[tuple[int, ...], ...],
        strides: tuple[tuple[int, ...], ...], dtypes: tuple[Any, ...], outputs: tuple[tuple[Any, ...], ...],
        structure: Any, allocate: Callable[..., Any], device: int, stream: int,
        banks: tuple[tuple[int, int, tuple[int, ...], Callable[[], Any]], ...], rows: int, counts: ReplayCounts,
        family: FamilyState, generation: int, lock: Any, current_stream: Callable[[], Any], graph_launch: int = 0,
    ) -> None: ...
    def replay(self, args: tuple[Any, ...]) -> Any: ...

class FastFunction:
    record: Record | None
    miss: Callable[..., Any] | None
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
