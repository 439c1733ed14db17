#!/usr/bin/env bash
# A GPU run longer than one device call (10 minutes): the run goes on in its own session while the
# machine stays warm (it is given back 30 s after a call ends), and later calls wait on it.
#
#   bash bench/h200_bg.sh start NAME 'COMMAND'   start COMMAND (it writes under $BG_OUT), return at once
#   bash bench/h200_bg.sh wait NAME SECONDS      wait up to SECONDS for it; print its log's end;
#                                                copy what it wrote under $BG_OUT (top level) to $OUT
# The environment keeps multicast off (NCCL_NVLS_ENABLE=0 ...) and puts carried wheels (.whl) and the
# working tree on PYTHONPATH.
# The job runs in its own copy of the working tree (carried folders such as .pkb and .whl too): a
# later device call replaces carried folders when it carries them again and removes them when it
# does not, under a job still reading them (seen 2026-12-03: 113 of 256 candidates 'no reference
# matches'; 2026-12-04: 125 of 129 'No module named utils' after a call without .pkb).
set -u
verb=$1 name=$2
dir=/tmp/pkb_bg/$name
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
case "$verb" in
  start)
    mkdir -p "$dir/out" "$dir/tree"
    tar --exclude=./.git -cf - . | tar -xf - -C "$dir/tree" && cd "$dir/tree" || exit 1
    if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >"$dir/pip.log" 2>&1
    fi
    export PYTHONPATH=/tmp/site:$PWD BG_OUT=$dir/out
    setsid bash -c "$3; echo \$? > $dir/rc" >"$dir/log" 2>&1 </dev/null &
    echo "started $name (pid $!), log $dir/log"
    ;;
  wait)
    # A machine taken back between calls comes again bare: say so at once instead of waiting on a
    # job that no longer exists (seen 2026-12-06: 540 s of device time spent waiting on nothing).
    if [ ! -d "$dir" ]; then echo "$name: no such job on this machine (it was started on one given back since)"; exit 3; fi
    end=$(( $(date +%s) + $3 ))
    while [ ! -f "$dir/rc" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
    if [ -f "$dir/rc" ]; then echo "$name finished, rc $(cat "$dir/rc")"; else echo "$name still running"; fi
    tail -n 60 "$dir/log"
    find "$dir/out" -name 'eval*.jsonl' -exec wc -l {} \; 2>/dev/null  # progress of evaluations inside
    [ -n "${OUT:-}" ] && find "$dir/out" -maxdepth 1 -type f -size -16M -exec cp {} "$OUT/" \; 2>/dev/null
    ;;
  *) echo "usage: $0 start NAME 'COMMAND' | wait NAME SECONDS"; exit 2 ;;
esac
