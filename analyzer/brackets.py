"""Bracket matching over CUDA source text, for the passes that read idioms from the text itself
(ThunderKittens without its headers, multicast branches, one-block waits)."""

from __future__ import annotations


def closing(text: str, open_idx: int, open_c: str, close_c: str) -> int:
    """Index of the bracket that closes the one at `open_idx`; -1 when it is never closed."""
    depth = 0
    for j in range(open_idx, len(text)):
        if text[j] == open_c:
            depth += 1
        elif text[j] == close_c:
            depth -= 1
            if depth == 0:
                return j
    return -1


def opening(text: str, close_idx: int, open_c: str, close_c: str) -> int:
    """Index of the bracket that opens the one at `close_idx`; -1 when it is never opened."""
    depth = 0
    for j in range(close_idx, -1, -1):
        if text[j] == close_c:
            depth += 1
        elif text[j] == open_c:
            depth -= 1
            if depth == 0:
                return j
    return -1


def enclosing_openers(text: str, pos: int, open_c: str, close_c: str):
    """Indices of the brackets left open before `pos`: the blocks that hold it, innermost first."""
    depth = 0
    for j in range(pos - 1, -1, -1):
        if text[j] == close_c:
            depth += 1
        elif text[j] == open_c:
            if depth:
                depth -= 1
            else:
                yield j
