#!/usr/bin/env bash
# Stands in for srun in the SLURM test: "fake_srun.sh [SRUN OPTIONS] COMMAND..."
# runs COMMAND inside the network namespace that plays the host named by
# --nodelist=HOST, as srun would run a one-task step there. FAKE_SSH_HOSTS
# maps addresses to namespaces ("ip=ns,ip=ns"); each call's options are
# appended to $FAKE_SRUN_LOG, one line per step.
set -euo pipefail
options=() host=
while (($#)) && [[ $1 == -* ]]; do
  options+=("$1")
  [[ $1 == --nodelist=* ]] && host=${1#--nodelist=}
  shift
done
[[ -n $host ]] || { echo "fake_srun: no --nodelist" >&2; exit 1; }
echo "${options[*]}" >>"${FAKE_SRUN_LOG:-/dev/null}"
for pair in ${FAKE_SSH_HOSTS//,/ }; do
  if [[ ${pair%%=*} == "$host" ]]; then
    exec ip netns exec "${pair#*=}" "$@"
  fi
done
echo "fake_srun: unknown host $host" >&2
exit 1
