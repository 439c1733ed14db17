"""The hostile corpus's records against corpus/hostile/manifest.toml: which candidates got the
outcome and subtype the manifest expects, on whatever machine the evaluation ran (the CPU tests
check gloo; this reads an `eval.jsonl` from a GPU run, where the backend is NCCL).

    python bench/hostile_check.py OUT/eval.jsonl [--subset]

An entry's `on_cuda` outcome applies to a CUDA run; entries above the run's world size, GPU-only
entries on CPU and memory-limit entries without one are listed as not judged. Prints one line per
candidate that differs (or is missing: with --subset, for a run that took some of the candidates,
those without a record are left out), then the count that match. Exit 0.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path

MANIFEST = Path(__file__).resolve().parents[1] / "corpus" / "hostile" / "manifest.toml"


def expected() -> dict[str, dict]:
    return {e["path"]: e for e in tomllib.loads(MANIFEST.read_text(encoding="utf-8"))["candidate"]}


def last_records(jsonl: Path) -> dict[str, dict]:
    """The last evaluation per file name. A resumed run writes a record for every file; one it did
    not run again says `skipped_cached` and carries the stored outcome."""
    out: dict[str, dict] = {}
    for line in jsonl.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            out[Path(rec["path"]).name] = rec.get("evaluation") or {}
    return out


def expectation(entry: dict, ev: dict, memory_limit: bool) -> tuple[str, str] | str:
    """(outcomes, subtype) the manifest expects of this run, or why the run cannot judge the entry."""
    ws, device = ev.get("world_size") or 1, ev.get("device") or "cpu"
    if ws < entry.get("min_world_size", 1):
        return f"not judged at world size {ws} (needs {entry['min_world_size']})"
    if entry.get("needs_gpu") and device != "cuda":
        return "not judged on CPU (needs a GPU)"
    if entry.get("needs_memory_limit") and not memory_limit:
        return "not judged without a memory limit (PKB_SANDBOX_MEMORY_MAX)"
    spec = entry.get("on_cuda", entry) if device == "cuda" else entry
    return spec["outcome"], spec["subtype"]


def differences(expect: dict[str, dict], got: dict[str, dict], memory_limit: bool = False) -> tuple[list, list]:
    """(file, expected, got) for each candidate whose status, outcome or subtype is not what the
    manifest expects of this run; and (file, why) for each the run cannot judge."""
    rows, unjudged = [], []
    for name, e in sorted(expect.items()):
        ev = got.get(name)
        if ev is None:
            rows.append((name, f"{e['outcome']}/{e['subtype']}", "no record"))
            continue
        want = expectation(e, ev, memory_limit)
        if isinstance(want, str):
            unjudged.append((name, want))
            continue
        outcomes, subtype = want
        if ev.get("status") not in ("ran", "skipped_cached"):
            rows.append((name, f"{outcomes}/{subtype}", f"{ev.get('status')}: {str(ev.get('reason', ''))[:160]}"))
        elif ev.get("outcome") not in outcomes.split("|") or (subtype != "*" and ev.get("subtype") not in subtype.split("|")):
            rows.append((name, f"{outcomes}/{subtype}", f"{ev.get('outcome')}/{ev.get('subtype')}: {str(ev.get('reason', ''))[:160]}"))
    return rows, unjudged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jsonl", type=Path, help="eval.jsonl of `pkb-analyze eval corpus/hostile`")
    ap.add_argument("--memory-limit", action="store_true", help="the run had PKB_SANDBOX_MEMORY_MAX set")
    ap.add_argument("--subset", action="store_true", help="the run took some of the candidates: those without a record are left out")
    args = ap.parse_args(argv)
    expect, got = expected(), last_records(args.jsonl)
    if args.subset:
        expect = {name: e for name, e in expect.items() if name in got}
    rows, unjudged = differences(expect, got, args.memory_limit)
    for name, why in unjudged:
        print(f"{name:48s} {why}")
    for name, want, have in rows:
        print(f"{name:48s} expected {want:32s} got {have}")
    judged = len(expect) - len(unjudged)
    print(f"{judged - len(rows)} of {judged} candidates this run can judge get the manifest's outcome ({len(unjudged)} not judged)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
