import re

from pkb.facts import PEER_KINDS, SIGNAL_KINDS
from analyzer.flag_access import is_flag_access
from analyzer.rules.base import Rule, reached_functions


class FlagWithoutOrdering(Rule):
    """Flag protocol without release/acquire or a system-scope fence.

    ## What it does
    Finds device flags (stores to and spin reads of a signal pad or another peer flag) whose
    accesses carry no release/acquire semantics and are not surrounded by a system-scope fence:
    the kernel's memory-ordering detail is `volatile_only` or `relaxed`. A relaxed barrier that a
    kernel calls before any of its own work (torch's entry barrier) is not reported: it orders
    none of the kernel's own stores, and earlier kernels' stores are complete at the kernel boundary.
    Nor is a kernel that is a barrier or a signal and nothing else (it stores only its flags, as
    relaxed atomics or volatile words), for the same reason; plain flag words are reported there
    too, since the compiler may keep them in registers.
    Nor is a kernel whose only flag access is a `volatile` poll (it stores no flag and nothing into
    a peer): a volatile load goes to memory on every test, the loads after the spin cannot be
    moved above it past the `__syncthreads()` or branch that follows, and GPUs do not speculate
    loads, so in practice the poll acquires; the missing release is the writer's defect, reported
    in the kernel that stores the flag. Nor is a kernel that PKB's run never launches (only a
    branch the run does not take calls it: another process group, a world size of one); what it
    would do is the fallback's, not the timed call's.

    ## Why is this bad?
    A flag only says "the data is ready" if the data stores become visible to the peer before the
    flag store does, and the peer's data loads happen after its flag load. Plain or `volatile`
    accesses give neither guarantee across NVLink: the peer can see the flag and then read stale
    data. It works in tests on an idle machine and fails under load, as a `stale` or
    `nondeterministic` wrong result.

    ## Example
    ```cuda
    out_peer[i] = v;                 // push data
    flags_peer[rank] = 1;            // plain store: may land before the data
    while (*(volatile int*)&my_flags[src] == 0) {}
    ```

    ## Use instead
    ```cuda
    out_peer[i] = v;
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(&flags_peer[rank]), "r"(epoch) : "memory");
    while (ld_acquire_sys(&my_flags[src]) < epoch) {}
    ```
    or put `__threadfence_system()` between the data stores and the flag store, and after the
    flag load.
    """

    id = "PKB001"
    name = "flag-without-ordering"
    severity = "error"
    message = "device flag accessed without release/acquire or a system-scope fence"
    fix = "use st.release.sys / ld.acquire.sys (or cuda::atomic_ref with thread_scope_system), or __threadfence_system() around the flag"

    def check(self, ctx):
        for k in ctx.rec.kernels:
            run = ctx.run_cuda_functions(k.source_index) if k.language == "cuda" else None
            if run is not None and k.name not in run:
                continue  # launched only on a branch PKB's run does not take (or never)
            for lab in k.labels.get("ordering", []):
                if lab.value in ("volatile_only", "relaxed"):
                    if lab.value == "relaxed" and (_entry_barrier_only(ctx, k) or _barrier_kernel_only(ctx, k)):
                        continue
                    if lab.value == "volatile_only" and (_volatile_poll_only(ctx, k) or _barrier_kernel_only(ctx, k)):
                        continue
                    ev = lab.evidence[0]
                    yield self.finding(ctx, ev.line, f"{k.name}: ordering is {lab.value}", kernel=k.name, pass_name=ev.pass_name)


# a store through a subscript or a dereference: `out[i] = v`, `*p = v` (not `==`, `<=`, `>=`, `!=`)
_STORE = re.compile(r"(\]|^\s*\*\s*[\w.>-]+)\s*(=(?!=)|[-+*/|&^]=)")


def _volatile_poll_only(ctx, kernel) -> bool:
    """The kernel (with the device functions it calls) stores no flag and writes nothing through a
    peer, signal or volatile pointer: its volatile accesses are polls of flags other kernels set."""
    writers = SIGNAL_KINDS + PEER_KINDS + ("multicast_ptr",)
    for cuda in ctx.facts.cuda:
        if cuda.source_index != kernel.source_index or not any(f.name == kernel.name for f in cuda.functions):
            continue
        reach = reached_functions(cuda, kernel.name)
        return not any(a.function in reach and a.kind in ("store", "atomic") and (a.pointer_kind in writers or a.order == "volatile")
                       for a in cuda.accesses)
    return False


def _barrier_kernel_only(ctx, kernel) -> bool:
    """A kernel that stores nothing but its flags (a standalone barrier launched between two
    kernels, or a kernel that only raises its peers' flags): a relaxed or volatile protocol there
    orders none of its own stores, and the kernels around it are ordered by the launch boundaries."""
    for cuda in ctx.facts.cuda:
        if cuda.source_index != kernel.source_index:
            continue
        fn = next((f for f in cuda.functions if f.name == kernel.name), None)
        if fn is None:
            return False
        flag_accesses = [a for a in cuda.accesses if a.function == kernel.name and (a.pointer_kind in SIGNAL_KINDS or is_flag_access(a))]
        flags = {a.line for a in flag_accesses}
        if any(a.function == kernel.name and a.kind == "store" and a.line not in flags for a in cuda.accesses):
            return False
        # plain (not volatile, not atomic) flag words: the compiler may keep the spin's load in a
        # register, which no launch boundary mends
        if any(a.kind in ("load", "store") and a.order == "" for a in flag_accesses) or any(
                s.function == kernel.name and s.cached for s in cuda.spin_loops):
            return False
        body = ctx.lines[fn.line - 1 : fn.end_line]
        return not any(_STORE.search(line.split("//")[0]) for i, line in enumerate(body) if fn.line + i not in flags)
    return False


def _entry_barrier_only(ctx, kernel) -> bool:
    """The kernel's only flag protocol is a barrier before any of its own work (torch's relaxed
    entry barrier): it orders none of the kernel's own stores, and earlier kernels' stores are
    complete at the kernel boundary. A barrier after the kernel's work is not covered."""
    for cuda in ctx.facts.cuda:
        if cuda.source_index != kernel.source_index:
            continue
        fns = {f.name: f for f in cuda.functions}
        fn = fns.get(kernel.name)
        if fn is None:
            return False
        flagged = {a.function for a in cuda.accesses if a.pointer_kind in SIGNAL_KINDS} | {s.function for s in cuda.spin_loops}
        if kernel.name in flagged:
            return False  # flags touched in the kernel's own body: not a helper call at its entry
        barriers = set(flagged)
        for _ in range(4):  # device helpers that call a barrier helper are barriers too
            barriers |= {f.name for f in cuda.functions if f.kind == "device" and set(f.calls) & barriers}
        calls = [b for b in barriers if b in fn.calls]
        if not calls:
            return False
        body = ctx.lines[fn.line - 1 : fn.end_line]
        text = "\n".join(body)
        start = text.find("{")
        if start < 0:
            return False
        call_re = re.compile(r"\b(?:" + "|".join(map(re.escape, calls)) + r")\s*\(")
        seen_work = False
        for line in text[start + 1 :].splitlines():
            code = line.split("//")[0].strip()
            if not code or code in ("}", "__syncthreads();"):
                continue
            if call_re.search(code):
                if seen_work:
                    return False
                continue
            seen_work = True
        return True
    return False
