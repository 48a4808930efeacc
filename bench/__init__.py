"""The tools that are run again, each as ``python -m bench.NAME`` from the repository root."""

import argparse
import math


def positive(text: str, kind: type = int) -> float:
    """An argparse type: a finite ``kind`` above 0."""
    try:
        value = kind(text)
    except ValueError:
        value = 0
    if not 0 < value < math.inf:
        what = "integer" if kind is int else "number"
        raise argparse.ArgumentTypeError(f"expected a positive {what}, got '{text}'")
    return value
