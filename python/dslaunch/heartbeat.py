"""A rank's heartbeats to its agent (as common/heartbeat_sender.h).

A daemon thread reports the rank's latest step every DSLAUNCH_HEARTBEAT_MS.
It keeps beating while the main thread waits (in a collective, say), so a
missed heartbeat means the whole process is frozen or stopped; a step that
stops advancing while heartbeats go on is what --hang_timeout_ms catches.
"""
import threading

import grpc

from . import _contract as c
from . import _wire
from ._channel import open_channel


class HeartbeatThread:
    def __init__(self, agent_address, job_id, attempt, rank, rank_token, interval_ms):
        f = c.FIELDS["HeartbeatRequest"]
        self._identity = [(f["job_id"], job_id), (f["attempt"], int(attempt)), (f["global_rank"], int(rank)),
                          (f["rank_token"], rank_token)]
        self._step_field = f["step"]
        self._metrics_field = f["metrics"]
        self._metrics = b""
        self._interval_s = max(c.MINIMUM_HEARTBEAT_MS, int(interval_ms)) / 1000.0
        self._channel = open_channel(agent_address)
        self._send = self._channel.unary_unary(c.AGENT_HEARTBEAT, request_serializer=lambda b: b,
                                               response_deserializer=lambda b: b)
        self._step = -1
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self.accepted = 0
        self.first_accepted = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dslaunch-heartbeat", daemon=True)
        self._thread.start()

    def report(self, step, metrics=None):
        """metrics: {RankMetrics field: value} for `dslaunch status` and /metrics (None: keep the last)."""
        m = c.FIELDS["RankMetrics"]
        encoded = None
        if metrics is not None:
            encoded = _wire.encode([(m[name], int(value) if name == "total_steps" else float(value))
                                    for name, value in metrics.items() if value is not None])
        with self._lock:
            first = self._step < 0
            self._step = int(step)
            if encoded is not None:
                self._metrics = encoded
        if first:
            self._wake.set()  # the first step goes out now: the controller times recovery from it

    def stop(self):
        self._stopping = True
        self._wake.set()
        self._thread.join()
        self._channel.close()

    def _loop(self):
        while not self._stopping:
            with self._lock:
                step, metrics = self._step, self._metrics
            request = _wire.encode(self._identity + [(self._step_field, step), (self._metrics_field, metrics)])
            try:
                self._send(request, timeout=max(self._interval_s, 0.5))
                self.accepted += 1
                self.first_accepted.set()
            except grpc.RpcError:
                pass  # a failed beat is not the rank's error: the agent judges silence
            self._wake.wait(self._interval_s)
            self._wake.clear()
