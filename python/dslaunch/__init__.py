"""dslaunch for Python training scripts: heartbeats, preemption, committed
checkpoints and the rendezvous store, as dsrank has them.

Pure Python over Debian's python3-grpcio; importable with no build step
(PYTHONPATH=<dslaunch>/python). In a program dslaunch did not start, every
call is a no-op (preempt_requested() is False, resume_tag() is None).

    import dslaunch
    tag = dslaunch.resume_tag()          # the checkpoint to resume from after a restart
    for step in range(first, steps + 1):
        train_one_step()
        dslaunch.heartbeat(step)         # progress for --hang_timeout_ms, liveness for --heartbeat_timeout_ms
        if step % interval == 0 or dslaunch.preempt_requested():
            save(f"global_step{step}")   # every rank
            dslaunch.checkpoint_committed(f"global_step{step}")   # rank 0, once every rank saved
        if dslaunch.preempt_requested():
            break

What each call does (Note [Python client] in docs/control-plane.md):
  heartbeat(step)         records the step; the first call starts a daemon
                          thread that reports it to the rank's agent every
                          DSLAUNCH_HEARTBEAT_MS, so a frozen process is named
                          and a rank whose step stops advancing is diagnosed.
  preempt_requested()     whether the controller asked the job to save and
                          stop (control/preempt in the store).
  checkpoint_committed(t) tells the controller that checkpoint t is complete
                          on every rank; a restart resumes from the last one.
  resume_tag()            that tag in a restarted attempt (DSLAUNCH_RESUME_TAG).
  store()                 the job attempt's rendezvous store (set, get, add,
                          wait, compare_set, delete).
"""
import os
import threading

from . import _contract
from .heartbeat import HeartbeatThread
from .store import Store, StoreError

__all__ = ["launched", "rank", "world_size", "local_rank", "heartbeat", "heartbeats_accepted", "wait_for_heartbeat",
           "preempt_requested",
           "checkpoint_committed", "resume_tag", "store", "Store", "StoreError"]

_lock = threading.Lock()
_heartbeats = None
_store = None


def launched():
    """Whether dslaunch started this process (its contract is in the environment)."""
    return bool(os.environ.get(_contract.JOB_ID)) and bool(os.environ.get(_contract.STORE_ADDR))


def rank():
    return int(os.environ.get(_contract.RANK, "0"))


def world_size():
    return int(os.environ.get(_contract.WORLD_SIZE, "1"))


def local_rank():
    return int(os.environ.get(_contract.LOCAL_RANK, "0"))


def _attempt():
    return int(os.environ.get(_contract.ATTEMPT, "0"))


def store():
    """The rendezvous store of this job attempt, or None outside dslaunch."""
    global _store
    with _lock:
        if _store is None and launched():
            _store = Store(os.environ[_contract.STORE_ADDR], os.environ.get(_contract.STORE_TOKEN, ""),
                           os.environ[_contract.JOB_ID], _attempt())
        return _store


def heartbeat(step, loss=None, total_steps=None, tokens_per_second=None, samples_per_second=None,
              learning_rate=None):
    """Records this rank's step (call it after every step), with what `dslaunch status` and the
    controller's /metrics show of the run when given: the step's loss, the run's last step (for the
    percentage and the ETA), throughput and learning rate."""
    global _heartbeats
    agent = os.environ.get(_contract.AGENT_ADDR)
    token = os.environ.get(_contract.RANK_TOKEN)
    if agent and token and launched():
        with _lock:
            if _heartbeats is None:
                _heartbeats = HeartbeatThread(agent, os.environ[_contract.JOB_ID], _attempt(), rank(), token,
                                              int(os.environ.get(_contract.HEARTBEAT_MS, "1000")))
        figures = {"loss": loss, "total_steps": total_steps, "tokens_per_second": tokens_per_second,
                   "samples_per_second": samples_per_second, "learning_rate": learning_rate}
        _heartbeats.report(step, figures if any(v is not None for v in figures.values()) else None)
    elif rank() == 0 and store() is not None:
        # No agent to beat to: rank 0 publishes progress in the store, as dsrank does.
        store().set(_contract.PROGRESS_STEP_KEY, "step %d" % int(step))


def heartbeats_accepted():
    """How many heartbeats the agent accepted so far (0 before the first heartbeat() or outside dslaunch)."""
    return _heartbeats.accepted if _heartbeats is not None else 0


def wait_for_heartbeat(timeout_s):
    """Whether the agent accepted a heartbeat within timeout_s. Detection of a
    frozen process (--heartbeat_timeout_ms) and of a stalled step
    (--hang_timeout_ms) is armed by the first accepted report."""
    return _heartbeats is not None and _heartbeats.first_accepted.wait(timeout_s)


def preempt_requested():
    """True once the controller asked the job to checkpoint and stop."""
    s = store()
    return s is not None and s.get(_contract.PREEMPT_KEY) is not None


def checkpoint_committed(tag):
    """Rank 0: checkpoint `tag` is complete on every rank (call after they all saved)."""
    s = store()
    if s is not None and rank() == 0:
        s.set(_contract.CHECKPOINT_COMMITTED_KEY, tag)


def resume_tag():
    """The last committed checkpoint's tag in a restarted attempt, else None."""
    return os.environ.get(_contract.RESUME_TAG) or None
