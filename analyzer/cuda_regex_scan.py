"""The clang pass's fallback when libclang is missing or fails: a regex scan of the CUDA text.

It finds what plain text shows (function headers and their parameters, `<<<...>>>` launches,
asm statements, fences, copies, atomics, host waits, NVSHMEM, grid syncs, IPC calls) and
gives pointer kinds from seeds and names only. Reads the (include-blanked) CUDA text.
"""

from __future__ import annotations

import re

from analyzer import ptx_ops
from analyzer.cuda_calls import FENCE_CALLS, NVSHMEM_SYNC_RE, NVSHMEM_XFER_RE
from analyzer.cuda_pointers import guess_kind
from analyzer.cuda_text import match_paren, split_top
from pkb.facts import PEER_KINDS, ApiCall, AsmStmt, CudaFacts, CudaSource, Fence, Function, Launch, MemAccess, MemcpyCall, Param

_FUNC_RE = re.compile(
    r"((?:template\s*<[^{;]*?>\s*)?)((?:extern\s+\"C\"\s+)?(?:static\s+)?(?:inline\s+)?"
    r"(?:__global__|__device__|__host__|__forceinline__|__noinline__|static|inline|\s)*)"
    r"\s*(?:__launch_bounds__\s*\(([^)]*)\)\s*)?([\w:<>,\s\*&]+?)\s+\**\s*([A-Za-z_]\w*)\s*\(([^;{)]*(?:\([^)]*\)[^;{)]*)*)\)\s*"
    r"(?:const\s*)?\{",
    re.S,
)


def regex_scan(src: CudaSource, text: str, seeds: dict[str, list[str]] | None) -> CudaFacts:
    """Partial facts from the text alone: functions, launches, asm, fences, copies, atomics, API calls."""
    facts = CudaFacts(source_index=src.index)

    def fl(off: int) -> int:
        return src.file_line(text.count("\n", 0, off) + 1)

    env: dict[str, str] = {}
    for m in _FUNC_RE.finditer(text):
        quals, name = m.group(2) or "", m.group(5)
        if name in ("if", "for", "while", "switch", "return", "sizeof"):
            continue
        kind = "global" if "__global__" in quals else (
            "host_device" if "__device__" in quals and "__host__" in quals else ("device" if "__device__" in quals else "host"))
        open_idx = m.end() - 1
        depth, i = 0, open_idx
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        params = []
        for ptxt in [p.strip() for p in split_top(m.group(6), ",") if p.strip()]:
            pm = re.match(r"(.*?)([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*(=.*)?$", ptxt, re.S)
            if not pm:
                continue
            ptype, pname = pm.group(1).strip(), pm.group(2)
            seeded = (seeds or {}).get(name, [])
            pk = seeded[len(params)] if len(params) < len(seeded) else "unknown"
            basis = "seed" if pk != "unknown" else ""
            if pk == "unknown":
                tk = "POINTER" if "*" in ptype else ""
                g = guess_kind(pname, ptype, tk)
                if g:
                    pk, basis = g, "name"
            env[pname] = pk
            params.append(Param(name=pname, type=ptype, is_pointer="*" in ptype, pointer_kind=pk, basis=basis))
        st, en = text.count("\n", 0, m.start()) + 1, text.count("\n", 0, i) + 1
        facts.functions.append(Function(name=name, kind=kind, line=src.file_line(st), end_line=src.file_line(en),
                                        text_line=st, text_end_line=en, params=params,
                                        is_template=bool(m.group(1).strip()),
                                        launch_bounds=(m.group(3) or "").strip()))
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*(<[^<>;]*>)?\s*<<<(.*?)>>>\s*\(", text, re.S):
        close = match_paren(text, m.end() - 1)
        args = [a.strip() for a in split_top(text[m.end():close], ",") if a.strip()] if close > 0 else []
        cfg = [c.strip() for c in split_top(m.group(3), ",")]
        facts.launches.append(Launch(kernel=m.group(1), line=fl(m.start()), caller="", args=args,
                                     arg_kinds=[env.get(a, "unknown") for a in args],
                                     grid=cfg[0] if cfg else "", block=cfg[1] if len(cfg) > 1 else "",
                                     template_args=(m.group(2) or "").strip()))
    for m in re.finditer(r"\b(cudaLaunchCooperativeKernel|cudaLaunchKernel)\s*\(", text):
        facts.launches.append(Launch(kernel="", line=fl(m.start()), caller="",
                                     cooperative=m.group(1) == "cudaLaunchCooperativeKernel"))
    for m in re.finditer(r"\basm\s*(?:volatile|__volatile__)?\s*\(", text):
        close = match_paren(text, m.end() - 1)
        body = text[m.end():close] if close > 0 else ""
        asm = ptx_ops.asm_parts(body)
        facts.asm.append(AsmStmt(line=fl(m.start()), function="", mnemonics=asm.mnemonics,
                                 text=" ".join(asm.template.split())[:300]))
        for opcode in asm.mnemonics:
            op = ptx_ops.decode(opcode)
            if op.is_fence:
                facts.fences.append(Fence(kind=op.fence_kind, line=fl(m.start()), function="", scope=op.scope))
            if op.engine:
                facts.api_calls.append(ApiCall(api=opcode, line=fl(m.start()), function="", category=op.engine))
    for m in re.finditer(r"\b(__threadfence_system|__threadfence_block|__threadfence)\s*\(", text):
        facts.fences.append(Fence(kind=m.group(1), line=fl(m.start()), function="", scope=FENCE_CALLS[m.group(1)]))
    for m in re.finditer(r"\b(cudaMemcpy\w*|cuMemcpy\w*)\s*\(", text):
        close = match_paren(text, m.end() - 1)
        call = text[m.start():close + 1] if close > 0 else text[m.start():m.end()]
        km = re.search(r"cudaMemcpy(HostToDevice|DeviceToHost|DeviceToDevice|HostToHost|Default)", call)
        kind_arg = km.group(0) if km else ""
        args = [a.strip() for a in split_top(text[m.end():close], ",")] if close > 0 else []
        peer = "Peer" in m.group(1) or any(env.get(a, "") in PEER_KINDS for a in args[:3])
        facts.memcpys.append(MemcpyCall(api=m.group(1), line=fl(m.start()), function="", kind_arg=kind_arg, peer=peer,
                                        host=kind_arg in ("cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost"),
                                        snippet=" ".join(call.split())[:240]))
    for m in re.finditer(r"\b(atomic(?:Add|Sub|Exch|Max|Min|And|Or|Xor|Inc|Dec|CAS)(_system|_block)?)\s*\(\s*&?\s*([A-Za-z_]\w*)", text):
        scope = {"_system": "system", "_block": "cta"}.get(m.group(2) or "", "gpu")
        facts.accesses.append(MemAccess(function="", line=fl(m.start()), kind="atomic", pointer=m.group(3),
                                        pointer_kind=env.get(m.group(3), "unknown"), via="intrinsic", scope=scope,
                                        order="relaxed", snippet=m.group(0)))
    for m in re.finditer(r"\b(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize)\s*\(", text):
        facts.api_calls.append(ApiCall(api=m.group(1), line=fl(m.start()), function="", category="host_sync"))
    for m in re.finditer(r"\b(nvshmemx?_\w+)\s*\(", text):
        nm = m.group(1)
        cat = "nvshmem_sync" if NVSHMEM_SYNC_RE.match(nm) else ("nvshmem" if NVSHMEM_XFER_RE.match(nm) else "")
        if cat:
            facts.api_calls.append(ApiCall(api=nm, line=fl(m.start()), function="", category=cat))
    for m in re.finditer(r"\b(this_grid\s*\(\s*\)\s*\.\s*sync|grid\s*\.\s*sync)\s*\(", text):
        facts.api_calls.append(ApiCall(api="grid.sync", line=fl(m.start()), function="", category="grid_sync"))
    for m in re.finditer(r"\b(cudaIpc\w+)\s*\(", text):
        facts.api_calls.append(ApiCall(api=m.group(1), line=fl(m.start()), function="", category="ipc"))
    return facts
