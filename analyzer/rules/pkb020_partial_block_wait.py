import re

from analyzer import cuda_waits
from analyzer.brackets import closing
from pkb.facts import PEER_KINDS
from analyzer.rules.base import Rule

_ONE_BLOCK = re.compile(r"\bblockIdx\.x\s*==\s*\w+|\b\w+\s*==\s*blockIdx\.x\b|!\s*blockIdx\.x\b|\bblockIdx\.x\s*<\s*1\b")
_GRID_SYNC = re.compile(r"\.sync\s*\(\s*\)|this_grid\s*\(\s*\)\s*\.sync|cg::sync\s*\(|grid_sync|__syncgrid")
_SINGLE_GRID = re.compile(r"^\s*(?:dim3\s*\(\s*)?1\s*(?:,\s*1\s*)*\)?\s*$")


def _one_block_ifs(body: str) -> list[tuple[int, int, int]]:
    """(if offset, block start, block end) of `if (... blockIdx.x == 0 ...) { ... }` in `body`."""
    out = []
    for m in re.finditer(r"\bif\s*\(", body):
        close = closing(body, m.end() - 1, "(", ")")
        if close < 0 or not _ONE_BLOCK.search(body[m.end() : close]):
            continue
        rest = body[close + 1 :]
        lead = len(rest) - len(rest.lstrip())
        start = close + 1 + lead
        if start < len(body) and body[start] == "{":
            end = closing(body, start, "{", "}")
        else:
            end = body.find(";", start)
        if end > start:
            out.append((m.start(), start, end))
    return out


def _single_block_grid(text: str, grid: str) -> bool:
    if _SINGLE_GRID.match(grid):
        return True
    name = re.fullmatch(r"\s*(\w+)\s*", grid)
    if name:
        decl = re.findall(rf"\b{name.group(1)}\s*=\s*([^;]+);", text)
        return bool(decl) and all(_SINGLE_GRID.match(d) for d in decl)
    return False


class PartialBlockWait(Rule):
    """Only one block waits for peers' flags, then every block reads peer data.

    ## What it does
    Finds a kernel where the wait on peers' flags sits under `if (blockIdx.x == 0)` (one block,
    often one thread of it) and, after it, all blocks read peer buffers, with no grid-wide
    barrier (`grid.sync()`, a cooperative launch) between the wait and the reads. A kernel
    launched with a single block is not flagged.

    ## Why is this bad?
    `__syncthreads()` orders the threads of one block only. Blocks other than block 0 pass
    straight to the peer reads while block 0 is still spinning, so they read peer buffers before
    the peers have written them: stale or partial data, varying from call to call (a race that
    tests with small inputs, where one block does all the work, never show).

    ## Example
    ```cuda
    if (blockIdx.x == 0 && threadIdx.x < world_size) wait_flag(&flags[threadIdx.x], epoch);
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = peer[i];
    ```

    ## Use instead
    Let every block wait (each block's thread `t < world_size` polls peer `t`'s flag, then
    `__syncthreads()`), or split the wait and the reads into two kernels, or use a cooperative
    launch with `grid.sync()` after the wait.
    """

    id = "PKB020"
    name = "partial-block-wait"
    severity = "error"
    message = "only one block waits for peers' flags before all blocks read peer data"
    fix = "make every block wait (or grid.sync() after the wait, or a separate wait kernel)"

    def check(self, ctx):
        for cuda in ctx.facts.cuda:
            src = ctx.py.cuda_sources[cuda.source_index]
            text = src.text
            lines = text.split("\n")
            offsets = [0]
            for ln in lines:
                offsets.append(offsets[-1] + len(ln) + 1)
            text_line = {}
            for i in range(len(lines)):
                text_line.setdefault(src.file_line(i + 1), i)
            by_name = {f.name: f for f in cuda.functions}
            waiters = cuda_waits.waiting_functions(cuda, src)
            for f in cuda.functions:
                if f.kind != "global":
                    continue
                launches = [la for la in cuda.launches if la.kernel == f.name]
                if launches and all(_single_block_grid(text, la.grid) for la in launches):
                    continue
                if any(la.cooperative for la in launches):
                    continue
                start = offsets[max(f.text_line - 1, 0)]
                end = offsets[min(f.text_end_line, len(lines))]
                body = text[start:end]
                reach = {f.name} | {c for c in f.calls if c in by_name}
                for if_off, blk_start, blk_end in _one_block_ifs(body):
                    blk = body[blk_start:blk_end]
                    blk_first = src.file_line(text.count("\n", 0, start + blk_start) + 1)
                    blk_last = src.file_line(text.count("\n", 0, start + blk_end) + 1)
                    spins = [s for s in cuda.spin_loops if s.function == f.name and blk_first <= s.line <= blk_last] or (
                        f.name in waiters and re.search(r"\bwhile\s*\(", blk))
                    helper_wait = any(re.search(rf"\b{re.escape(w)}\s*\(", blk) for w in waiters if w != f.name)
                    if not spins and not helper_wait:
                        continue
                    after = body[blk_end:]
                    later_ifs = _one_block_ifs(after)
                    reads = [a for a in cuda.accesses if a.function in reach and a.kind == "load"
                             and a.pointer_kind in PEER_KINDS and blk_last < a.line <= f.end_line]
                    reads = [a for a in reads if not any(
                        src.file_line(text.count("\n", 0, start + blk_end + s) + 1) <= a.line
                        <= src.file_line(text.count("\n", 0, start + blk_end + e) + 1) for _, s, e in later_ifs)]
                    if not reads:
                        continue
                    read_off = offsets[text_line.get(reads[0].line, len(lines) - 1)]
                    between = text[start + blk_end : read_off]
                    if _GRID_SYNC.search(between) or any(
                            c.category == "grid_sync" and c.function == f.name and blk_last < c.line < reads[0].line
                            for c in cuda.api_calls):
                        continue
                    if_line = src.file_line(text.count("\n", 0, start + if_off) + 1)
                    yield self.finding(ctx, if_line, f"{f.name}: block 0 waits, other blocks read {reads[0].pointer} at line {reads[0].line}",
                                       kernel=f.name, pass_name="clang")
