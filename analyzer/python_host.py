"""Host tensors: which names of a candidate hold a tensor in host memory, so that `.item()` and
`.tolist()` on them are no host synchronisation.

Models copy split counts to the host once (`counts_cpu = counts.cpu()`) and then read them back
many times, often in a helper that receives the host copy as an argument, through tensors derived
from it (`torch.zeros_like(counts_cpu)`, `counts_cpu.view(...).cumsum(1)`, `counts_cpu[r, e]`), or
after returning it from another helper in a tuple. Followed here: assignments inside a function,
arguments of calls to the file's functions into their parameters, and tuple returns. Names are
kept per function (a parameter called `sizes` is host memory in one helper, not in every one).

Reads the parsed file through the pass's state (functions, enclosing functions); fills
`host_locals` and the flat `facts.host_tensors` (attributes, module names).
"""

from __future__ import annotations

import ast

from analyzer.python_api import dotted

# Methods whose result lives where their receiver lives (a host tensor stays on the host).
_KEEPS_DEVICE_EXCEPT = ("cuda", "to", "pin_memory")


class HostTensors:
    """The host-memory tensor flow of the Python pass (a mixin of PythonPass)."""

    host_locals: dict[int, set[str]]  # id(function def) -> its local names bound to host tensors

    def _in_host_locals(self, node: ast.Name) -> bool:
        fn = self.enclosing.get(id(node))
        if fn is None or node.id not in getattr(self, "host_locals", {}).get(id(fn), ()):
            return False
        # `counts = gathered[:, s:e].contiguous()`, `counts.sum(1).tolist()`, then
        # `counts = counts.to("cpu")`: the name holds a host tensor only from its first host binding on.
        return node.lineno >= getattr(self, "host_from", {}).get((id(fn), node.id), 0)

    def _before_host_binding(self, node: ast.Name) -> bool:
        """`node` reads a local of its function above the line where the function first binds
        that name to a host tensor."""
        fn = self.enclosing.get(id(node))
        first = getattr(self, "host_from", {}).get((id(fn), node.id)) if fn is not None else None
        return first is not None and node.lineno < first

    def _host_tensor_flow(self) -> None:
        self.host_locals = {}
        self.host_from: dict[tuple[int, str], int] = {}  # (function, local) -> line of its first host binding (0: a parameter)
        returns: dict[str, list[bool]] = {}  # function name -> which returned tuple items are host tensors
        for _ in range(4):  # each sweep follows one more hop (call -> parameter -> return -> caller)
            before = (sum(map(len, self.host_locals.values())), len(self.facts.host_tensors), sum(map(sum, returns.values())))
            for fn in self.functions.values():
                mine = self.host_locals.setdefault(id(fn), set())
                for node in ast.walk(fn):
                    if isinstance(node, ast.Assign):
                        self._host_assign(node.targets, node.value, mine, returns, fn)
                    elif isinstance(node, ast.AnnAssign) and node.value is not None:
                        self._host_assign([node.target], node.value, mine, returns, fn)
                    elif isinstance(node, ast.Call):
                        self._host_arguments(node)
                    elif isinstance(node, ast.Return) and node.value is not None and self.enclosing.get(id(node)) is fn:
                        vals = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                        flags = [self._is_host_value(v) for v in vals]
                        old = returns.get(fn.name)
                        returns[fn.name] = flags if old is None or len(old) != len(flags) else [a or b for a, b in zip(old, flags)]
            after = (sum(map(len, self.host_locals.values())), len(self.facts.host_tensors), sum(map(sum, returns.values())))
            if after == before:
                break

    def _host_assign(self, targets: list[ast.AST], value: ast.AST, mine: set[str], returns: dict[str, list[bool]],
                     fn: ast.AST | None = None) -> None:
        def bind(name: ast.Name) -> None:
            mine.add(name.id)
            key = (id(fn), name.id)
            if key not in self.host_from or name.lineno < self.host_from[key]:
                self.host_from[key] = name.lineno

        for t in targets:
            if isinstance(t, ast.Tuple) and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                    and value.func.id in returns and len(returns[value.func.id]) == len(t.elts):
                for te, host in zip(t.elts, returns[value.func.id]):
                    if host and isinstance(te, ast.Name):
                        bind(te)
            elif isinstance(t, ast.Name) and self._is_host_value(value):
                bind(t)
            elif isinstance(t, ast.Attribute) and self._is_host_value(value):
                name = dotted(t)
                if name and name not in self.facts.host_tensors:
                    self.facts.host_tensors.append(name)

    def _host_arguments(self, call: ast.Call) -> None:
        """`create_jobs(rank, counts_cpu, ...)`: the parameter that receives a host tensor holds one."""
        callee = self.functions.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if callee is None or callee.name in self.triton_names:
            return
        params = [a.arg for a in (*callee.args.posonlyargs, *callee.args.args)]
        mine = self.host_locals.setdefault(id(callee), set())
        for param, arg in zip(params, call.args):
            if not isinstance(arg, ast.Starred) and self._is_host_value(arg):
                mine.add(param)
                self.host_from[(id(callee), param)] = 0
        names = set(params) | {a.arg for a in callee.args.kwonlyargs}
        for kw in call.keywords:
            if kw.arg in names and self._is_host_value(kw.value):
                mine.add(kw.arg)
                self.host_from[(id(callee), kw.arg)] = 0
