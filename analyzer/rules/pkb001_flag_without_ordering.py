from analyzer.rules.base import Rule


class FlagWithoutOrdering(Rule):
    """Flag protocol without release/acquire or a system-scope fence.

    ## What it does
    Finds device flags (stores to and spin reads of a signal pad or another peer flag) whose
    accesses carry no release/acquire semantics and are not surrounded by a system-scope fence:
    the kernel's memory-ordering detail is `volatile_only` or `relaxed`.

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
            for lab in k.labels.get("ordering", []):
                if lab.value in ("volatile_only", "relaxed"):
                    ev = lab.evidence[0]
                    yield self.finding(ctx, ev.line, f"{k.name}: ordering is {lab.value}", kernel=k.name, pass_name=ev.pass_name)
