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
