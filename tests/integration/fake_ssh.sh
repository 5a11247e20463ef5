#!/usr/bin/env bash
# Stands in for ssh in the multi-host test: "fake_ssh.sh HOST COMMAND..."
# runs COMMAND inside the network namespace that plays HOST, as ssh would run
# it on that host. FAKE_SSH_HOSTS maps addresses to namespaces: "ip=ns,ip=ns".
set -euo pipefail
host=$1
shift
for pair in ${FAKE_SSH_HOSTS//,/ }; do
  if [[ ${pair%%=*} == "$host" ]]; then
    exec ip netns exec "${pair#*=}" "$@"
  fi
done
echo "fake_ssh: unknown host $host" >&2
exit 255
