# Sourced by the GPU benchmark scripts: builds dsrank, dslaunch, dsagent and
# the runtime tests for this host (scripts/gpu-build.sh) and sets root, out (the
# results folder: $OUT or gpu-out/), bin and data. Leaves the host's NVLink
# multicast off (the device notes say why).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# GPU_TARGETS: build only these (a run that needs fewer targets).
targets=${GPU_TARGETS:-dsrank dslaunch dsagent comm_tests model_tests zero_tests engine_tests checkpoint_tests cuda_kernel_bench}
# shellcheck disable=SC2086
bash "$root/scripts/gpu-build.sh" "$root/.gpu-deps" $targets >"$out/build.log" 2>&1 ||
  { tail -n 30 "$out/build.log"; exit 1; }
export LD_LIBRARY_PATH=/opt/dslaunch-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
bin="$root/build-gpu/bin"
data=${GPU_DATA:-$root/.gpu-data}
# card_hbm_tb_per_s: the card's memory bandwidth (TB/s) for a roofline:
# HBM_TB_PER_S, else the datasheet figure of the card nvidia-smi names; an
# unknown card is an error (for the scripts that print a roofline only).
card_hbm_tb_per_s() {
  if [[ -n "${HBM_TB_PER_S:-}" ]]; then echo "$HBM_TB_PER_S"; return; fi
  local name
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1) || true
  case "$name" in
    *H200*) echo 4.8 ;;
    *H100*PCIe*) echo 2.0 ;;
    *H100*NVL*) echo 3.9 ;;
    *H100*) echo 3.35 ;;
    *) echo "no memory bandwidth known for the card '$name': set HBM_TB_PER_S" >&2; return 1 ;;
  esac
}
