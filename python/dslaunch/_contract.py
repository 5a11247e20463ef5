"""The rank contract, as common/rank_contract.h and proto/*.proto define it.

Mirrored here so that the package needs no build step; tests/python/
test_contract_mirror.py fails when a name or field number here drifts from
the C++ definitions.
"""

# Environment variables (common/rank_contract.h, namespace rank_env).
RANK = "RANK"
WORLD_SIZE = "WORLD_SIZE"
LOCAL_RANK = "LOCAL_RANK"
JOB_ID = "DSLAUNCH_JOB_ID"
ATTEMPT = "DSLAUNCH_ATTEMPT"
STORE_ADDR = "DSLAUNCH_STORE_ADDR"
STORE_TOKEN = "DSLAUNCH_STORE_TOKEN"
AGENT_ADDR = "DSLAUNCH_AGENT_ADDR"
RANK_TOKEN = "DSLAUNCH_RANK_TOKEN"
HEARTBEAT_MS = "DSLAUNCH_HEARTBEAT_MS"
RESUME_TAG = "DSLAUNCH_RESUME_TAG"
TLS_DIR = "DSLAUNCH_TLS_DIR"

# Store keys (common/rank_contract.h, namespace store_keys).
PREEMPT_KEY = "control/preempt"
PROGRESS_STEP_KEY = "progress/step"
CHECKPOINT_COMMITTED_KEY = "checkpoint/committed"

# The token's gRPC metadata key (common/auth_token.h, kTokenMetadataKey).
TOKEN_METADATA_KEY = "x-dslaunch-token"

# Heartbeats are sent at least this far apart (HeartbeatSender::kMinimumIntervalMs).
MINIMUM_HEARTBEAT_MS = 50

# RPC methods: /<package>.<service>/<method>.
AGENT_HEARTBEAT = "/dslaunch.Agent/Heartbeat"
STORE_SET = "/dslaunch.Store/Set"
STORE_GET = "/dslaunch.Store/Get"
STORE_WAIT = "/dslaunch.Store/Wait"
STORE_ADD = "/dslaunch.Store/Add"
STORE_COMPARE_SET = "/dslaunch.Store/CompareSet"
STORE_DELETE = "/dslaunch.Store/Delete"

# Field numbers: {message: {field: number}} (proto/agent.proto, proto/store.proto);
# tests/python/test_contract_mirror.py checks them against proto/.
FIELDS = {
    "HeartbeatRequest": {"job_id": 1, "attempt": 2, "global_rank": 3, "rank_token": 4, "step": 5, "metrics": 7},
    "RankMetrics": {"total_steps": 1, "loss": 2, "tokens_per_second": 3, "samples_per_second": 4,
                    "learning_rate": 5, "gpu_memory_bytes": 6},
    "StoreScope": {"job_id": 1, "attempt": 2},
    "StoreSetRequest": {"scope": 1, "key": 2, "value": 3},
    "StoreGetRequest": {"scope": 1, "key": 2},
    "StoreGetReply": {"found": 1, "value": 2},
    "StoreWaitRequest": {"scope": 1, "keys": 2, "timeout_ms": 3},
    "StoreAddRequest": {"scope": 1, "key": 2, "delta": 3},
    "StoreAddReply": {"value": 1},
    "StoreCompareSetRequest": {"scope": 1, "key": 2, "expected": 3, "expect_absent": 4, "desired": 5},
    "StoreCompareSetReply": {"swapped": 1, "value": 2},
    "StoreDeleteRequest": {"scope": 1, "key": 2},
    "StoreDeleteReply": {"deleted": 1},
}
