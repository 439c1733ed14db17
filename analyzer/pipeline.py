"""The static slice, stage by stage, over files: read -> python -> clang -> ptx -> classify -> rules.

analyze_files is the one way to run it over many files (one process, or a pool of them).

Two caches (analyzer.static_cache): pass facts by content, run and analyzer code, so a changed
rule set re-labels without running a pass; and finished records by content, path, code and rules,
so an unchanged corpus comes back without decoding, parsing or labelling anything (383 files in
well under a second). Editing the analyzer invalidates both.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

from analyzer.classify import classify, problem_entry, problem_has_compute
from pkb.facts import CudaFacts, PtxFacts, StaticFacts
from analyzer.python_pass import analyze_python, run_context
from analyzer.rules import Rule, run_rules, select_rules
from analyzer.static_cache import FactCache, analyzer_version, moved_record, result_key, source_text
from pkb.corpus import FileRead, decode_file, read_file
from pkb.record import CandidateRecord, PassStatus
from pkb.suppress import split_suppressed
from pkb.serde import from_data, to_data


@dataclass
class StaticOptions:
    ptx: bool = True  # run the PTX pass where nvcc exists
    nvcc: str | None = None  # found automatically when None
    cache_dir: Path | None = None  # None: $PKB_CACHE_DIR or ~/.cache/pkb-analyze
    use_cache: bool = True
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    jobs: int = 0  # threads for nvcc beside the passes; 0: one per core; 1: nvcc in line, one thing at a time
    processes: int = 1  # processes for the passes of uncached files (analyze --jobs)
    # Whether analyzed records keep their pass facts; the command line's records do not need them
    # (what it writes and prints is the labels and findings), and a finished record from the
    # cache then costs no facts to rebuild nor to send back from a worker.
    keep_facts: bool = True


def default_cache_dir() -> Path:
    env = os.environ.get("PKB_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "pkb-analyze"


def _combined(name: str, parts: list[tuple[int, str, str]], seconds: float) -> PassStatus:
    """One status for a pass that ran once per CUDA source."""
    statuses = {status for _, status, _ in parts}
    # a source the PTX pass skips (its labels decided by the source) does not make the pass partial
    status = "ok" if statuses <= {"ok", "skipped"} and "ok" in statuses else (
        next(iter(statuses)) if len(statuses) == 1 else "partial")
    msgs = [f"source {i}: {msg}" for i, st, msg in parts if msg and st != "ok"]
    return PassStatus(name, status, "; ".join(msgs)[:500], seconds)


def _clang():
    try:
        from analyzer import clang_pass
    except ImportError:  # libclang missing: the pass says so, the others go on
        return None
    return clang_pass


def _ptx():
    try:
        from analyzer import ptx_pass
    except ImportError:
        return None
    return ptx_pass


class StaticAnalyzer:
    def __init__(self, options: StaticOptions | None = None):
        self.options = options or StaticOptions()
        self.rules: list[Rule] = select_rules(self.options.select or None, self.options.ignore or None)
        self.clang = _clang()
        self.ptx = _ptx() if self.options.ptx else None
        self.nvcc = None
        if self.ptx is not None:
            self.nvcc = self.options.nvcc or self.ptx.find_nvcc()
        cache_dir = self.options.cache_dir or default_cache_dir()
        self.cache = FactCache(cache_dir / "static.sqlite") if self.options.use_cache else None
        self.results = FactCache(cache_dir / "static.sqlite", "results") if self.options.use_cache else None
        self.ptx_cache_dir = cache_dir / "ptx"

    def _ptx_token(self) -> str:
        return f"ptx:{self.nvcc}" if self.ptx is not None and self.nvcc else "ptx:off"

    def cache_key(self, rec: CandidateRecord) -> str:
        # The run (precision, hardware) decides which branches are fallbacks: part of the key.
        return f"{rec.sha256}:{rec.precision}:{rec.hardware}:{analyzer_version()}:{self._ptx_token()}"

    def result_key(self, rec: CandidateRecord) -> str:
        return result_key(rec, self._ptx_token(), [r.id for r in self.rules])

    # ---- one record -------------------------------------------------------------------------

    def _from_cache(self, rec: CandidateRecord) -> bool:
        """Fill rec.facts and rec.passes from the cache; True on a hit (or nothing to analyze)."""
        if rec.parse_status != "ok":
            rec.passes = [PassStatus(n, "skipped", f"file not analyzed: {rec.parse_status}") for n in ("python", "clang", "ptx")]
            return True
        hit = self.cache.get(self.cache_key(rec)) if self.cache is not None else None
        if hit is None:
            return False
        rec.facts = from_data(StaticFacts, hit["facts"])
        rec.passes = [from_data(PassStatus, p) for p in hit["passes"]]
        return True

    def _store(self, rec: CandidateRecord) -> None:
        if self.cache is not None:
            self.cache.put(self.cache_key(rec), {"facts": to_data(rec.facts), "passes": [to_data(p) for p in rec.passes]})

    def facts(self, rec: CandidateRecord) -> None:
        """Fill rec.facts and rec.passes (from the cache when the content is unchanged)."""
        if self._from_cache(rec):
            return
        self._compute_source_passes(rec)
        self._compute_ptx(rec)
        self._store(rec)

    def _compute_source_passes(self, rec: CandidateRecord) -> None:
        t0 = time.perf_counter()
        run = run_context(rec.precision, rec.hardware)
        entry = problem_entry(rec) if run.world_size else None
        if entry is not None and (entry.group_args or entry.none_args):
            run = replace(run, group_args=entry.group_args, none_args=entry.none_args)
        if entry is not None and entry.scalar_args and run.world_size == 8:  # the factory's values at 8 ranks
            run = replace(run, scalar_args=entry.scalar_args)
        if entry is not None and entry.input_dtype and run.dtype:
            run = replace(run, dtype=entry.input_dtype)  # the factory's fixed dtype, not the tree's precision
        py = analyze_python(rec.source, rec.path, rec.syntax_tree(), run)
        rec.facts = StaticFacts(python=py)
        rec.passes = [PassStatus("python", "ok" if py.status == "ok" else "failed", py.message, time.perf_counter() - t0)]
        if py.status != "ok":
            rec.passes += [PassStatus("clang", "skipped", "the Python pass failed")]
            return
        t0 = time.perf_counter()
        if not py.cuda_sources:
            rec.passes.append(PassStatus("clang", "skipped", "no CUDA source in the file"))
        elif self.clang is None:
            rec.passes.append(PassStatus("clang", "skipped", "libclang is not installed (pip install libclang-ng)"))
        else:
            for src in py.cuda_sources:
                try:
                    rec.facts.cuda.append(self.clang.analyze_cuda(src, rec.path, py.ext_arg_kinds))
                except Exception as exc:  # a pass bug must cost one source, not the run
                    rec.facts.cuda.append(CudaFacts(source_index=src.index, status="failed", message=f"clang pass error: {exc!r}"))
            rec.passes.append(_combined("clang", [(c.source_index, c.status, c.message) for c in rec.facts.cuda], time.perf_counter() - t0))

    def _compute_ptx(self, rec: CandidateRecord) -> None:
        py = rec.facts.python
        t0 = time.perf_counter()
        if py.status != "ok":
            rec.passes.append(PassStatus("ptx", "skipped", "the Python pass failed"))
        elif not py.cuda_sources:
            rec.passes.append(PassStatus("ptx", "skipped", "no CUDA source in the file"))
        elif self.ptx is None:
            rec.passes.append(PassStatus("ptx", "skipped", "disabled (--no-ptx)" if not self.options.ptx else "PTX pass unavailable"))
        elif not self.nvcc:
            rec.passes.append(PassStatus("ptx", "skipped", "nvcc not found; PTX pass skipped (set PKB_NVCC or put nvcc on PATH)"))
        else:
            by_index = {c.source_index: c for c in rec.facts.cuda}
            for src in py.cuda_sources:
                try:
                    rec.facts.ptx.append(self.ptx.analyze_ptx(src, by_index.get(src.index), rec.path, self.nvcc, self.ptx_cache_dir,
                                                              skip_decided=True))
                except Exception as exc:
                    rec.facts.ptx.append(PtxFacts(source_index=src.index, status="failed", message=f"ptx pass error: {exc!r}"))
            rec.passes.append(_combined("ptx", [(p.source_index, p.status, p.message) for p in rec.facts.ptx], time.perf_counter() - t0))

    def label(self, rec: CandidateRecord) -> None:
        rec.labels, rec.kernels, rec.findings, rec.suppressed = {}, [], [], []
        if rec.parse_status != "ok" or rec.facts.python.status != "ok":
            return
        classify(rec, problem_has_compute(rec))
        rec.findings, rec.suppressed = split_suppressed(run_rules(rec, self.rules), rec.source)

    def analyze(self, rec: CandidateRecord) -> CandidateRecord:
        self.facts(rec)
        self.label(rec)
        return rec

    # ---- files, start to finish (the command line's path) ------------------------------------

    def _cached_result(self, raw: FileRead) -> CandidateRecord | None:
        """The finished record from the result cache, where its result_key (the bytes, what the
        file's name and run tree say, the code and the rules) is unchanged; None otherwise."""
        if raw.data is None or self.results is None:
            return None
        done = self.results.get_record(self.result_key(raw.rec))
        if done is not None:
            done = moved_record(done, raw.rec, in_place=True)  # stored by a copy under another folder
            done.source = source_text(done.parse_status, raw.data)
            if self.options.keep_facts:
                self._from_cache(done)
        return done

    def _begin(self, raw: FileRead) -> tuple[CandidateRecord, str | None, bool]:
        """(the record, its result key or None, whether it is finished): finished from the result
        cache (_cached_result), else decoded with its facts to come."""
        done = self._cached_result(raw)
        if done is not None:
            return done, None, True
        key = self.result_key(raw.rec) if raw.data is not None and self.results is not None else None
        return decode_file(raw), key, False

    def _finish(self, rec: CandidateRecord, key: str | None) -> CandidateRecord:
        """Label a record whose facts are in, cache the finished record, let go of what the caller
        does not need (the syntax tree; the facts unless kept)."""
        self.label(rec)
        if key is not None and self.results is not None:
            self.results.put_record(key, rec)
        rec.tree = None  # syntax_tree() parses again on demand
        if not self.options.keep_facts:
            rec.facts = StaticFacts()
        return rec

    def analyze_file(self, raw: FileRead) -> CandidateRecord:
        """One file from its bytes to its finished record, every pass in this thread."""
        rec, key, finished = self._begin(raw)
        if finished:
            return rec
        self.facts(rec)
        return self._finish(rec, key)

    def analyze_files(self, files: Iterable[Path], root: Path | None, max_bytes: int | None = None,
                      processes: int | None = None) -> Iterator[CandidateRecord]:
        """Read and analyze files, yielding each record in input order as soon as it and those
        before it are done; the records are those read_candidate + analyze would give.

        Each file is read once (its bytes give the sha256 and the text). A file whose bytes, name,
        run tree, analyzer and rules are unchanged comes back from the result cache, finished,
        without decoding, parsing or labelling. Otherwise its facts come from the fact cache or the
        passes, then it is labelled; both cache entries are written as each file is done. A file
        whose result key an earlier file of this run had (the same bytes under another folder) is
        not analysed again: it gets that file's record under its own path (moved_record), copied
        when its turn comes. `processes` > 1: this process reads each file and looks it up; the
        others go with their bytes to a process pool (decoding, passes, labels and cache writes
        all in the workers).
        """
        from collections import deque

        keys: deque[tuple[str | None, bool]] = deque()  # per file read, in order: its key, whether a copy

        def reads() -> Iterator[FileRead | _Copy]:
            seen: set[str] = set()
            for path in files:
                raw = read_file(path, root, max_bytes)
                key = self.result_key(raw.rec) if raw.data is not None else None
                repeat = key is not None and key in seen
                keys.append((key, repeat))
                if key is not None:
                    seen.add(key)
                yield _Copy(raw.rec) if repeat else raw

        procs = self.options.processes if processes is None else processes
        landed = self._reads_in_pool(reads(), procs) if procs > 1 else self._reads_here(reads())
        firsts: dict[str, CandidateRecord] = {}
        for item in landed:
            key, repeat = keys.popleft()
            if repeat:
                assert isinstance(item, _Copy) and key is not None
                yield moved_record(firsts[key], item.read)
                continue
            assert isinstance(item, CandidateRecord)
            if key is not None:
                firsts[key] = item
            yield item

    def _reads_here(self, reads: Iterable[FileRead | _Copy]) -> Iterator[CandidateRecord | _Copy]:
        """analyze_files in this process; a _Copy passes through in its place."""
        from collections import deque

        jobs = self.options.jobs or max(1, os.cpu_count() or 1)
        if jobs == 1:
            # one thing at a time, nvcc included: --jobs 1 is how a user keeps the run to one core
            for raw in reads:
                yield raw if isinstance(raw, _Copy) else self.analyze_file(raw)
            return
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            pending: deque = deque()

            def ready(block: bool) -> Iterator[CandidateRecord | _Copy]:
                while pending and (block or pending[0][2] is None or pending[0][2].done()):
                    rec, key, fut = pending.popleft()
                    if fut is not None:
                        fut.result()
                        self._store(rec)
                        self._finish(rec, key)
                    yield rec

            for raw in reads:
                if isinstance(raw, _Copy):
                    pending.append((raw, None, None))
                    continue
                rec, key, finished = self._begin(raw)
                if finished:
                    pending.append((rec, key, None))
                elif self._from_cache(rec):
                    pending.append((self._finish(rec, key), key, None))
                else:
                    # nvcc is a process of its own: it runs in a thread while the next file's
                    # Python and clang passes run here
                    self._compute_source_passes(rec)
                    pending.append((rec, key, pool.submit(self._compute_ptx, rec)))
                yield from ready(block=False)
            yield from ready(block=True)

    def _reads_in_pool(self, reads: Iterable[FileRead | _Copy], processes: int) -> Iterator[CandidateRecord | _Copy]:
        """analyze_files over a process pool; a _Copy passes through in its place."""
        import multiprocessing as mp
        from collections import deque
        from concurrent.futures import Future, ProcessPoolExecutor

        # Reading a file and looking its result up costs about a millisecond: done here, so a
        # finished file never travels to a worker and a warm run starts no pool. A file to
        # analyze goes with its bytes (read once); decoding, passes, labels and its cache
        # entries are the worker's.
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
        worker_options = StaticOptions(**{**self.options.__dict__, "nvcc": self.nvcc, "processes": 1, "jobs": 1})
        cache_path = self.cache.path if self.cache is not None else None
        pool: ProcessPoolExecutor | None = None
        pending: deque = deque()

        def ready(block: bool) -> Iterator[CandidateRecord | _Copy]:
            while pending and (block or not isinstance(pending[0], Future) or pending[0].done()):
                item = pending.popleft()
                yield item.result() if isinstance(item, Future) else item

        try:
            for raw in reads:
                done = raw if isinstance(raw, _Copy) else self._cached_result(raw)
                if done is None:
                    if pool is None:
                        pool = ProcessPoolExecutor(max_workers=processes, mp_context=ctx, initializer=_worker_init,
                                                   initargs=(worker_options, cache_path, os.getpid()))
                    pending.append(pool.submit(_worker_analyze_file, raw))
                else:
                    pending.append(done)
                yield from ready(block=False)
            yield from ready(block=True)
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
        if self.results is not None:
            self.results.close()


@dataclass
class _Copy:
    """In analyze_files, a file whose content an earlier file of the run had: read, not analysed."""

    read: CandidateRecord  # read_file's record: the name fields of this copy


# ---- the pool's workers (module level: what a process pool can call) ---------------------------

_WORKER: StaticAnalyzer | None = None


def _worker_init(options: StaticOptions, cache_path: Path | None, parent: int | None = None) -> None:
    """A file worker: its own analyzer, writing the cache itself (each entry as it is made)."""
    import signal

    global _WORKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it lets running files finish
    if parent is not None:
        _exit_with_parent(parent)
    if cache_path is not None:
        options = StaticOptions(**{**options.__dict__, "cache_dir": cache_path.parent})
    _WORKER = StaticAnalyzer(options)


def _exit_with_parent(parent: int) -> None:
    """A forked worker holds the parent's descriptors, the run's lock on the output folder among
    them: orphaned by a kill -9 of the run it waited forever on its queue, and every resume was
    refused as a second run. It leaves as soon as its parent is gone."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _worker_analyze_file(raw: FileRead) -> CandidateRecord:
    assert _WORKER is not None
    return _WORKER.analyze_file(raw)
