import re

from pkb.facts import SIGNAL_KINDS
from analyzer.rules.base import Rule

_EPOCH = re.compile(r"\b\w*(epoch|seq|generation|gen|iter|phase|round|call_id|counter|step|version|tag|token)\w*\b", re.I)
# a host-side reset counts only on a buffer named for flags (`flags_symm.zero_()`)
_FLAG_WORDS = re.compile(r"flag|signal|sig_|_sig\b|sem|ready|done|sync", re.I)
_RESET = re.compile(r"=\s*0[uU]?\s*;|atomicExch\w*\([^,]+,\s*0|\.zero_\(\)|fill_\(\s*0|cudaMemset|memset", re.I)


class FlagNeverReset(Rule):
    """Flag set to a constant and never reset nor epoch-advanced.

    ## What it does
    Finds flag protocols where every call stores the same constant (usually `1`) into a signal
    pad and waits for that constant, with no store that resets the flag and no epoch or sequence
    number that changes from call to call. A reset from the host on every call (`flags.zero_()`
    before the call's barrier) counts as a reset.

    ## Why is this bad?
    The first call works. On the second call the flags still hold `1` from the first one, so
    every wait passes at once and the kernel reads peer buffers before the peers have written
    them: a `stale` result (the previous trial's answer), and one that only shows from the second
    call on, which is exactly the call a harness times.

    ## Example
    ```cuda
    flags_peer[rank] = 1;
    while (my_flags[src] != 1) {}
    ```

    ## Use instead
    Pass an epoch that grows every call and wait for it (`while (ld_acquire(&f[src]) < epoch)`),
    or have the waiter reset its own flag to 0 after it has seen it (and order that reset before
    the next call's signal), or use `hdl.barrier()` which manages its own signal pad.
    """

    id = "PKB002"
    name = "flag-never-reset"
    severity = "warning"
    message = "flag is set to a constant and never reset nor epoch-advanced between calls"
    fix = "advance an epoch per call and wait for it, or reset the flag after it is consumed"

    def check(self, ctx):
        for cuda in ctx.facts.cuda:
            # a library's barrier (ThunderKittens' barrier_all) manages its own flags
            flag_stores = [a for a in cuda.accesses if a.pointer_kind in SIGNAL_KINDS and a.kind in ("store", "atomic") and a.via != "library"]
            if not flag_stores:
                continue
            src = ctx.py.cuda_sources[cuda.source_index]
            if not all(_stores_constant(src, ctx, a) for a in flag_stores if a.kind == "store"):
                continue  # a value handed in (an epoch the caller advances per call) is not a constant
            texts = [a.snippet or ctx.snippet(a.line) for a in cuda.accesses if a.pointer_kind in SIGNAL_KINDS]
            texts += [ctx.snippet(s.line) + " " + s.condition for s in cuda.spin_loops]
            if any(_EPOCH.search(t) for t in texts):
                continue
            if any(_RESET.search(a.snippet or ctx.snippet(a.line)) for a in flag_stores):
                continue
            if any(a.kind == "atomic" and "add" in (a.snippet or "").lower() for a in flag_stores):
                continue  # a monotonic counter is an epoch
            py_reset = any(
                c.category == "tensor_copy" or "zero_" in c.snippet or "fill_(0" in c.snippet
                for c in ctx.py.calls if c.path == "timed" and ("signal" in c.snippet or "flag" in c.snippet)
            ) or any(("zero_()" in ctx.snippet(c.line) or "fill_(0" in ctx.snippet(c.line)) for c in ctx.py.calls
                     if c.path == "timed" and (c.category != "tensor_fill" or _FLAG_WORDS.search(ctx.snippet(c.line).split(".zero_")[0].split(".fill_")[0])))
            if py_reset:
                continue
            first = flag_stores[0]
            yield self.finding(ctx, first.line, f"{first.function} writes {first.pointer} with a constant", kernel=first.function, pass_name="clang")


def _stores_constant(src, ctx, access) -> bool:
    """The value a flag store writes is a literal (`f[i] = 1`, `st.release [%0], 1` or `"r"(1)`);
    a parameter or any other expression may change from call to call."""
    text = access.snippet or ctx.snippet(access.line)
    asm = re.search(r'asm\s*(?:volatile\s*)?\((.*)', text)
    if asm:
        ins = re.findall(r'"[rlhn]"\s*\(\s*([^()]*(?:\([^()]*\))?[^()]*)\)', text.split(":", 2)[-1] if text.count(":") >= 2 else text)
        values = [v.strip() for v in ins[1:]] if ins else []
        if re.search(r"\],\s*\d+\s*;", text):
            return True
        return bool(values) and all(re.fullmatch(r"\(?\s*(?:\w+\s*\)\s*)?\d+[uU]?\s*", v) for v in values)
    rhs = re.search(r"(?<![=!<>])=(?!=)\s*([^;]+);", text)
    if rhs:
        return bool(re.fullmatch(r"\(?\s*(?:\w+\s*\)\s*)?\d+[uU]?\s*", rhs.group(1).strip()))
    return True
