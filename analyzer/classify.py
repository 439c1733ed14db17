"""From pass facts to TAXONOMY labels, each with its evidence.

A label is written only where a fact supports it, and the fact is cited (file, line, snippet,
pass). Where the facts that would decide an axis are out of sight (a peer pointer handed to a
helper in a header the pass could not read), the label is `unknown`, with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from analyzer import ptx_ops
from analyzer.flag_access import is_flag_access
from analyzer.kernel_compute import kernel_computes, line_computes, one_thread, torch_matmul_lines
from analyzer.python_async import async_library_overlap
from analyzer.python_pass import is_metadata_collective
from analyzer.side_streams import SideStreams
from pkb.facts import PEER_KINDS, SIGNAL_KINDS, CallSite, CudaFacts, CudaSource, Function, PtxFacts
from pkb.record import CandidateRecord, Evidence, KernelReport, Label

ORDER_STRENGTH = ("release_acquire", "fence_system", "volatile_only", "relaxed")
# torch.ops.symm_mem library ops: what they move bytes with.
SYMM_OPS = {
    "multimem": "nvls",
    "one_shot_all_reduce": "sm_load",
    "two_shot_all_reduce": "sm_load",
    "fused_all_gather_matmul": "copy_engine",
    "fused_matmul_reduce_scatter": "copy_engine",
    "all_to_all_vdev": "nvshmem",
}


@dataclass
class _KernelFacts:
    """One CUDA kernel with what it and the device functions it calls do."""

    fn: Function
    source: CudaSource
    cuda: CudaFacts
    ptx: PtxFacts | None
    reach: set[str]  # names of the kernel and every device function it reaches


def _reach(fn: Function, by_name: dict[str, Function], device_only: bool = True) -> set[str]:
    """`fn` and every function it calls, transitively (device code only, unless told)."""
    seen = {fn.name}
    todo = [fn]
    while todo:
        f = todo.pop()
        for callee in f.calls:
            g = by_name.get(callee)
            if g is not None and g.name not in seen and not (device_only and g.kind == "host"):
                seen.add(g.name)
                todo.append(g)
    return seen


class Classifier(SideStreams):
    def __init__(self, rec: CandidateRecord, has_compute: bool | None):
        self.rec = rec
        self.file = rec.path
        self.lines = rec.source.splitlines()
        self.facts = rec.facts
        self.has_compute = has_compute
        self.computes: dict[str, bool] = {}  # CUDA kernel -> its body does arithmetic beyond copies
        self.on_run: set[str] = set()  # kernels whose labels are the candidate's (not fallbacks)
        self.library_gemm_on_peers: list[int] = []  # lines of timed cuBLAS calls fed peer pointers

    def ev(self, line: int, pass_name: str, note: str = "") -> Evidence:
        snippet = self.lines[line - 1].strip()[:160] if 0 < line <= len(self.lines) else ""
        return Evidence(self.file, line, snippet, pass_name, note)

    # ---- kernels ------------------------------------------------------------------------------

    def kernels(self) -> list[_KernelFacts]:
        out = []
        for cuda in self.facts.cuda:
            src = self.facts.python.cuda_sources[cuda.source_index]
            ptx = next((p for p in self.facts.ptx if p.source_index == cuda.source_index), None)
            by_name = {f.name: f for f in cuda.functions}
            for fn in cuda.functions:
                if fn.kind == "global":
                    out.append(_KernelFacts(fn, src, cuda, ptx, _reach(fn, by_name)))
        return out

    def classify_kernel(self, k: _KernelFacts) -> KernelReport:
        rep = KernelReport(name=k.fn.name, language="cuda", line=k.fn.line, source_index=k.cuda.source_index)
        # The kernel computes if it, or a device function it calls, does arithmetic.
        self.computes[k.fn.name] = any(kernel_computes(self.lines[f.line - 1 : f.end_line])
                                       for f in k.cuda.functions if f.name in k.reach) \
            and not one_thread(self.lines[k.fn.line - 1 : k.fn.end_line])
        labels: dict[str, list[Label]] = {}

        def add(axis: str, value: str, ev: Evidence) -> None:
            lst = labels.setdefault(axis, [])
            lab = next((x for x in lst if x.value == value), None)
            if lab is None:
                lst.append(Label(axis, value, [ev]))
            elif len(lab.evidence) < 6 and ev not in lab.evidence:
                lab.evidence.append(ev)

        shared = _helpers_of_peer_kernels(k)
        inside = [a for a in k.cuda.accesses if a.function in k.reach and not _in_fallback(k.cuda, a.line)
                  and a.function not in shared]
        metadata: dict[str, list[Evidence]] = {}  # peer accesses of counts / sizes / offsets, by label
        # A bulk copy or multimem op written in inline asm is TMA / NVLS, not an SM load of the
        # same address: those asm lines do not count as SM traffic.
        engine_lines = {asm.line for asm in k.cuda.asm if asm.function in k.reach and any(
            ptx_ops.decode(m).engine for m in asm.mnemonics)}
        for a in inside:
            if (a.via == "asm" and a.line in engine_lines) or a.via == "tma":
                continue
            if a.pointer_kind in PEER_KINDS and is_flag_access(a):
                add("sync", "device_flags", self.ev(a.line, "clang", f"flag {a.kind} ({a.order}.{a.scope or 'gpu'}) through {a.pointer}, a peer's symmetric buffer"))
            elif a.pointer_kind in PEER_KINDS and _is_metadata_access(a, k.fn.name):
                value = {"load": "sm_load", "store": "sm_store", "atomic": "sm_atomic"}[a.kind]
                metadata.setdefault(value, []).append(self.ev(a.line, "clang", f"{METADATA_NOTE}{a.kind} through {a.pointer} ({a.pointer_kind})"))
            elif a.pointer_kind in PEER_KINDS:
                value = {"load": "sm_load", "store": "sm_store", "atomic": "sm_atomic"}[a.kind]
                add("mechanism", value, self.ev(a.line, "clang", f"{a.kind} through {a.pointer} ({a.pointer_kind})"))
                if a.pointer_kind == "nvshmem_ptr":
                    add("mechanism", "nvshmem", self.ev(a.line, "clang", "address from nvshmem_ptr"))
            elif a.pointer_kind == "multicast_ptr":
                add("mechanism", "nvls", self.ev(a.line, "clang", f"{a.kind} through the multicast address {a.pointer}"))
            elif a.pointer_kind in SIGNAL_KINDS:
                add("sync", "device_flags", self.ev(a.line, "clang", f"flag {a.kind} through {a.pointer}"))
        for value, evs in metadata.items():
            # a label only metadata gives stays metadata (run() drops it beside a payload label)
            if not any(x.value == value for x in labels.get("mechanism", [])):
                for ev in evs:
                    add("mechanism", value, ev)
        for asm in k.cuda.asm:
            if asm.function not in k.reach:
                continue
            for m in asm.mnemonics:
                engine = ptx_ops.decode(m).engine  # the mechanism labels are the engines' names
                if engine:
                    add("mechanism", engine, self.ev(asm.line, "clang", m))
        for call in k.cuda.api_calls:
            if call.function not in k.reach:
                continue
            if call.category == "tma":
                add("mechanism", "tma", self.ev(call.line, "clang", call.api))
            elif call.category == "nvls":
                add("mechanism", "nvls", self.ev(call.line, "clang", call.api))
            elif call.category == "nvshmem":
                add("mechanism", "nvshmem", self.ev(call.line, "clang", call.api))
            elif call.category == "nvshmem_sync":
                add("sync", "nvshmem_sync", self.ev(call.line, "clang", call.api))
            elif call.category == "grid_sync":
                add("sync", "grid_sync", self.ev(call.line, "clang", call.api))
        for loop in k.cuda.spin_loops:
            # a spin on this rank's own symmetric buffer waits for a peer's store: a flag too
            if loop.function in k.reach and loop.polls in (*SIGNAL_KINDS, *PEER_KINDS, "symm_local", "unknown"):
                add("sync", "device_flags", self.ev(loop.line, "clang", f"spin on {loop.condition[:60]}"))
        # PTX: what the compiler really emitted for this entry (templates and headers included).
        if k.ptx is not None and k.ptx.status == "ok":
            entry = _ptx_entry(k.ptx, k.fn.name)
            if entry is not None:
                for ins in entry.instructions:
                    line = ins.lines[0] if ins.lines else k.fn.line
                    engine = ptx_ops.decode(ins.mnemonic).engine
                    if engine:
                        add("mechanism", engine, self.ev(line, "ptx", ins.mnemonic))

        if "device_flags" in {x.value for x in labels.get("sync", [])}:
            order, ev = self._ordering(k)
            add("ordering", order, ev)
        if not labels.get("mechanism"):
            peer_params = [p for p in k.fn.params if p.pointer_kind in PEER_KINDS]
            hidden = k.cuda.missing_headers or k.cuda.status in ("partial", "failed")
            seen_peer = any(a.pointer_kind in PEER_KINDS for a in inside)  # e.g. only its flags
            if peer_params and hidden and not seen_peer:
                add("mechanism", "unknown", self.ev(k.fn.line, "clang", f"peer pointer {peer_params[0].name} reaches the kernel, but its use is not visible ({', '.join(k.cuda.missing_headers) or k.cuda.message})"))
            else:
                add("mechanism", "none", self.ev(k.fn.line, "clang", "no access through a peer, multicast or NVSHMEM address"))
        if not labels.get("sync"):
            add("sync", "none", self.ev(k.fn.line, "clang", "no flags, grid barrier or NVSHMEM ordering in the kernel"))
        rep.labels = labels
        return rep

    def _ordering(self, k: _KernelFacts) -> tuple[str, Evidence]:
        found: dict[str, Evidence] = {}
        for a in k.cuda.accesses:
            if a.function in k.reach and a.order in ("acquire", "release", "acq_rel") and a.scope in ("system", ""):
                found.setdefault("release_acquire", self.ev(a.line, "clang", f"{a.order} {a.kind} ({a.via})"))
        for asm in k.cuda.asm:
            if asm.function in k.reach:
                for m in asm.mnemonics:
                    # a fence.acq_rel.sys is a fence (fence_system, from the Fence facts), not a
                    # release/acquire access
                    if ptx_ops.decode(m).orders_system:
                        found.setdefault("release_acquire", self.ev(asm.line, "clang", m))
        for f in k.cuda.fences:
            if f.function in k.reach and f.scope == "system" and _orders_threads(f.kind):
                found.setdefault("fence_system", self.ev(f.line, "clang", f.kind))
        if k.ptx is not None and k.ptx.status == "ok":
            entry = _ptx_entry(k.ptx, k.fn.name)
            for ins in entry.instructions if entry else []:
                op = ptx_ops.decode(ins.mnemonic)
                line = ins.lines[0] if ins.lines else k.fn.line
                if op.orders_system:
                    found.setdefault("release_acquire", self.ev(line, "ptx", ins.mnemonic))
                elif op.fences_system:
                    found.setdefault("fence_system", self.ev(line, "ptx", ins.mnemonic))
        volatile = [a for a in k.cuda.accesses if a.function in k.reach and a.order == "volatile"]
        volatile += [s for s in k.cuda.spin_loops if s.function in k.reach and s.order == "volatile"]  # type: ignore[misc]
        if volatile:
            found.setdefault("volatile_only", self.ev(volatile[0].line, "clang", "volatile access, no fence"))
        for order in ORDER_STRENGTH:
            if order in found:
                return order, found[order]
        flag = next((a for a in k.cuda.accesses if a.function in k.reach and a.pointer_kind in SIGNAL_KINDS), None)
        return "relaxed", self.ev(flag.line if flag else k.fn.line, "clang", "plain flag accesses, no fence or acquire/release")

    def classify_triton(self) -> list[KernelReport]:
        out = []
        for t in self.facts.python.triton_kernels:
            body = self.lines[t.line - 1 : t.end_line]
            self.computes[t.name] = any(re.search(r"tl\.(dot|exp2?|log2?|sqrt|rsqrt|sigmoid|fma)\(", ln) or line_computes(ln) for ln in body)
            rep = KernelReport(name=t.name, language="triton", line=t.line)
            labels: dict[str, list[Label]] = {}
            signal = {p for p, kind in t.peer_params.items() if kind in SIGNAL_KINDS}
            for axis, value, lines in (
                ("mechanism", "sm_load", t.peer_loads),
                ("mechanism", "sm_store", t.peer_stores),
                ("mechanism", "sm_atomic", t.peer_atomics),
            ):
                if lines:
                    labels.setdefault(axis, []).append(Label(axis, value, [self.ev(n, "python", "tl op on a peer address") for n in lines[:3]]))
            if signal or t.spin_loops:
                lines = t.spin_loops or [t.line]
                labels.setdefault("sync", []).append(Label("sync", "device_flags", [self.ev(lines[0], "python", "flag polling in a Triton kernel")]))
                labels.setdefault("ordering", []).append(Label("ordering", "relaxed" if not self._triton_ordered(t) else "release_acquire", [self.ev(lines[0], "python")]))
            if not labels.get("mechanism"):
                labels["mechanism"] = [Label("mechanism", "none", [self.ev(t.line, "python", "no tl.load/tl.store through a peer address")])]
            if not labels.get("sync"):
                labels["sync"] = [Label("sync", "none", [self.ev(t.line, "python")])]
            rep.labels = labels
            out.append(rep)
        return out

    def _triton_ordered(self, t) -> bool:
        body = "\n".join(self.lines[t.line - 1 : t.end_line])
        return "sem=\"acquire\"" in body or "sem='acquire'" in body or "sem=\"release\"" in body or "sem=\"acq_rel\"" in body

    # ---- candidate -----------------------------------------------------------------------------

    def timed(self, *cats: str) -> list[CallSite]:
        return [c for c in self.facts.python.calls if c.path == "timed" and c.category in cats]

    def run(self) -> None:
        rec = self.rec
        k_facts = self.kernels()
        reports = [self.classify_kernel(k) for k in k_facts] + self.classify_triton()
        rec.kernels = reports
        launched = self._launched_kernels(k_facts)
        fallback_only = self._launched_kernels(k_facts, paths=("fallback",)) or set()
        # Kernels whose every launch sits in a CUDA branch the run does not take (multicast
        # missing, unaligned sizes): fallbacks too, not the candidate's mechanism.
        fb_kernels = _fallback_launched(self.facts.cuda)
        if fb_kernels:
            launched = (launched if launched is not None else {k.fn.name for k in k_facts}) - fb_kernels
            fallback_only |= fb_kernels
        self.on_run = set()  # kernels the run launches on the timed path
        triton_timed = {c.target for c in self.timed("triton_launch")}
        triton_other = {c.target for c in self.facts.python.calls if c.category == "triton_launch" and c.path != "timed"}
        for rep in reports:
            off_run = (rep.language == "cuda" and launched is not None and rep.name not in launched) or (
                rep.language == "triton" and rep.name in triton_other and rep.name not in triton_timed)
            if off_run:
                # Launched only on a branch the run does not take: its mechanism is a fallback.
                # (Launched only from set-up, or never: neither the mechanism nor a fallback.)
                if rep.name in fallback_only or (rep.language == "triton" and any(
                        c.target == rep.name and c.path == "fallback" for c in self.facts.python.calls)):
                    for lab in rep.labels.get("mechanism", []):
                        if lab.value not in ("none", "unknown"):
                            rec.add_label(Label("fallback", lab.value, [self._tagged(e) for e in lab.evidence]))
                continue
            self.on_run.add(rep.name)
            for axis, labs in rep.labels.items():
                for lab in labs:
                    if lab.value == "none":
                        continue
                    rec.add_label(Label(axis, lab.value, list(lab.evidence)))
        for c in self.facts.python.calls:
            if c.path == "fallback" and c.category in ("collective", "p2p"):
                rec.add_label(Label("fallback", "nccl", [self.ev(c.line, "python", f"fallback: {c.qualname}")]))

        for c in self.facts.python.calls:
            # NCCL / MPI loaded through ctypes or cffi: a library collective route that no
            # torch.distributed name shows (the calls through it may be built at run time)
            if c.category == "library_load" and c.path != "unreached":
                ev = [self.ev(c.line, "python", f"{c.qualname}: a collective library the candidate loads itself")]
                if c.path == "fallback":
                    rec.add_label(Label("fallback", "nccl", ev))
                    continue
                rec.add_label(Label("mechanism", "nccl", ev))
                rec.add_label(Label("sync", "nccl_implicit", list(ev)))
        for c in self.timed("collective", "p2p"):
            if not is_metadata_collective(c):  # split sizes and counts are not the payload
                rec.add_label(Label("mechanism", "nccl", [self.ev(c.line, "python", c.qualname)]))
            rec.add_label(Label("sync", "nccl_implicit", [self.ev(c.line, "python", c.qualname)]))
        for c in self.timed("symm_mem"):
            for key, mech in SYMM_OPS.items():
                if key in c.qualname:
                    rec.add_label(Label("mechanism", mech, [self.ev(c.line, "python", c.qualname)]))
                    rec.add_label(Label("sync", "symm_barrier", [self.ev(c.line, "python", "symmetric-memory op syncs internally")]))
        for c in self.timed("cudart_copy"):
            # The runtime's copy through a peer's address (from the Python side) runs on the copy engines.
            if any(a.pointer_kind in ("peer_ptr", "peer_tensor") for a in c.args) or "Peer" in c.qualname:
                rec.add_label(Label("mechanism", "copy_engine", [self.ev(c.line, "python", f"{c.qualname} on a peer address")]))
        for c in self.timed("tensor_copy"):
            if self._peer_copy(c):
                rec.add_label(Label("mechanism", "copy_engine", [self.ev(c.line, "python", "copy of a tensor viewing a peer buffer")]))
        # Copies issued by host code: a source may hold no kernel at all, only cudaMemcpy*Async.
        for cuda in self.facts.cuda:
            for m in cuda.memcpys:
                if launched is not None and not self._host_fn_timed(cuda, m.function):
                    continue
                if m.peer:
                    # a count or two read from a peer (`sizeof(int32_t)`) is metadata beside the payload
                    ev = [self.ev(m.line, "clang", f"{METADATA_NOTE if m.few_numbers else ''}{m.api}")]
                    ev += [self.ev(c.line, "python", f"calls {c.target}, which copies with {m.api}")
                           for c in self.timed("ext_kernel") if cuda.bindings.get(c.target, c.target) == m.function
                           and any(a.pointer_kind in PEER_KINDS for a in c.args)][:2]
                    rec.add_label(Label("mechanism", "copy_engine", ev))
                if m.blocks_host:
                    rec.add_label(Label("sync", "host_sync", [self.ev(m.line, "clang", f"{m.api} {m.kind_arg} waits for the GPU")]))
                if m.host and not m.few_numbers:  # a count read back is a sync, not staging of the payload
                    rec.add_label(Label("mechanism", "host_staging", [self.ev(m.line, "clang", f"{m.api} {m.kind_arg}")]))
        # A library GEMM (cuBLAS, cuBLASLt) issued from host code on a peer's buffer reads it.
        ext_timed = bool(self.timed("ext_kernel"))
        for cuda in self.facts.cuda:
            hosts = {f.name for f in cuda.functions if f.kind in ("host", "host_device")}
            for a in cuda.accesses:
                if a.via == "library" and a.pointer_kind in PEER_KINDS and a.function in hosts and (
                        not ext_timed or self._host_fn_timed(cuda, a.function)):
                    rec.add_label(Label("mechanism", "sm_load", [self.ev(a.line, "clang", f"library GEMM reads {a.pointer} ({a.pointer_kind})")]))
                    self.library_gemm_on_peers.append(a.line)
        self._host_cuda_calls()
        for c in self.timed("host_transfer"):
            rec.add_label(Label("mechanism", "host_staging", [self.ev(c.line, "python", c.qualname)]))
            rec.add_label(Label("sync", "host_sync", [self.ev(c.line, "python", f"{c.qualname} waits for the GPU")]))
        for c in self.timed("symm_handle"):
            if c.qualname in ("handle.barrier", "handle.put_signal", "handle.wait_signal"):
                rec.add_label(Label("sync", "symm_barrier", [self.ev(c.line, "python", c.qualname)]))
        for c in self.timed("cuda_sync", "host_sync"):
            rec.add_label(Label("sync", "host_sync", [self.ev(c.line, "python", c.qualname)]))
        for c in self.timed("event"):
            rec.add_label(Label("sync", "stream_events", [self.ev(c.line, "python", c.qualname)]))
        for c in self.timed("stream"):
            if "wait_stream" in c.qualname:
                rec.add_label(Label("sync", "stream_events", [self.ev(c.line, "python", c.qualname)]))

        _drop_metadata_only(rec)
        if not rec.labels.get("mechanism"):
            hidden = [r for r in reports if r.labels.get("mechanism", [Label("mechanism", "none")])[0].value == "unknown"]
            if hidden:
                rec.add_label(Label("mechanism", "unknown", list(hidden[0].labels["mechanism"][0].evidence)))
            else:
                line = self.facts.python.solution_line or 1
                rec.add_label(Label("mechanism", "none", [self.ev(line, "python", "no inter-GPU transfer found on the timed path")]))
        if not rec.labels.get("sync"):
            line = self.facts.python.solution_line or 1
            rec.add_label(Label("sync", "none", [self.ev(line, "python", "no cross-rank ordering found on the timed path")]))
        # `fallback` names what only the branches the run skips would add: a scalar kernel beside
        # the vector one moves data as the run does, so its sm_load is no second mechanism
        on_run = {lab.value for lab in rec.labels.get("mechanism", [])}
        if rec.labels.get("fallback"):
            rec.labels["fallback"] = [lab for lab in rec.labels["fallback"] if lab.value not in on_run]
            if not rec.labels["fallback"]:
                del rec.labels["fallback"]
        self._overlap(reports)

    def _peer_copy(self, c: CallSite) -> bool:
        receiver = c.snippet.split("." + c.qualname.split(".")[-1] + "(")[0].split("=")[-1].strip()
        if receiver in self.facts.python.host_tensors:
            return False  # a peer view copied into host memory is host staging
        if any(a.pointer_kind == "peer_tensor" for a in c.args):
            return True
        # `hdl.get_buffer(peer, ...).copy_(x)` / `peer_view.clone()`: the receiver is the peer view.
        if "get_buffer(" in receiver and "rank" not in receiver.split("get_buffer(")[1].split(",")[0]:
            return True
        return receiver in self._peer_tensor_names()

    def _peer_tensor_names(self) -> set[str]:
        names = set()
        for c in self.facts.python.calls:
            if c.qualname == "handle.get_buffer":
                lhs = c.snippet.split("=")[0].strip() if "=" in c.snippet.split("get_buffer")[0] else ""
                first = c.args[0].text if c.args else ""
                if lhs and "rank" not in first:
                    names.add(lhs)
        return names

    def _compute_line(self, k: KernelReport) -> int:
        """First line of a kernel that does arithmetic beyond moving data (dot, fma, rsqrt...)."""
        for i in range(k.line, min(k.line + 300, len(self.lines) + 1)):
            if re.search(r"tl\.(dot|exp2?|log2?|sqrt|rsqrt|sigmoid|fma)\(", self.lines[i - 1]) or line_computes(self.lines[i - 1]):
                return i
        return 0

    @staticmethod
    def _tagged(e: Evidence) -> Evidence:
        return Evidence(e.file, e.line, e.snippet, e.pass_name, ("fallback: " + e.note).strip())

    def _launched_kernels(self, k_facts: list[_KernelFacts], paths: tuple[str, ...] = ("timed",)) -> set[str] | None:
        """Kernels reachable from host functions called on `paths` (by default: every call of
        solution(), not its cached set-up); None when no such call is known."""
        calls = self.facts.python.calls
        timed_ext = {c.target for c in calls if c.category in ("ext_kernel", "cupy_launch") and c.path in paths}
        if not timed_ext:
            if paths == ("timed",) and any(c.category in ("ext_kernel", "cupy_launch") for c in calls):
                # Launches seen, none per call: the kernels run in set-up or on a fallback only.
                other = self._launched_kernels(k_facts, ("setup", "fallback")) or set()
                return {k.fn.name for k in k_facts if k.fn.name not in other} if other else None
            return None
        return self._kernels_reached(timed_ext) or None

    def _kernels_reached(self, targets: set[str]) -> set[str]:
        """Kernels that extension calls of these names (`ext.fn`'s `fn`) launch, through the
        bindings and the host functions they call."""
        out: set[str] = set()
        for cuda in self.facts.cuda:
            by_name = {f.name: f for f in cuda.functions}
            entry_fns = set()
            for name in targets:
                entry_fns.add(cuda.bindings.get(name, name))
            for f in cuda.functions:
                if f.name in entry_fns:
                    if f.kind == "global":  # a cupy launch names its kernel itself
                        out.add(f.name)
                    reached = _reach(f, by_name, device_only=False)
                    out |= reached
                    # launches by their written (namespace-qualified) names
                    out |= {la.kernel for la in cuda.launches if la.caller in reached}
        return out

    def _host_fn_timed(self, cuda: CudaFacts, host_fn: str) -> bool:
        timed_ext = {c.target for c in self.facts.python.calls if c.category == "ext_kernel" and c.path == "timed"}
        entry = {cuda.bindings.get(n, n) for n in timed_ext}
        by_name = {f.name: f for f in cuda.functions}
        for e in entry:
            f = by_name.get(e)
            if f is not None and host_fn in _reach(f, by_name, device_only=False):
                return True
        return False

    def _host_cuda_calls(self) -> None:
        for cuda in self.facts.cuda:
            for call in cuda.api_calls:
                if call.category == "host_sync" and self._host_fn_timed(cuda, call.function):
                    self.rec.add_label(Label("sync", "host_sync", [self.ev(call.line, "clang", call.api)]))
                if call.category == "grid_sync" and call.api.startswith("cudaLaunchCooperativeKernel"):
                    self.rec.add_label(Label("sync", "grid_sync", [self.ev(call.line, "clang", call.api)]))

    def _overlap(self, reports: list[KernelReport]) -> None:
        rec = self.rec
        py = self.facts.python
        compute_calls = self.timed("compute")
        matmul_lines = torch_matmul_lines(rec, py)
        has_torch_compute = bool(compute_calls or matmul_lines)
        entry = problem_entry(rec)
        if entry is not None and not entry.communicates:
            rec.add_label(Label("overlap", "n/a", [self.ev(py.solution_line or 1, "python", "the problem moves no data between ranks")]))
            return
        problem_compute = self.has_compute
        if problem_compute is None:
            problem_compute = has_torch_compute or any(self.computes.get(r.name, False) for r in reports if r.language == "cuda")
        if not problem_compute:
            rec.add_label(Label("overlap", "n/a", [self.ev(py.solution_line or 1, "python", "the problem is a bare collective")]))
            return
        peer_args = any(a.pointer_kind not in ("unknown", "local", "symm_local") for c in py.calls if c.path == "timed" for a in c.args)
        if all(lab.value == "none" for lab in rec.labels.get("mechanism", [])) and not peer_args:
            # a side stream that only computes overlaps no communication (a launch handed a peer
            # address moves data the static passes may not see: left to the checks below)
            rec.add_label(Label("overlap", "none", [self.ev(py.solution_line or 1, "python", "nothing is communicated on the timed path")]))
            return
        mover = [r for r in reports if r.name in self.on_run and any(l.value not in ("none", "unknown") for l in r.labels.get("mechanism", []))]
        overlapping = [b for b in self._side_stream_blocks() if self._side_stream_overlaps(b, matmul_lines)]
        if overlapping and (py.streams or self.timed("event", "stream")):
            _, with_line, first, _ = overlapping[0]
            evidence = [self.ev(with_line, "python", "a side stream for communication"),
                        self.ev(first, "python", "issued on the side stream")] if with_line != first else [
                self.ev(first, "python", "issued on a side stream (its handle passed to the launch)")]
            rec.add_label(Label("overlap", "multi_stream", evidence))
        tree = rec.syntax_tree()
        if not rec.labels.get("overlap") and tree is not None and self.timed("p2p", "collective"):
            timed_fns = {c.function for c in py.calls if c.path == "timed"} | {"solution"}
            in_flight = async_library_overlap(tree, timed_fns)
            if in_flight is not None:
                issue, compute, wait = in_flight
                rec.add_label(Label("overlap", "multi_stream", [
                    self.ev(issue, "python", "asynchronous library transfers issued (NCCL's stream)"),
                    self.ev(compute, "python", "computation issued while they are in flight"),
                    self.ev(wait, "python", "waited for only after it")]))
        if py.chunk_loops:
            rec.add_label(Label("overlap", "chunked_pipeline", [self.ev(py.chunk_loops[0], "python", "a loop over chunks issues transfers and compute")]))
        fused = [r for r in mover if self.computes.get(r.name, False)]
        if fused:
            k = fused[0]
            pass_name = "clang" if k.language == "cuda" else "python"
            evidence = [self.ev(k.line, pass_name, f"{k.name} moves peer data and computes")]
            compute_line = self._compute_line(k)
            if compute_line:
                evidence.append(self.ev(compute_line, pass_name, "the arithmetic in the same kernel"))
            rec.add_label(Label("overlap", "fused_kernel", evidence))
        if self.library_gemm_on_peers:
            # cuBLAS reading a peer's buffer moves the data inside the GEMM that consumes it.
            rec.add_label(Label("overlap", "fused_kernel", [self.ev(self.library_gemm_on_peers[0], "clang",
                                                                    "a library GEMM reads peer memory as its operand")]))
        if not rec.labels.get("overlap"):
            line = (compute_calls[0].line if compute_calls else (matmul_lines[0] if matmul_lines else py.solution_line or 1))
            rec.add_label(Label("overlap", "none", [self.ev(line, "python", "communication and computation run one after another")]))


def _takes_peers(fn: Function) -> bool:
    return any(p.pointer_kind in (*PEER_KINDS, *SIGNAL_KINDS, "multicast_ptr") for p in fn.params)


def _helpers_of_peer_kernels(k: _KernelFacts) -> set[str]:
    """Device helpers that kernel `k` shares with a kernel taking peer pointers, where `k` takes
    none: a helper's parameter kinds are joined over its callers (`ld<T>(p, i)` called with a
    peer's address in one kernel and a local gradient in another), so its peer accesses are the
    other kernel's, not `k`'s."""
    if k.fn.kind != "global" or _takes_peers(k.fn) or any(
            a.function == k.fn.name and a.pointer_kind in PEER_KINDS for a in k.cuda.accesses):
        return set()
    by_name = {f.name: f for f in k.cuda.functions}
    others = set()
    for f in k.cuda.functions:
        if f.kind == "global" and f.name != k.fn.name and _takes_peers(f):
            others |= _reach(f, by_name)
    return (k.reach - {k.fn.name}) & others


def _in_fallback(cuda: CudaFacts, line: int) -> bool:
    return any(a <= line <= b for a, b in cuda.fallback_ranges)


def _fallback_launched(cudas: list[CudaFacts]) -> set[str]:
    """Kernels launched, and launched only inside fallback branches."""
    where: dict[str, list[bool]] = {}
    for cuda in cudas:
        for launch in cuda.launches:
            where.setdefault(launch.kernel, []).append(_in_fallback(cuda, launch.line))
    return {k for k, flags in where.items() if flags and all(flags)}


# Counts, split sizes, offsets and headers that ranks exchange beside the payload are not the
# payload, so not the mechanism (as with a collective of split sizes, is_metadata_collective).
# Models name these buffers and kernels plainly.
_METADATA_WORDS = {"meta", "metadata", "count", "counts", "cnt", "cnts", "split", "splits", "sizes",
                   "offsets", "hist", "histogram", "header", "hdr", "lens", "lengths"}
# words that name metadata only on a pointer (`remote_prefix`), not on a kernel (`conv_prefix_kernel`)
_METADATA_POINTER_WORDS = {"prefix"}
METADATA_NOTE = "metadata: "


def _name_words(name: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", name)}


def _is_metadata_access(a, kernel: str) -> bool:
    """A peer access through a pointer, or in a kernel or device function, named for metadata."""
    return bool(_METADATA_WORDS & (_name_words(a.pointer) | _name_words(kernel) | _name_words(a.function))
                or _METADATA_POINTER_WORDS & _name_words(a.pointer))


def _drop_metadata_only(rec: CandidateRecord) -> None:
    """A peer-access label whose every piece of evidence is a metadata exchange is left out of the
    candidate's mechanism when another label carries the payload; alone it stays (it may be all
    the file moves)."""
    labs = rec.labels.get("mechanism", [])
    meta_only = [lab for lab in labs if lab.evidence and all(e.note.startswith(METADATA_NOTE) for e in lab.evidence)]
    if meta_only and len(meta_only) < len([lab for lab in labs if lab.value not in ("none", "unknown")]):
        rec.labels["mechanism"] = [lab for lab in labs if lab not in meta_only]
    for lab in rec.labels.get("mechanism", []):
        if lab not in meta_only:  # a payload label's evidence is its payload accesses
            lab.evidence = [e for e in lab.evidence if not e.note.startswith(METADATA_NOTE)]


def _orders_threads(fence_kind: str) -> bool:
    """A fence that orders memory between threads: every C++ fence (__threadfence_system,
    atomic_thread_fence); of the PTX ones (inline asm), what ptx_ops calls a system fence, so a
    proxy fence (fence.proxy.tensormap::generic.release.sys) is not one."""
    if not fence_kind.startswith(("fence", "membar")):
        return True
    return ptx_ops.decode(fence_kind).fences_system


def _ptx_entry(ptx: PtxFacts, name: str):
    """The PTX entry of kernel `name`: demangled names carry namespaces, templates, parameters."""
    for e in ptx.entries:
        base = e.name.split("(")[0].split("<")[0].strip()
        if base == name or base.endswith("::" + name):
            return e
    return None


def problem_entry(rec: CandidateRecord):
    """The catalog entry of the PKB problem the record answers (matched by name; PKB's files
    numbered 34 and up answer problem id - 1); None where none matches."""
    from problems import catalog

    table = catalog.entries()
    entry = None
    matched = getattr(rec, "matched_problem", None)  # the evaluation's match, where it set one
    if isinstance(matched, int):
        entry = table.get(matched)
    name = rec.problem_name or ""
    if entry is None and name:
        entry = catalog.by_name(name) or max(
            (e for e in table.values() if name.startswith(e.name + "_")), key=lambda e: len(e.name), default=None)
    if entry is None and rec.problem_id is not None:
        stem = rec.path.rsplit("/", 1)[-1]
        for pid in (rec.problem_id, rec.problem_id - 1):
            e = table.get(pid)
            if e is not None and e.name in stem:
                entry = e
                break
    return entry


def problem_has_compute(rec: CandidateRecord) -> bool | None:
    """Whether the problem the record answers computes beyond its collective, for every PKB
    problem: the catalog's entry, else our own spec of it; None where neither says."""
    from problems import spec as problem_spec

    entry = problem_entry(rec)
    if entry is None:
        return None
    if entry.has_compute is not None:
        return entry.has_compute
    spec = problem_spec(entry.id)
    return spec.has_compute if spec is not None and spec.name == entry.name else None


def classify(rec: CandidateRecord, has_compute: bool | None) -> None:
    Classifier(rec, has_compute).run()
