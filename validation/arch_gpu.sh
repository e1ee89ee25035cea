#!/usr/bin/env bash
# Issue 53's cold truth, one model per GPU of one host, in parallel (validation/cold_gpu.py does each model).
# usage: validation/arch_gpu.sh OUT LIMIT_S TAG "MODEL cold_gpu-options...[|FALLBACK options...]" ...   (the Nth job on GPU N-1)
# Each job is stopped with SIGINT after LIMIT_S (its server stopped, its records kept); writes OUT/host.txt
# (the host's CPU model and GPUs, recorded beside every truth file) and OUT/MODEL-TAG.tar.xz (the job's files and log).
set -uo pipefail
OUT=$1; LIMIT=$2; TAG=$3; shift 3
if [ "$TAG" = r3 ]; then  # the third call's jobs, decided after the first: block FP8 without DeepGEMM, gpt-oss on /v1/completions
  set -- "kimi-k2-6l --levels 1,16,64,128 --stagger-levels 1,16 --long-levels 64" "deepseek-v3-8l --levels 1,16,64,128 --stagger-levels 1,16 --long-levels 64" \
    "phi-4 --levels 1,4,16,64,128" "gpt-oss-20b --levels 1,16,64,128 --stagger-levels 1,16 --long-levels 64"
fi
mkdir -p /tmp/r
{ lscpu | grep -i "model name"; nproc; nvidia-smi -L; } > "$OUT/host.txt"
i=0
for job in "$@"; do
  (  # "MODEL opts|OTHER opts": OTHER runs in what is left of LIMIT_S when MODEL's run fails
    start=$SECONDS
    IFS='|' read -ra alternatives <<<"$job"
    for alt in "${alternatives[@]}"; do read -r model _ <<<"$alt"; rm -rf "/tmp/r/$model" "/tmp/r/$model.log"; done  # no earlier call's files
    for alt in "${alternatives[@]}"; do
      read -r model opts <<<"$alt"
      if [ "$alt" != "${alternatives[0]}" ]; then  # a fallback: enough time left, and the GPU freed of the failed server
        [ $((LIMIT - (SECONDS - start))) -gt 120 ] || break
        for pid in $(nvidia-smi -i "$i" --query-compute-apps=pid --format=csv,noheader); do kill -9 "$pid" 2>/dev/null; done
      fi
      # shellcheck disable=SC2086
      CUDA_VISIBLE_DEVICES=$i timeout -s INT -k 30 $((LIMIT - (SECONDS - start))) python3 validation/cold_gpu.py --kit .gpu-vllm \
        --out "/tmp/r/$model" --model "$model" $opts > "/tmp/r/$model.log" 2>&1 && break
    done
  ) &
  i=$((i + 1))
done
wait
pkill -INT -f vllm.entrypoints; sleep 5; pkill -9 -f vllm.entrypoints
for job in "$@"; do
  IFS='|' read -ra alternatives <<<"$job"
  for alt in "${alternatives[@]}"; do
    read -r model _ <<<"$alt"
    [ -f "/tmp/r/$model.log" ] || continue
    find "/tmp/r/$model" -name '*-boot.log' -exec sed -i -E '/POST \/v1|Capturing CUDA graphs|\/tokenize|\/detokenize|GET \/metrics/d' {} +
    grep -E "ready in|burst c=|stagger c=|Error|error" "/tmp/r/$model.log" | tail -20
    tar -cJf "$OUT/$model-$TAG.tar.xz" -C /tmp/r --exclude '*.lock' "$model" "$model.log"
  done
done
