#!/usr/bin/env bash
# The Debian package: `cpack -G DEB` from the build folder, then
#   - its control data: name, version (= `--version`), dependencies that
#     dpkg-shlibdeps found, and that apt can resolve on this Debian;
#   - its files: every program in /usr/bin, the configs, the systemd unit
#     naming /usr/bin/dsagent, the Python client, completion, the manifests;
#   - a smoke test of the unpacked tree: every program's --version, a
#     two-rank job started by the packaged dslaunch through the packaged
#     dsagent and keeper, `dslaunch --validate` of a packaged config, the Python
#     client imported, bash completion answering from the packaged binary;
#   - under CI (CI=true, as root): the package installed with apt-get on this
#     machine, the smoke job run from /usr/bin, and the package removed.
#
# Usage: test_deb_package.sh BUILD_DIR WORK_DIR
set -euo pipefail
build_dir=$1 work=$2

fail() {
  echo "test_deb_package: $*" >&2
  exit 1
}

rm -rf "$work"
mkdir -p "$work"
(cd "$build_dir" && cpack -G DEB -B "$work/out") >"$work/cpack.log" 2>&1 ||
  { tail -30 "$work/cpack.log" >&2; fail "cpack -G DEB failed (log above)"; }
debs=("$work"/out/dslaunch_*.deb)
[[ -f ${debs[0]} ]] || fail "cpack made no dslaunch_*.deb: $(ls "$work/out")"
deb=${debs[0]}
echo "package: $(basename "$deb"), $(du -h "$deb" | cut -f1)"

# Control data.
control=$(dpkg-deb --field "$deb")
echo "$control" | grep -E '^(Package|Version|Architecture|Depends):'
[[ $(dpkg-deb --field "$deb" Package) == dslaunch ]] || fail "package name is not dslaunch"
version=$(dpkg-deb --field "$deb" Version)
depends=$(dpkg-deb --field "$deb" Depends)
for library in libgrpc++ libprotobuf libprometheus-cpp-pull libtorch elfutils; do
  grep -q "$library" <<<"$depends" || fail "Depends lacks $library: $depends"
done
# Resolvable here: apt plans the install without fetching or changing anything.
apt-get install --simulate --no-install-recommends "$deb" >"$work/apt-simulate.log" 2>&1 ||
  { cat "$work/apt-simulate.log" >&2; fail "apt cannot resolve the package's dependencies"; }

# Files.
dpkg-deb --contents "$deb" | awk '{print $NF}' | sed 's|^\./|/|' >"$work/files"
programs=(dslaunch dsagent dsagent_keeper dsrank dsprep dstokenize dsgen dsserve dsconsolidate dscomm_bench)
for program in "${programs[@]}"; do
  grep -qx "/usr/bin/$program" "$work/files" || fail "/usr/bin/$program is not in the package"
done
for file in /usr/share/dslaunch/configs/gpt-tiny.cfg /usr/lib/systemd/system/dsagent.service \
  /usr/lib/python3/dist-packages/dslaunch/__init__.py /usr/share/bash-completion/completions/dslaunch \
  /usr/share/bash-completion/completions/dsrank /usr/share/dslaunch/deploy/kubernetes/20-dsagent.yaml \
  /usr/include/dslaunch/runtime.h /usr/lib/cmake/dslaunch/dslaunchConfig.cmake /usr/share/doc/dslaunch/README.md; do
  grep -qx "$file" "$work/files" || fail "$file is not in the package"
done

# The unpacked tree.
root=$work/root
dpkg-deb -x "$deb" "$root"
grep -qx 'ExecStart=/usr/bin/dsagent --listen ${DSAGENT_LISTEN} --token_file ${DSAGENT_TOKEN}' \
  "$root/usr/lib/systemd/system/dsagent.service" || fail "the unit does not start /usr/bin/dsagent"
for program in "${programs[@]}"; do
  [[ $program == dsagent_keeper ]] && continue  # started by dsagent only
  line=$("$root/usr/bin/$program" --version 2>&1) || fail "$program --version failed: $line"
  [[ $line == "$program $version "* ]] || fail "$program --version says '$line', the package is $version"
done

smoke_job() {  # BIN_DIR: two ranks through that folder's dslaunch, dsagent and keeper
  local out
  out=$("$1/dslaunch" --num_gpus 2 --no_prefix --no_local_rank -- /bin/sh -c 'echo "rank $RANK of $WORLD_SIZE"' 2>&1) ||
    fail "the job of $1/dslaunch failed: $out"
  grep -qx "rank 0 of 2" <<<"$out" && grep -qx "rank 1 of 2" <<<"$out" ||
    fail "the job of $1/dslaunch did not run both ranks: $out"
}
smoke_job "$root/usr/bin"
validated=$("$root/usr/bin/dslaunch" --validate "$root/usr/share/dslaunch/configs/gpt-tiny.cfg" 2>&1) ||
  fail "dslaunch --validate of the packaged gpt-tiny.cfg failed: $validated"
PYTHONPATH=$root/usr/lib/python3/dist-packages /usr/bin/python3 -c \
  'import dslaunch, sys; assert dslaunch.__file__.startswith(sys.argv[1]), dslaunch.__file__' "$root" ||
  fail "the packaged Python client does not import"
completed=$(PATH=$root/usr/bin:$PATH bash -c '
  source "$1/usr/share/bash-completion/completions/dslaunch"
  COMP_WORDS=(dslaunch --host); COMP_CWORD=1; _dslaunch_complete; echo "${COMPREPLY[*]}"
  COMP_WORDS=(dslaunch status --wat); COMP_CWORD=2; _dslaunch_complete; echo "${COMPREPLY[*]}"
  COMP_WORDS=(dsagent --metrics); COMP_CWORD=1; _dslaunch_complete; echo "${COMPREPLY[*]}"' _ "$root")
[[ $completed == $'--hostfile\n--watch\n--metrics_addr' ]] || fail "completion answered: $completed"
echo "the unpacked package runs: --version of every tool, a 2-rank job, dslaunch --validate of a packaged config, the Python client, completion"

if [[ ${CI:-} == true && $(id -u) -eq 0 ]]; then
  if dpkg-query -W dslaunch >/dev/null 2>&1; then fail "dslaunch is already installed here; not touching it"; fi
  trap 'dpkg --purge dslaunch >/dev/null 2>&1 || true' EXIT
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$deb" >"$work/apt-install.log" 2>&1 ||
    { cat "$work/apt-install.log" >&2; fail "apt-get install of the package failed"; }
  [[ $(/usr/bin/dslaunch --version) == "dslaunch $version "* ]] || fail "/usr/bin/dslaunch --version is wrong"
  smoke_job /usr/bin
  dpkg --purge dslaunch >/dev/null
  [[ ! -e /usr/bin/dslaunch ]] || fail "/usr/bin/dslaunch is left after dpkg --purge"
  echo "installed with apt-get, ran a job from /usr/bin, purged"
fi
echo "test_deb_package: $(basename "$deb") passed"
