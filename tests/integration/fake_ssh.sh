#!/usr/bin/env bash
# Stands in for ssh in the multi-host test: "fake_ssh.sh HOST COMMAND..."
# runs COMMAND inside the network namespace that plays HOST, as ssh would run
# it on that host, with SSH_CONNECTION naming HOST as the address the
# connection came in at. FAKE_SSH_HOSTS maps addresses to namespaces:
# "ip=ns,ip=ns".
set -euo pipefail
host=$1
shift
for pair in ${FAKE_SSH_HOSTS//,/ }; do
  if [[ ${pair%%=*} == "$host" ]]; then
    SSH_CONNECTION="127.0.0.1 22222 $host 22" exec ip netns exec "${pair#*=}" "$@"
  fi
done
echo "fake_ssh: unknown host $host" >&2
exit 255
