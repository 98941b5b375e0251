#!/usr/bin/env bash
# The FSDP2 end-to-end measurement on a 2-GPU box, in parts that each fit one device
# call (10 minutes): run from a bundle (scripts/gpu-bundle.sh) as
# `PARTS="..." bash bundle/gpu-fsdp2.sh` from the repository root; the logs and results
# are tarred into $OUT/fsdp2.tgz. Parts, separated by spaces:
#   hooks      host µs of one hook call, lowcon (kernel, memop) vs NCCL (hook_cost.py)
#   profile    4096x12 at 1024 and 4096 tokens, fp32 reduce, every mode and the memop
#              variant, 30 paired rounds, with --profile (the ablation of sync methods)
#   fp32-small 2048x8 and 4096x12 at 256..16384 tokens, fp32 reduce
#   fp32-wide  8192x4 at 256..16384 tokens, fp32 reduce
#   bf16-small, bf16-wide: the same with a bf16 reduce
#   floor      4096x12 and 8192x4 at 1024 and 4096 tokens, fp32 reduce: lowcon (auto,
#              torch memory; mem=pool; rs=sm-direct: the library's own choice), the
#              traffic floor, FSDP2 on a lowcon process group,
#              NCCL-CE; peak memory with the pool trimmed between configurations
#   floor-bf16 the same with a bf16 reduce
#   bundle-a   the 2-GPU run's FSDP2 part: 4096x12 and 8192x4 at 1024 tokens, fp32
#              reduce, 30 rounds: NCCL and its A/A twin, lowcon (torch memory), lowcon
#              with the pool, FSDP2 on a lowcon process group, the traffic floor,
#              NCCL-CE and no communication (run it after `hooks`, whose table has
#              torch memory against the pool)
#   bundle-b   the 2-GPU run's second FSDP2 part: 4096x12 at 1024 and 4096 tokens and
#              8192x4 at 1024, fp32 reduce, 20 rounds: NCCL and its A/A twin, lowcon with
#              the bf16 wire and with the fp32 one, NCCL-CE, no communication and the
#              traffic floor; bytes per step from lowcon's counters
#   decompose  8192x4 and 4096x12 at 1024 tokens, fp32 reduce, 6 rounds with --profile:
#              NCCL, lowcon, NCCL-CE, no communication; the report splits each mode's
#              excess (fsdp2_decompose.py, NOTE [step decomposition])
#   hf-decompose  transformers' LlamaForCausalLM (--model hf-llama), 4096x8 at 2048 tokens,
#              fp32 reduce, 6 rounds with --profile: NCCL, lowcon, NCCL-CE, no communication,
#              and the decomposition report (transformers as for hf-llama)
#   hf-llama   transformers' LlamaForCausalLM (--model hf-llama), 4096x8 at 2048 and 8192
#              tokens, fp32 reduce, 20 rounds: NCCL and its A/A twin, lowcon, NCCL-CE, no
#              communication (transformers from bundle/hfwheels: BUNDLE_HF=1 when bundling)
# Default: hooks profile. GPUs: NPROC (default 2). Extra fsdp2_paired.py options:
# FSDP2_ARGS. Exit status 0 only if every step passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/.." && pwd)
out=/tmp/fsdp2; rm -rf "$out"; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
parts=" ${PARTS:-hooks profile} "
for p in $parts; do
  case $p in hooks|profile|fp32-small|fp32-wide|bf16-small|bf16-wide|floor|floor-bf16|bundle-a|bundle-b|decompose|hf-decompose|hf-llama) ;;
    *) echo "gpu-fsdp2.sh: unknown part $p" >&2; exit 2;;
  esac
done
has() { [[ $parts == *" $1 "* ]]; }
trap 'tar -C "$out" -czf "${OUT:-$here}/fsdp2.tgz" . 2>/dev/null' EXIT
# shellcheck source=scripts/gpu-steps.sh
. "$here/gpu-steps.sh"
steps_budget 600
{ nvidia-smi -L; git -C "$repo" log -1 --format='commit %h %cd' 2>/dev/null; } > "$out/smi.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$here"/wheels/lowcon-*.whl > "$out/pip.txt" 2>&1
export PYTHONPATH=/tmp/site
if { has hf-llama || has hf-decompose; } && ! python3 -c "import transformers" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site "$here"/hfwheels/*.whl >> "$out/pip.txt" 2>&1 ||
    echo "gpu-fsdp2.sh: no transformers (bundle with BUNDLE_HF=1): the hf-llama part will fail" | tee -a "$out/summary.txt"
fi
bench=$repo/crates/lowcon-py/bench
tr=(python3 -m torch.distributed.run --nproc-per-node "${NPROC:-2}")
read -r -a extra <<< "${FSDP2_ARGS:-}"
paired() { # paired NAME SECONDS OPTIONS...: one paired run into $out/NAME
  local name=$1 t=$2; shift 2
  st "paired $name" log.txt "$t" "${tr[@]}" "$bench/fsdp2_paired.py" --out "$out/$name" --time-budget $((t - 40)) "$@" "${extra[@]}"
  python3 "$bench/fsdp2_paired.py" --report "$out/$name/paired.json" --plot "$out/$name/fsdp2.png" \
    > "$out/$name/table.txt" 2>&1 && cat "$out/$name/table.txt"
  rm -f "$out/$name"/trace-*w2048* 2>/dev/null
}
has hooks && st "hook_cost.py (host µs per call)" log.txt 120 "${tr[@]}" "$bench/hook_cost.py" --json "$out/hooks.json"
has profile && paired profile 420 --sweep "4096x12:1024,4096" --reduce-dtypes fp32 --rounds 30 --profile \
  --modes nccl,nccl-b,lowcon,lowcon@sync=memop,nccl-ce,nocomm
small="2048x8:256,1024,4096,16384;4096x12:256,1024,4096,16384"
wide="8192x4:256,1024,4096,16384"
has fp32-small && paired fp32-small 560 --sweep "$small" --reduce-dtypes fp32
has fp32-wide && paired fp32-wide 560 --sweep "$wide" --reduce-dtypes fp32
has bf16-small && paired bf16-small 560 --sweep "$small" --reduce-dtypes bf16
has bf16-wide && paired bf16-wide 560 --sweep "$wide" --reduce-dtypes bf16
floor_modes=nccl,nccl-b,lowcon,lowcon@mem=pool,lowcon@rs=sm-direct,floor,lowcon-pg,nccl-ce,nocomm
has floor && paired floor 560 --sweep "4096x12:1024,4096;8192x4:1024,4096" --reduce-dtypes fp32 --modes "$floor_modes"
has floor-bf16 && paired floor-bf16 560 --sweep "4096x12:1024,4096;8192x4:1024,4096" --reduce-dtypes bf16 \
  --modes "$floor_modes"
has bundle-a && paired bundle-a 430 --sweep "4096x12:1024;8192x4:1024" --reduce-dtypes fp32 --rounds 30 \
  --modes nccl,nccl-b,lowcon,lowcon@mem=pool,lowcon-pg,floor,nccl-ce,nocomm
has bundle-b && paired bundle-b 430 --sweep "4096x12:1024,4096;8192x4:1024" --reduce-dtypes fp32 --rounds 20 \
  --modes nccl,nccl-b,lowcon@wire=bf16,lowcon@wire=fp32,nccl-ce,nocomm,floor
has decompose && paired decompose 400 --sweep "8192x4:1024;4096x12:1024" --reduce-dtypes fp32 --rounds 6 \
  --warmup 2 --profile --profile-steps 2 --profile-ranks all --modes nccl,lowcon,nccl-ce,nocomm
has hf-decompose && paired hf-decompose 300 --model hf-llama --sweep "4096x8:2048" --reduce-dtypes fp32 --rounds 6 \
  --warmup 2 --profile --profile-steps 2 --profile-ranks all --modes nccl,lowcon,nccl-ce,nocomm
has hf-llama && paired hf-llama 560 --model hf-llama --sweep "4096x8:2048,8192" --reduce-dtypes fp32 --rounds 20 \
  --modes nccl,nccl-b,lowcon,nccl-ce,nocomm
cat "$out/summary.txt"
echo "$failures step(s) failed"
[ "$failures" = 0 ]
