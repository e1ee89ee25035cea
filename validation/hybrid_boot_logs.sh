#!/usr/bin/env bash
# Boot vLLM (dummy weights, ../shared/gpu-vllm kit copied to .gpu-vllm and set up) at each max_model_len and keep each
# boot log in $OUT: the hybrid fixtures in tests/fixtures/bootlogs/vllm-0.25-h200-*.log (validation/RESULTS-hybrid-h200.md).
# usage: validation/hybrid_boot_logs.sh NAME "LEN1 LEN2" [vllm flags...]
# NAME is a folder .gpu-vllm/configs/NAME holding config.json: the catalog file src/servelab/data/models/NAME.json without
# its "_servelab" key (and with "torch_dtype": "bfloat16").
set -u
NAME=$1; LENS=$2; shift 2
for LEN in $LENS; do
  LOG=$OUT/vllm-0.25-$NAME-$LEN.log
  t0=$(date +%s)
  if PGID=$(bash .gpu-vllm/serve.sh .gpu-vllm/configs/$NAME 8000 "$LOG" --max-model-len "$LEN" "$@"); then
    echo "$NAME $LEN ready in $(( $(date +%s) - t0 )) s"
    kill -INT -- -"$PGID"
    for i in $(seq 1 60); do kill -0 -- -"$PGID" 2>/dev/null || break; sleep 1; done
    kill -KILL -- -"$PGID" 2>/dev/null
  else
    echo "$NAME $LEN failed"
  fi
  grep -E "KV cache|Maximum concurrency|Model loading took|block size|Padding mamba|padding layers|Setting attention" "$LOG" | cut -c1-220
done
