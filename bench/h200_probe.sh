#!/usr/bin/env bash
# Second GPU call of a session: the fixture programs that a failing one took down, in their own
# process, and the world-size-1 evaluation from a short work path (symmetric memory binds a Unix
# socket under $TMPDIR: a long path there fails with "Failed to bind socket: Invalid argument").
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/pkb_probe}; W=$OUT/work; mkdir -p "$W/logs"
export PYTHONPATH=${PKB_EVAL_TREE:+$PKB_EVAL_TREE:}$PWD
env | grep -i -E "^(tmp|temp|tmpdir)" >"$W/logs/env.txt"; echo "cwd=$PWD out=$OUT" >>"$W/logs/env.txt"
PKB_FIXTURE_PROGRAMS=nccl_collectives,multi_stream,host_sync timeout 150 python3 -m profiling.record_fixtures "$W/traces" >"$W/logs/fixtures.log" 2>&1 & P1=$!
mkdir -p /tmp/e/a /tmp/e/b
cp corpus/solutions_cuda_bf16_h100_8_pkb_sample-a/1_allreduce_cuda.py /tmp/e/a/
cp corpus/solutions_cuda_bf16_h100_8_pkb_sample-b/16_gemm_reducescatter_cuda.py /tmp/e/b/
timeout 200 python3 -c 'from pkb.cli import main; main()' eval /tmp/e --out /tmp/eo --world-size 1 --trials 3 --timeout 180 >"$W/logs/eval.log" 2>&1; R2=$?
wait $P1; R1=$?
cp /tmp/eo/eval.jsonl "$W/" 2>/dev/null; rm -rf "$W/traces/torch_extensions"
tar -czf "$OUT/probe.tar.gz" -C "$W" .
cat "$W/logs/env.txt"; echo "=== fixtures rc $R1"; grep "record_fixtures\]" "$W/logs/fixtures.log" | cut -c1-300 | tail -8
echo "=== eval rc $R2"; tail -6 "$W/logs/eval.log"
