"""A monotonic clock that moves only when a test moves it, for timers that take a `clock` argument."""

from __future__ import annotations

from collections.abc import Callable


class FakeClock:
    """Call it for the time. `set` and `advance` move it forward and then call every `on_move` listener, so that
    whoever waits with a timeout read from this clock (the real wait does not follow it) looks again."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._listeners: list[Callable[[], None]] = []

    def __call__(self) -> float:
        return self.now

    def on_move(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def set(self, when: float) -> None:
        if when < self.now:
            raise ValueError(f"a monotonic clock does not go back ({when} < {self.now})")
        self.now = when
        for listener in self._listeners:
            listener()

    def advance(self, seconds: float) -> None:
        self.set(self.now + seconds)
