"""The controller's rendezvous store, seen from a rank (as common/store_client.h).

Every key lives in the namespace of this job attempt (DSLAUNCH_JOB_ID,
DSLAUNCH_ATTEMPT); calls carry DSLAUNCH_STORE_TOKEN.
"""
import grpc

from . import _contract as c
from . import _wire
from ._channel import open_channel


class StoreError(RuntimeError):
    """A store call failed; the message names the call, key and gRPC status."""


def _identity(payload):
    return payload


class Store:
    def __init__(self, address, token, job_id, attempt, timeout_s=30.0):
        self._channel = open_channel(address)
        self._metadata = ((c.TOKEN_METADATA_KEY, token),) if token else ()
        self._scope = _wire.encode([(c.FIELDS["StoreScope"]["job_id"], job_id),
                                    (c.FIELDS["StoreScope"]["attempt"], int(attempt))])
        self._timeout_s = timeout_s
        self.address = address

    def close(self):
        self._channel.close()

    def _call(self, method, request, what, timeout_s=None):
        stub = self._channel.unary_unary(method, request_serializer=_identity, response_deserializer=_identity)
        try:
            reply = stub(request, timeout=timeout_s or self._timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            raise StoreError("store %s at %s: %s: %s" % (what, self.address, e.code().name, e.details())) from None
        return _wire.decode(reply)

    def set(self, key, value):
        f = c.FIELDS["StoreSetRequest"]
        self._call(c.STORE_SET, _wire.encode([(f["scope"], self._scope), (f["key"], key), (f["value"], _bytes(value))]),
                   "set %s" % key)

    def get(self, key):
        """The value (bytes), or None when the key is not set."""
        f = c.FIELDS["StoreGetRequest"]
        r = c.FIELDS["StoreGetReply"]
        reply = self._call(c.STORE_GET, _wire.encode([(f["scope"], self._scope), (f["key"], key)]), "get %s" % key)
        if not _wire.first(reply, r["found"], 0):
            return None
        return _wire.first(reply, r["value"], b"")

    def add(self, key, delta):
        f = c.FIELDS["StoreAddRequest"]
        reply = self._call(c.STORE_ADD,
                           _wire.encode([(f["scope"], self._scope), (f["key"], key), (f["delta"], int(delta))]),
                           "add %s" % key)
        return _wire.first(reply, c.FIELDS["StoreAddReply"]["value"], 0)

    def wait(self, keys, timeout_s):
        """Returns once every key is set; StoreError (DEADLINE_EXCEEDED) after timeout_s."""
        f = c.FIELDS["StoreWaitRequest"]
        fields = [(f["scope"], self._scope)] + [(f["keys"], k) for k in keys] + [(f["timeout_ms"], int(timeout_s * 1000))]
        self._call(c.STORE_WAIT, _wire.encode(fields), "wait %s" % ",".join(keys), timeout_s=timeout_s + 5)

    def compare_set(self, key, expected, desired, expect_absent=False):
        """(swapped, current value)."""
        f = c.FIELDS["StoreCompareSetRequest"]
        r = c.FIELDS["StoreCompareSetReply"]
        reply = self._call(c.STORE_COMPARE_SET, _wire.encode([
            (f["scope"], self._scope), (f["key"], key), (f["expected"], _bytes(expected)),
            (f["expect_absent"], bool(expect_absent)), (f["desired"], _bytes(desired))]), "compare_set %s" % key)
        return bool(_wire.first(reply, r["swapped"], 0)), _wire.first(reply, r["value"], b"")

    def delete(self, key):
        f = c.FIELDS["StoreDeleteRequest"]
        reply = self._call(c.STORE_DELETE, _wire.encode([(f["scope"], self._scope), (f["key"], key)]),
                           "delete %s" % key)
        return bool(_wire.first(reply, c.FIELDS["StoreDeleteReply"]["deleted"], 0))


def _bytes(value):
    if value is None:
        return b""
    return value.encode() if isinstance(value, str) else bytes(value)
