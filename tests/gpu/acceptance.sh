#!/bin/bash
# traindeck on a real NVIDIA GPU in one call (about 4-6 minutes, never more than 8): NVML sampling live and recorded
# into a run, a CUDA ZeRO-2 + CPU-offload run of the demo model, the memory estimate against the measured peak of a
# model using more than 10 GB, a planted CUDA OOM diagnosed, and `traindeck stop` freeing the GPU, all through the
# `traindeck` command line (tests/gpu/gpu_check.py has the steps and their verdicts). Writes one markdown table to
# $OUT/gpu-acceptance.md, the logs beside it, and prints the table; exits 1 when a row says FAIL.
#
# Run from the repository root on the GPU machine with .gpu/ carried: `make gpu-check` prepares .gpu/ here and
# prints the device call (command `bash tests/gpu/acceptance.sh`, carry .gpu, timeout 540). Without an NVIDIA GPU
# it prints one line saying so and exits 0, writing nothing.
#
# TRAINDECK_GPU_PYTHON (default python3): the interpreter with CUDA torch; TRAINDECK_GPU_NVIDIA_SMI (default
# nvidia-smi); TRAINDECK_GPU_BUDGET_S (default 470): the whole check's time, wheels included;
# TRAINDECK_GPU_DRIVER=steps_check.py runs the step-timing check instead (tests/gpu/steps_check.py: step timing's
# cost on CUDA ZeRO-2 and FSDP2 steps, the offloaded run's verdict, about 5-6 minutes with TRAINDECK_GPU_BUDGET_S=410),
# its table in $OUT/gpu-steps.md; without a GPU it also prints, in a second line, what it would run there.
set -u
started=$(date +%s)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
py=${TRAINDECK_GPU_PYTHON:-python3}
smi=${TRAINDECK_GPU_NVIDIA_SMI:-nvidia-smi}
budget=${TRAINDECK_GPU_BUDGET_S:-470}

no_gpu() {
  echo "gpu-check: no NVIDIA GPU here ($1): nothing to check"
  # The step-timing driver also says what it would run there, and for how long (the standard library is enough).
  if [ "${TRAINDECK_GPU_DRIVER:-}" = steps_check.py ]; then
    python3 "$here/steps_check.py" --plan "$budget" 2>/dev/null | sed 's/^/gpu-check: on a GPU, /'
  fi
  exit 0
}
command -v "$smi" >/dev/null 2>&1 || no_gpu "no $smi"
timeout 30 "$smi" -L >/dev/null 2>&1 || no_gpu "$smi -L lists none"
timeout 120 "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 \
  || no_gpu "torch.cuda.is_available() is not true in $py"

OUT=${OUT:-/tmp/gpu-acceptance}
mkdir -p "$OUT"
driver=${TRAINDECK_GPU_DRIVER:-gpu_check.py}
case "$driver" in
  gpu_check.py) report=$OUT/gpu-acceptance.md ;;
  steps_check.py) report=$OUT/gpu-steps.md ;;
  *) echo "TRAINDECK_GPU_DRIVER: gpu_check.py or steps_check.py, not $driver"; exit 2 ;;
esac
work=$(mktemp -d "${TMPDIR:-/tmp}/traindeck-gpu.XXXXXX")

# What the machine lacks (DeepSpeed, pydantic, hjson) goes into a folder of its own, first on the path; the image's
# own packages stay as they are.
wheels_rc=0
if compgen -G "$repo/.gpu/wheels/*.whl" >/dev/null; then
  timeout 180 "$py" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
    --target "$work/site" "$repo"/.gpu/wheels/*.whl >"$OUT/prepare.log" 2>&1 || wheels_rc=$?
else
  echo "no wheels in $repo/.gpu/wheels: run \`make gpu-check\` before the call and carry .gpu" >"$OUT/prepare.log"
  wheels_rc=3
fi
# The repository root is the package `traindeck`: a link named traindeck, alone in a folder, puts it on the path
# whatever the copy's folder is called.
mkdir -p "$work/pkgroot" && ln -sfn "$repo" "$work/pkgroot/traindeck"
export PYTHONPATH="$work/pkgroot:$work/site${PYTHONPATH:+:$PYTHONPATH}"
# Runs, their store and DeepSpeed's JIT-built ops in the scratch folder: nothing of an earlier run counts.
export TRAINDECK_HOME="$work/home" TORCH_EXTENSIONS_DIR="$work/torch_extensions" PYTHONUNBUFFERED=1
unset DS_ACCELERATOR

left=$((budget - ($(date +%s) - started)))
[ "$left" -ge 60 ] || left=60
timeout -k 10 "$left" "$py" "$here/$driver" --out "$OUT" --work "$work" --deadline "$((started + budget - 10))" \
  --wheels-rc "$wheels_rc" --source "$repo/.gpu/source.txt" 2>&1 | tee "$OUT/console.log"
rc=${PIPESTATUS[0]}
if [ ! -s "$report" ]; then
  # The driver ended before its first write (it writes the whole table at once, every row "not reached").
  {
    echo "# traindeck GPU acceptance, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "| check | result | figures |"
    echo "| --- | --- | --- |"
    echo "| the check's driver (tests/gpu/$driver) | FAIL | it ended with exit $rc before writing its table:" \
      "$(tail -n 3 "$OUT/console.log" 2>/dev/null | tr '\n|' '  ') |"
  } >"$report"
  rc=1
fi
echo
cat "$report"
exit "$rc"
