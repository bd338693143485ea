"""A tiny progress bar on stderr that stays quiet when stderr is not a terminal."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """Progress of ``total`` units of work, redrawn at most every ``min_interval`` s.

    ``enabled=None`` shows the bar only when the stream is a TTY, so logs, pipes
    and test runs stay clean. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, total: int, desc: str = "", *, enabled: bool | None = None, stream=None,
                 min_interval: float = 0.2, width: int = 28):
        self.total = max(int(total), 0)
        self.desc = desc
        self.stream = sys.stderr if stream is None else stream
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            try:
                enabled = bool(isatty()) if callable(isatty) else False
            except (ValueError, OSError):  # closed stream
                enabled = False
        self.enabled = bool(enabled)
        self.min_interval = float(min_interval)
        self.width = int(width)
        self.n = 0
        self._t0 = time.perf_counter()
        self._last = -1.0
        self._drawn = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def render(self) -> str:
        frac = 1.0 if self.total == 0 else min(self.n / self.total, 1.0)
        filled = int(round(frac * self.width))
        el = time.perf_counter() - self._t0
        eta = (el / frac - el) if frac > 0 else float("nan")
        bar = "#" * filled + "." * (self.width - filled)
        left = f" eta {eta:6.1f}s" if frac < 1 and eta == eta else ""
        return (f"{self.desc} [{bar}] {100 * frac:5.1f}% {self.n}/{self.total} "
                f"{el:6.1f}s{left}")

    def update(self, n: int = 1) -> None:
        self.n += int(n)
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last < self.min_interval and self.n < self.total:
            return
        self._last = now
        self.stream.write("\r" + self.render())
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\r" + self.render() + "\n")
            self.stream.flush()
            self._drawn = False
