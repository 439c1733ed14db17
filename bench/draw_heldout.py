"""Draw a held-out set of PKB solution files for blind hand labelling.

    python bench/draw_heldout.py --pkb-root PKB --seed 20261214 [--per-tree 4]

Four files per run tree (solutions_*), each from another problem-id group of twelve (ids 1-12,
13-24, ...), none of the files any label set under bench/real_labels/ already holds, and no empty
file. Prints one path per line, relative to the PKB root. The same seed and label sets give the
same draw.
"""

from __future__ import annotations

import argparse
import random
import re
import tomllib
from pathlib import Path

LABELS = Path(__file__).resolve().parent / "real_labels"


def labelled() -> set[str]:
    return {key for f in LABELS.rglob("*.toml") for key in tomllib.loads(f.read_text(encoding="utf-8"))}


def draw(pkb_root: Path, seed: int, per_tree: int = 4) -> list[str]:
    rng = random.Random(seed)
    taken, out = labelled(), []
    for tree in sorted(p for p in pkb_root.glob("solutions_*") if p.is_dir()):
        groups: dict[int, list[str]] = {}
        for f in sorted(tree.glob("*.py")):
            m = re.match(r"(\d+)_", f.name)
            rel = f"{tree.name}/{f.name}"
            if m and rel not in taken and f.stat().st_size:
                groups.setdefault((int(m.group(1)) - 1) // 12, []).append(rel)
        for g in rng.sample(sorted(groups), min(per_tree, len(groups))):
            out.append(rng.choice(groups[g]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pkb-root", type=Path, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--per-tree", type=int, default=4)
    args = ap.parse_args(argv)
    print("\n".join(draw(args.pkb_root, args.seed, args.per_tree)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
