"""A stand-in for TensorBoard's SummaryWriter that keeps what it is given, for tests of what a run logs."""

from __future__ import annotations


class RecordingWriter:
    """Keeps every scalar as ``(tag, value, step)`` and the tags of all calls in order."""

    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []
        self.tags: list[str] = []

    def add_scalar(self, tag, value, step) -> None:
        self.scalars.append((tag, float(value), int(step)))
        self.tags.append(tag)

    def add_histogram(self, tag, *args, **kwargs) -> None:
        self.tags.append(tag)

    def flush(self) -> None:
        pass

    def values(self, tag: str) -> list[float]:
        """Every value logged under ``tag``, in order."""
        return [value for name, value, _ in self.scalars if name == tag]
