"""Launches, copies and bindings: what the candidate's host code starts and how Python reaches it.

Kernel launches (`k<<<grid, block, smem, stream>>>(args)` and the cudaLaunchKernel family, with
each argument's pointer kind), cudaMemcpy-family calls (peer or host copies), the PYBIND11
`m.def("name", &fn)` bindings, and launches the AST missed (undeclared kernels, dependent
templates) found in the text.

`LaunchScan` is a mixin of the clang pass (analyzer/clang_pass.py): it reads the copied tree and
writes `facts.launches`, `facts.memcpys` and `facts.bindings`; argument kinds come from
`PointerFlow.eval` / `kind_by_text`.
"""

from __future__ import annotations

import re

from analyzer.clang_ast import FuncNode, Node, unwrap
from analyzer.cuda_text import match_paren, split_top
from pkb.facts import PEER_KINDS, Launch, MemcpyCall


class LaunchScan:
    """Launch, copy and binding facts (see the module docstring)."""

    def collect_bindings(self) -> None:
        for f in self.funcs:
            for n in f.body.walk():
                if n.kind == "CALL_EXPR" and n.spelling == "def" and n.kids and n.kids[0].kind == "MEMBER_REF_EXPR":
                    args = n.kids[1:]
                    if len(args) < 2:
                        continue
                    lit = next((x for x in args[0].walk() if x.kind == "STRING_LITERAL"), None)
                    target = next((x for x in args[1].walk() if x.kind in ("DECL_REF_EXPR", "OVERLOADED_DECL_REF")
                                   and x.spelling), None)
                    if lit is not None and target is not None:
                        self.facts.bindings[lit.spelling.strip('"')] = target.spelling

    def is_launch(self, n: Node) -> bool:
        return (n.kind == "CALL_EXPR" and len(n.kids) >= 2 and n.kids[1].kind == "CALL_EXPR"
                and n.kids[1].spelling in ("__cudaPushCallConfiguration", "cudaConfigureCall"))

    def launch_api_parts(self, n: Node) -> tuple[str, list[Node]]:
        """Kernel name and argument expressions of cudaLaunchKernel-style calls."""
        args = self.call_args(n)
        if n.spelling == "cudaLaunchKernelExC":
            fn_arg, arr_arg = (args[1], args[2]) if len(args) >= 3 else (None, None)
        else:
            fn_arg, arr_arg = (args[0], args[3]) if len(args) >= 4 else (None, None)
        if fn_arg is None:
            return "", []
        ref = next((x for x in fn_arg.walk() if x.kind in ("DECL_REF_EXPR", "OVERLOADED_DECL_REF") and x.spelling), None)
        kname = ref.spelling if ref is not None else ""
        out: list[Node] = []
        arr = unwrap(arr_arg)
        if arr.kind == "DECL_REF_EXPR":
            decl = self.var_nodes.get(self.key_of_ref(arr))
            init = next((x for x in decl.kids if x.kind == "INIT_LIST_EXPR"), None) if decl is not None else None
            if init is not None:
                for el in init.kids:
                    e = unwrap(el)
                    if e.kind == "UNARY_OPERATOR" and e.kids:
                        e = e.kids[0]
                    out.append(e)
        return kname, out

    def add_launch(self, f: FuncNode, n: Node) -> None:
        text = self.text_of(n)
        m = re.match(r"\s*([\w:]+)\s*(<.*?>)?\s*<<<(.*?)>>>", text, re.S)
        template = grid = block = stream = ""
        if m:
            template = (m.group(2) or "").strip()
            cfg = [c.strip() for c in split_top(m.group(3), ",")]
            grid = cfg[0] if cfg else ""
            block = cfg[1] if len(cfg) > 1 else ""
            stream = cfg[3] if len(cfg) > 3 else ""
        args = n.kids[2:]
        # `fused_pull::kernel<<<...>>>`: clang spells the callee `kernel`; several namespaces of one
        # ParallelKittens file each have a `kernel`, so keep the name as written.
        kernel = m.group(1) if m and "::" in m.group(1) and m.group(1).endswith("::" + n.spelling) else n.spelling
        self.facts.launches.append(Launch(kernel=kernel, line=self.line(n), caller=f.name,
                                          args=[self.snippet(a, 80) for a in args],
                                          arg_kinds=[self.eval(a)[0] for a in args], grid=grid, block=block,
                                          template_args=template, stream=stream))

    def add_memcpy(self, f: FuncNode, n: Node, args: list[Node]) -> None:
        name = n.spelling
        text = self.snippet(n, 240)
        km = re.search(r"cudaMemcpy(HostToDevice|DeviceToHost|DeviceToDevice|HostToHost|Default)", text)
        kind_arg = km.group(0) if km else ""
        if name.startswith("cuMemcpy"):
            if "HtoD" in name:
                kind_arg = "HtoD"
            elif "DtoH" in name:
                kind_arg = "DtoH"
        if "2D" in name:
            operand_idx = [0, 2]
        elif name in ("cudaMemcpyPeer", "cudaMemcpyPeerAsync", "cuMemcpyPeer", "cuMemcpyPeerAsync"):
            operand_idx = [0, 2]
        elif "Symbol" in name:
            operand_idx = [0, 1]
        else:
            operand_idx = [0, 1]
        kinds = [self.eval(args[i])[0] for i in operand_idx if i < len(args)]
        peer = "Peer" in name or any(k in PEER_KINDS or k == "peer_ptr" for k in kinds)
        host = kind_arg in ("cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost", "HtoD", "DtoH")
        self.facts.memcpys.append(MemcpyCall(api=name, line=self.line(n), function=f.name, kind_arg=kind_arg,
                                             peer=peer, host=host, snippet=text))

    def text_launches(self) -> None:
        seen = {l.line for l in self.facts.launches}
        host_ranges = [(f.node.so, f.body.eo, f) for f in self.funcs]
        for m in re.finditer(r"\b([A-Za-z_]\w*)\s*(<[^<>;]*(?:<[^<>;]*>[^<>;]*)*>)?\s*<<<(.*?)>>>\s*\(", self.text, re.S):
            tl = self.text.count("\n", 0, m.start()) + 1
            fl = self.src.file_line(tl)
            if fl in seen:
                continue
            close = match_paren(self.text, m.end() - 1)
            argtext = self.text[m.end():close] if close > 0 else ""
            args = [a.strip() for a in split_top(argtext, ",") if a.strip()]
            cfg = [c.strip() for c in split_top(m.group(3), ",")]
            off = len(self.text[: m.start()].encode())
            caller = next((f.name for s, e, f in host_ranges if s <= off < e), "")
            self.facts.launches.append(Launch(kernel=m.group(1), line=fl, caller=caller, args=args,
                                              arg_kinds=[self.kind_by_text(a) for a in args],
                                              grid=cfg[0] if cfg else "", block=cfg[1] if len(cfg) > 1 else "",
                                              template_args=(m.group(2) or "").strip(),
                                              stream=cfg[3] if len(cfg) > 3 else ""))
