#!/usr/bin/env bash
# NVMe offload's swap path against fio (Debian's fio package), same run, same
# folder, same block size and queue depth, O_DIRECT both (issue 19's goal:
# the swap path's sequential write and read at >= 80% of fio's).
#   bash scripts/nvme-bench.sh DIR [GIB] [BLOCK_BYTES] [QUEUE_DEPTH]
# DIR must be on the drive to measure (not tmpfs). Prints one table.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:?usage: nvme-bench.sh DIR [GIB] [BLOCK_BYTES] [QUEUE_DEPTH]}
gib=${2:-2}
block=${3:-1048576}
depth=${4:-8}
bench=${SWAP_BENCH:-${BUILD_DIR:-$root/build}/bin/swap_bench}
command -v fio >/dev/null || { echo "nvme-bench: fio is not installed (apt-get install fio)" >&2; exit 2; }
[[ -x $bench ]] || { echo "nvme-bench: $bench not built (scripts/build.sh swap_bench)" >&2; exit 2; }
file="$dir/nvme-bench-fio.$$"
trap 'rm -f "$file"' EXIT

fio_gbps() {  # RW ENGINE: fio's bandwidth in GB/s
  fio --name=swap --filename="$file" --rw="$1" --bs="$block" --iodepth="$depth" --direct=1 --ioengine="$2" \
    --size="${gib}G" --numjobs=1 --output-format=terse --terse-version=3 |
    awk -F';' -v rw="$1" '{ kb = (rw == "write") ? $48 : $7; printf "%.3f", kb * 1024 / 1e9 }'
}

printf '%-28s %10s %10s\n' "path ($gib GiB, $block B x $depth)" "write GB/s" "read GB/s"
fw=$(fio_gbps write io_uring)
fr=$(fio_gbps read io_uring)
printf '%-28s %10s %10s\n' "fio io_uring" "$fw" "$fr"
for mode in io_uring posix; do
  line=$("$bench" --dir "$dir" --gib "$gib" --block_size "$block" --queue_depth "$depth" $([[ $mode == posix ]] && echo --posix))
  w=$(sed -E 's/.*write_gbps=([0-9.]+).*/\1/' <<<"$line")
  r=$(sed -E 's/.*read_gbps=([0-9.]+).*/\1/' <<<"$line")
  printf '%-28s %10s %10s   (against fio: write %.0f%%, read %.0f%%)\n' "swap path, $mode" "$w" "$r" \
    "$(awk -v a="$w" -v b="$fw" 'BEGIN { print 100 * a / b }')" "$(awk -v a="$r" -v b="$fr" 'BEGIN { print 100 * a / b }')"
done
