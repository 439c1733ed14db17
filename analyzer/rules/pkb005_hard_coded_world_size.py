import re

from analyzer.python_pass import run_context
from analyzer.rules.base import Rule

_CUDA_CONST = re.compile(
    r"#define\s+(WORLD_SIZE|WORLD|NUM_RANKS|NRANKS|N_RANKS|NUM_GPUS|NGPUS|kWorldSize)\s+\d+"
    r"|constexpr\s+(?:int|unsigned|size_t|int32_t)\s+(kWorldSize|WORLD_SIZE|kNumRanks|NUM_RANKS|kRanks|kWorld|kNumGpus|NRANKS)\s*=\s*\d+"
    r"|\b1\s*-\s*rank\b"
)


class HardCodedWorldSize(Rule):
    """World size or rank count hard-coded.

    ## What it does
    Finds code that fixes the number of ranks: `assert dist.get_world_size() == 2`,
    `world_size = 8`, `peer = 1 - rank`, `(rank + 1) % 8`, `range(8)` over peers, or
    `#define WORLD_SIZE 8` / `constexpr int kWorldSize = 8` in the CUDA source.

    Where the run's world size is known (a PKB run tree, `h100_8`), a count equal to it holds on
    that run and is not reported; `1 - rank` (exactly two ranks) and other counts are.

    ## Why is this bad?
    The same problem is evaluated at 2, 4 and 8 ranks. A candidate written for one of them
    either asserts out at the others (`runtime_error`) or, worse, runs and reads only some of the
    peers (`missing_peer`) or indexes past the buffer array (`illegal_address`).

    ## Example
    ```python
    peer = 1 - dist.get_rank()
    ```

    ## Use instead
    ```python
    world = dist.get_world_size()
    peers = [(rank + i) % world for i in range(1, world)]
    ```
    and pass the world size to the kernel as an argument (or a template parameter chosen at run
    time from a few instantiations).
    """

    id = "PKB005"
    name = "hard-coded-world-size"
    severity = "warning"
    message = "world size or rank count is hard-coded"
    fix = "read dist.get_world_size() (or hdl.world_size) and pass it to the kernel"

    def check(self, ctx):
        # A count equal to the run's world size holds on that run (PKB ran every tree at 8):
        # only counts that break it are reported there. `1 - rank` needs exactly two ranks.
        world = run_context(ctx.rec.precision, ctx.rec.hardware).world_size

        def breaks(value: str) -> bool:
            return world is None or value != str(world)

        for a in ctx.py.asserts:
            if a.kind == "world_size" and breaks(a.literal):
                yield self.finding(ctx, a.line, f"asserts world size == {a.literal}")
        for c in ctx.py.constants:
            if c.name == "peer" or breaks(c.value):
                yield self.finding(ctx, c.line, f"{c.name} = {c.value}")
        for line, text, _src in ctx.cuda_lines():
            m = _CUDA_CONST.search(text)
            if m and not text.strip().startswith("//"):
                literal = re.search(r"(\d+)\s*;?\s*$", m.group(0))
                if "rank" in m.group(0) or literal is None or breaks(literal.group(1)):
                    yield self.finding(ctx, line, "in the CUDA source", pass_name="clang")
