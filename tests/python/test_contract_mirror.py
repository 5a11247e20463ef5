#!/usr/bin/env python3
"""python/dslaunch/_contract.py mirrors the C++ definitions of the rank
contract; this fails when the two drift apart: an environment variable or
store key that rank_contract.h does not define, a field number or RPC that
proto/*.proto does not have, the token's metadata key, the minimum
heartbeat interval.

  test_contract_mirror.py REPO_ROOT
"""
import os
import re
import sys

root = sys.argv[1]
sys.path.insert(0, os.path.join(root, "python"))
from dslaunch import _contract as c  # noqa: E402

failures = []


def read(*parts):
    with open(os.path.join(root, *parts)) as f:
        return f.read()


def constants(text):
    return dict(re.findall(r'inline constexpr char (k\w+)\[\] = "([^"]*)";', text))


contract = constants(read("common", "rank_contract.h"))
expected = {
    "RANK": "kRank", "WORLD_SIZE": "kWorldSize", "LOCAL_RANK": "kLocalRank", "JOB_ID": "kJobId",
    "ATTEMPT": "kAttempt", "STORE_ADDR": "kStoreAddr", "STORE_TOKEN": "kStoreToken", "AGENT_ADDR": "kAgentAddr",
    "RANK_TOKEN": "kRankToken", "HEARTBEAT_MS": "kHeartbeatMs", "RESUME_TAG": "kResumeTag", "TLS_DIR": "kTlsDir",
    "PREEMPT_KEY": "kPreempt", "PROGRESS_STEP_KEY": "kProgressStep",
    "CHECKPOINT_COMMITTED_KEY": "kCheckpointCommitted",
}
for python_name, cpp_name in expected.items():
    if contract.get(cpp_name) != getattr(c, python_name):
        failures.append("%s = %r, rank_contract.h's %s = %r" % (python_name, getattr(c, python_name), cpp_name,
                                                                contract.get(cpp_name)))

auth = constants(read("common", "auth_token.h"))
if auth.get("kTokenMetadataKey") != c.TOKEN_METADATA_KEY:
    failures.append("TOKEN_METADATA_KEY = %r, auth_token.h says %r" % (c.TOKEN_METADATA_KEY, auth.get("kTokenMetadataKey")))

from dslaunch import _channel  # noqa: E402
tls = constants(read("common", "tls_files.h"))
if (tls.get("kTlsCaFile"), tls.get("kTlsCertFile"), tls.get("kTlsKeyFile")) != _channel.TLS_FILES:
    failures.append("_channel.TLS_FILES = %r, tls_files.h says %r" %
                    (_channel.TLS_FILES, (tls.get("kTlsCaFile"), tls.get("kTlsCertFile"), tls.get("kTlsKeyFile"))))

interval = re.search(r"kMinimumIntervalMs = (\d+);", read("common", "heartbeat_sender.h"))
if not interval or int(interval.group(1)) != c.MINIMUM_HEARTBEAT_MS:
    failures.append("MINIMUM_HEARTBEAT_MS = %d, heartbeat_sender.h says %s" %
                    (c.MINIMUM_HEARTBEAT_MS, interval.group(1) if interval else "nothing"))

messages, methods = {}, set()
for name in ("agent.proto", "controller.proto", "store.proto"):
    text = re.sub(r"//[^\n]*", "", read("proto", name))
    package = re.search(r"package ([\w.]+);", text).group(1)
    for message, body in re.findall(r"message (\w+) \{([^{}]*)\}", text):
        messages[message] = {field: int(number) for field, number in re.findall(r"(\w+) = (\d+);", body)}
    for service, body in re.findall(r"service (\w+) \{(.*?)\n\}", text, re.S):
        for method in re.findall(r"rpc (\w+)\(", body):
            methods.add("/%s.%s/%s" % (package, service, method))

for message, fields in c.FIELDS.items():
    if message not in messages:
        failures.append("message %s is not in proto/" % message)
        continue
    for field, number in fields.items():
        if messages[message].get(field) != number:
            failures.append("%s.%s = %d, proto/ says %s" % (message, field, number, messages[message].get(field)))

for name in dir(c):
    value = getattr(c, name)
    if isinstance(value, str) and value.startswith("/dslaunch.") and value not in methods:
        failures.append("%s = %r is not an RPC of proto/" % (name, value))

if failures:
    print("python/dslaunch/_contract.py differs from the C++ contract:")
    for f in failures:
        print("  " + f)
    sys.exit(1)
print("python/dslaunch/_contract.py matches rank_contract.h, auth_token.h, heartbeat_sender.h and proto/ "
      "(%d fields, %d methods)" % (sum(len(f) for f in c.FIELDS.values()), len(methods)))
