#!/usr/bin/env bash
# Installs every Debian bookworm package that the dslaunch build and tests need.
# Idempotent: packages already present are left alone; safe to run on every CI run.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libyaml-cpp-dev libboost-dev libboost-filesystem-dev
  libgtest-dev libgmock-dev googletest
  iproute2 procps elfutils curl
  libtorch-dev libgloo-dev libsentencepiece-dev sentencepiece fortunes libxxhash-dev
  liburing-dev  # io_uring for NVMe offload (runtime/offload/)
  python3-torch  # reference implementations for the model tests (tests/hf/), the Python client's test
  python3-grpcio  # python/dslaunch, the Python client (heartbeats, preemption, the store)
  gnuplot-nox  # dslaunch plot (launcher/plot_command.h)
  prometheus-cpp-dev  # the controller's and agents' /metrics (common/prometheus_endpoint.h)
  python3-kubernetes  # the Kubernetes API's types, to check deploy/kubernetes (tests/deploy/)
  openssh-server  # a real sshd for the ssh launcher's test in network namespaces
  clang libclang-rt-14-dev  # libFuzzer and the sanitizers for the fuzz targets (scripts/fuzz.sh, tests/fuzz/)
  libssl-dev openssl  # dslaunch certs (common/tls_certificates.h); openssl verifies its files (tests/integration/test_tls.sh)
  python3-prometheus-client  # an independent reader of the controller's /metrics (tests/integration/test_status.sh)
  libpcre2-dev  # Unicode regular expressions of tokenizer.json pre-tokenizers (runtime/tokenizer/)
  libcpp-httplib-dev  # dsserve's HTTP server (runtime/serve/openai_server.h)
  python3-jinja2  # the reference renderer of chat templates (tests/serve/chat_templates.py)
  nodejs  # the npm reference tokenizers (tests/tokenizer/)
)
# npm: Debian's package, unless the nodejs present already brings its own
# (NodeSource's nodejs carries npm and conflicts with Debian's npm package).
if ! command -v npm >/dev/null; then packages+=(npm); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# The npm reference tokenizers (pinned, into a git-ignored folder).
"$(dirname "$0")/setup-tokenizer-reference.sh"
