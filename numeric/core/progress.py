"""Progress bars (tqdm) that stay quiet when the stream is not a terminal."""

from __future__ import annotations

import os
import sys

__all__ = ["Progress", "quiet_by_environment"]


def quiet_by_environment() -> bool:
    """Whether ``ATTNDYN_PROGRESS`` turns the automatic progress bars off (``0``,
    ``false``, ``no``, ``off``).

        >>> import os
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {"ATTNDYN_PROGRESS": "0"}):
        ...     quiet_by_environment()
        ...
        True
        >>> with mock.patch.dict(os.environ, {"ATTNDYN_PROGRESS": "1"}):
        ...     quiet_by_environment()
        ...
        False
    """
    return os.environ.get("ATTNDYN_PROGRESS", "").strip().lower() in ("0", "false", "no", "off")


class Progress:
    """Progress of ``total`` units of work: a thin wrapper of ``tqdm``.

    ``enabled=None`` shows the bar only when the stream is a TTY (tqdm's ``disable=None``),
    so logs, pipes and test runs stay clean, and never when the environment variable
    ``ATTNDYN_PROGRESS`` is ``0`` (set in sweep workers and by ``attndyn sweep
    --no-progress``). Redrawn at most every ``min_interval`` s.
    Use as a context manager or call :meth:`close`.

        >>> import io
        >>> with Progress(3, "demo", enabled=True, stream=io.StringIO()) as bar:
        ...     for _ in range(3):
        ...         bar.update()
        ...
        >>> bar.n
        3
    """

    def __init__(self, total: int, desc: str = "", *, enabled: bool | None = None, stream=None,
                 min_interval: float = 0.2, unit: str = "it"):
        from tqdm.auto import tqdm
        self.total = max(int(total), 0)
        self.desc = desc
        self.stream = sys.stderr if stream is None else stream
        if enabled is None and quiet_by_environment():
            enabled = False
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            try:
                enabled = bool(isatty()) if callable(isatty) else False
            except (ValueError, OSError):  # closed stream
                enabled = False
        self.enabled = bool(enabled)
        self._bar = tqdm(total=self.total, desc=desc, file=self.stream, mininterval=min_interval,
                         disable=not self.enabled, unit=unit, leave=True, dynamic_ncols=True)

    @property
    def n(self) -> int:
        return int(self._bar.n)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def update(self, n: int = 1) -> None:
        self._bar.update(int(n))

    def close(self) -> None:
        self._bar.close()
