"""Which peer accesses are a hand-written flag (a signal between ranks) rather than payload: read
by the mechanism labels (a flag moves no data) and by PKB001 (a kernel that touches only flags)."""

from __future__ import annotations

import re

_FLAG_NAME = re.compile(r"flag|signal|sync|barrier|sem|ready|done|epoch", re.I)


def is_flag_access(a) -> bool:
    """A release/acquire atomic, store or load on a peer pointer is a hand-written flag in the
    candidate's own symmetric buffer (data moves with plain or relaxed accesses), and so is a
    system-scope atomic on a pointer named as a flag (sync_ptrs, flags, ...) or in a device helper
    named as one (`send_signal(uint32_t* addr)`: helpers take the slot as a plain `addr`). A
    device-scope atomic on a pointer named as a flag (`atomicExch(&peer_flags[i], 1)`) raises a
    flag too, however weakly ordered (PKB001 judges that); a helper's name alone does not make a
    device-scope atomic a flag (a relaxed `red.add` into peer data in `signal_peer` is payload).
    A volatile word (at most 64 bits) through a pointer named as a flag is one too."""
    if a.via in ("library", "tma"):
        return False
    ordered = a.order in ("acquire", "release", "acq_rel") and a.scope in ("system", "")
    flag_pointer = bool(_FLAG_NAME.search(a.pointer))
    if a.order == "volatile" and flag_pointer and 0 < a.width_bits <= 64:
        return True  # `volatile int* peer_flag = ...; peer_flag[slot] = step;`: a word, not payload
    named = a.kind == "atomic" and ((a.scope == "system" and (flag_pointer or bool(_FLAG_NAME.search(a.function))))
                                    or (a.scope in ("gpu", "") and flag_pointer))
    return ordered or named
