import ast
import re
from collections import Counter

from analyzer.rules.base import Rule


class RankDivergentBarrier(Rule):
    """Barrier or collective reached by only some ranks.

    ## What it does
    Finds barriers (`hdl.barrier`, `dist.barrier`, signal waits) and collectives called inside a
    branch on the rank (`if rank == 0:`) with no matching call on the other branch.

    ## Why is this bad?
    A barrier completes only when every rank arrives. If rank 0 calls it once more than the
    others, rank 0 waits forever (a `hang`), or, with counting barriers such as the
    symmetric-memory signal pad, it pairs with the *next* call's barrier of the other ranks and
    lets them run ahead on data that is not ready.

    ## Example
    ```python
    if rank == 0:
        _ext = compile(...)
        dist.barrier()
    ```

    The same holds for a rendezvous (a collective) that runs only when a per-rank size outgrows
    a cached capacity: `if cap >= rows: return cached` with `rows` counted from this rank's own
    data lets some ranks return while others rendezvous.

    ## Use instead
    ```python
    if rank == 0:
        _ext = compile(...)
    dist.barrier()          # every rank, every time
    ```
    and size a growing symmetric buffer from a value every rank agrees on (the all-reduced max).
    """

    id = "PKB007"
    name = "rank-divergent-barrier"
    severity = "error"
    message = "barrier or collective is reached by only some ranks"
    fix = "call the barrier on every rank: move it out of the rank-conditional branch"

    SYNC = ("handle.barrier", "handle.wait_signal", "handle.put_signal")

    def check(self, ctx):
        cands = [
            c for c in ctx.py.calls
            if c.rank_conditional and c.path in ("timed", "setup")
            and (c.qualname in self.SYNC or c.category in ("host_sync", "collective"))
        ]
        per_fn = Counter((c.function, c.qualname) for c in cands)
        for c in cands:
            if per_fn[(c.function, c.qualname)] > 1:
                continue  # both branches call it: balanced
            yield self.finding(ctx, c.line, f"{c.qualname} under a rank condition")
        yield from self._data_dependent_rendezvous(ctx)

    def _data_dependent_rendezvous(self, ctx):
        """A rendezvous behind `if cached_capacity >= param: return`, where the timed caller
        passes a size counted from its own rank's data."""
        tree = ctx.rec.syntax_tree()
        if tree is None or "rendezvous" not in ctx.rec.source:
            return
        # one walk per function: its rendezvous calls, guarded early returns, assignments, calls
        info = {}
        lines = ctx.rec.source.splitlines()
        fns = [fn for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)]
        text_of = {id(fn): "\n".join(lines[fn.lineno - 1 : fn.end_lineno or fn.lineno]) for fn in fns}
        owners = [fn.name for fn in fns if "rendezvous" in text_of[id(fn)]]
        for fn in fns:
            # only what can matter: functions that rendezvous, and those that call one of them
            if fn.name not in owners and not any(re.search(rf"\b{re.escape(o)}\s*\(", text_of[id(fn)]) for o in owners):
                continue
            rdv, ifs, assigned, calls = [], [], {}, []
            agreed = set()  # names a collective fills: the same on every rank
            for n in ast.walk(fn):
                if isinstance(n, ast.Call):
                    if isinstance(n.func, ast.Attribute) and n.func.attr == "rendezvous":
                        rdv.append(n)
                    elif isinstance(n.func, ast.Attribute) and n.func.attr in _AGREEING and n.args:
                        agreed |= {x.id for x in ast.walk(n.args[0]) if isinstance(x, ast.Name)}
                    elif isinstance(n.func, ast.Name):
                        calls.append(n)
                elif isinstance(n, ast.If) and any(isinstance(b, ast.Return) for b in n.body):
                    ifs.append(n)
                elif isinstance(n, ast.Assign):
                    for t in n.targets:
                        if isinstance(t, ast.Name):
                            assigned[t.id] = ast.unparse(n.value)
            assigned["<agreed>"] = " ".join(sorted(agreed))
            info[fn.name] = (fn, rdv, ifs, assigned, calls)
        timed_fns = {c.function for c in ctx.py.calls if c.path == "timed"}
        for name, (fn, rdv, ifs, _, _) in info.items():
            if not rdv:
                continue
            params = [a.arg for a in fn.args.args]
            guarded = set()
            for st in ifs:
                for cmp in ast.walk(st.test):
                    if isinstance(cmp, ast.Compare) and any(isinstance(op, (ast.GtE, ast.Gt, ast.LtE, ast.Lt)) for op in cmp.ops):
                        guarded |= {n.id for n in ast.walk(cmp) if isinstance(n, ast.Name) and n.id in params}
            if not guarded:
                continue
            for caller, (_, _, _, assigned, calls) in info.items():
                if caller not in timed_fns and caller != "solution":
                    continue
                for call in calls:
                    if call.func.id != name:
                        continue
                    for i, arg in enumerate(call.args):
                        if i < len(params) and params[i] in guarded and _per_rank_count(arg, assigned):
                            yield self.finding(ctx, rdv[0].lineno, f"{name}() rendezvous only when {params[i]} "
                                               f"(this rank's {ast.unparse(arg)}) outgrows the cached capacity")
                            return


_COUNTED = re.compile(r"\bsum\(|\.item\(\)|\.tolist\(\)|split|\bcount")


# Collectives whose output (their first argument) is the same on every rank.
_AGREEING = ("all_gather_into_tensor", "all_gather", "all_reduce", "all_gather_object", "broadcast")


def _per_rank_count(arg: ast.AST, assigned: dict[str, str]) -> bool:
    """The argument is counted from this rank's own data (split sizes, counts, .item()), and not
    from what a collective gathered (`sum(sizes)` of all-gathered sizes is every rank's total)."""
    text = ast.unparse(arg)
    text += " " + " ".join(assigned.get(n.id, "") for n in ast.walk(arg) if isinstance(n, ast.Name))
    agreed = set(assigned.get("<agreed>", "").split())
    names, frontier = set(), {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)}
    for _ in range(4):  # follow the names back through their assignments
        names |= frontier
        frontier = {w for n in frontier for w in re.findall(r"[A-Za-z_]\w*", assigned.get(n, ""))} - names
    if names & agreed:
        return False
    return bool(_COUNTED.search(text)) and "world" not in text
