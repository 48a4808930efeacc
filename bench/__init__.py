"""The tools that are run again, each as ``python -m bench.NAME`` from the repository root; what they share."""

import argparse
import json
import math
import os
import pathlib
from typing import Any, Iterable, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where main.py is


def positive(text: str, kind: type = int) -> float:
    """An argparse type: a finite ``kind`` above 0."""
    try:
        value = kind(text)
    except ValueError:
        value = 0
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a positive {'integer' if kind is int else 'number'}, got '{text}'")
    return value


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """The lines of a markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]


def write_report(prefix: str, markdown: str, data: Any) -> list[str]:
    """Write ``PREFIX.md`` and ``PREFIX.json`` (``data``, NaN as null), each whole or not at all; their paths."""
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    data = json.loads(json.dumps(data), parse_constant=lambda nan: None)  # written as NaN, read back as None
    texts = {prefix + ".md": markdown, prefix + ".json": json.dumps(data, indent=1) + "\n"}
    for path, text in texts.items():
        pathlib.Path(path + ".tmp").write_text(text)
        os.replace(path + ".tmp", path)
    return list(texts)
