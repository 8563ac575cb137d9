"""Data sets that ship with nbgrad or are generated on the user's machine (no download)."""

from .digits import load_digits, split_digits

__all__ = ["load_digits", "split_digits"]
