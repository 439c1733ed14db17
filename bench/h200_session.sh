#!/usr/bin/env bash
# One session on the lent one-GPU H200 (torch 2.11, CUDA 13): the runs that need a GPU, in one
# call, each under its own time limit. Prints a short table last; everything lands in
# $OUT/session.tar.gz (traces, hand figures, emulation rows, evaluation records, logs).
#
#   bash bench/h200_session.sh            (from the repository root, on the GPU machine)
#
# PKB_EVAL_TREE: a folder whose pkb/ package shadows the working tree's (a snapshot of a
# committed state, so work in progress elsewhere in the tree does not change what is measured).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/pkb_session}
W=$OUT/work; mkdir -p "$W/logs"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$W/logs/pip.log" 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=${PKB_EVAL_TREE:+$PKB_EVAL_TREE:}$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$W/logs/gpu.txt" 2>&1
start=$(date +%s)

# 1. profiling fixtures and 2. the emulation check, side by side (correctness and trace shape;
#    neither reports a timing that the other could disturb).
timeout 280 python3 -m profiling.record_fixtures "$W/traces" >"$W/logs/fixtures.log" 2>&1 & P1=$!
timeout 280 python3 -m pkb.emulate.gpu_check --json "$W/emulate.json" --trials 2 >"$W/logs/emulate.log" 2>&1 & P2=$!
wait $P1; R1=$?; wait $P2; R2=$?

# 3. the evaluation core at world size 1 on real CUDA candidates of the corpus (alone on the GPU).
E=$W/evalset; mkdir -p "$E/bf16" "$E/fp32"
for f in solutions_cuda_bf16_h100_8_pkb_sample-a/1_allreduce_cuda.py solutions_cuda_bf16_h100_8_pkb_sample-a/2_allgather_cuda.py \
         solutions_cuda_bf16_h100_8_pkb_sample-b/16_gemm_reducescatter_cuda.py solutions_cuda_bf16_h100_8_pkb_sample-c/2_allgather_cuda.py; do
  cp "corpus/$f" "$E/bf16/"
done
cp corpus/solutions_cuda_fp32_h100_8_pkb_sample-c/1_allreduce_cuda.py "$E/fp32/"
CLI='from pkb.cli import main; main()'
timeout 170 python3 -c "$CLI" eval "$E/bf16" --out "$W/eval_bf16" --world-size 1 --trials 3 --timeout 150 >"$W/logs/eval_bf16.log" 2>&1; R3=$?
timeout 80 python3 -c "$CLI" eval "$E/fp32" --out "$W/eval_fp32" --world-size 1 --trials 3 --dtype float32 --timeout 70 >"$W/logs/eval_fp32.log" 2>&1; R4=$?
rm -rf "$W/traces/torch_extensions" "$W"/eval_*/eval_work
tar -czf "$OUT/session.tar.gz" -C "$W" . 2>/dev/null
echo "=== fixtures (rc $R1)"; tail -12 "$W/logs/fixtures.log"
echo "=== emulation (rc $R2)"; tail -16 "$W/logs/emulate.log"
echo "=== eval bf16 (rc $R3)"; tail -9 "$W/logs/eval_bf16.log"
echo "=== eval fp32 (rc $R4)"; tail -5 "$W/logs/eval_fp32.log"
echo "wall $(( $(date +%s) - start )) s"
