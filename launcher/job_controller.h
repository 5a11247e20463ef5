// The controller's job state machine: starts every rank of an attempt through
// the agents, watches them, fails the whole job fast, restarts up to
// --max_restarts times, and reports the root cause.
//
//                 (1)            (2)             (3) a rank failed, a host was
//   PLANNING ──────────▶ STARTING ──────▶ RUNNING ─── lost, or a stop signal ──▶ STOPPING
//                          ▲   │ (4) could not start                               │
//                          │   └──────────────────────────────────────────────────▶│
//                          │ (6) backoff over: new attempt                          │ (5) every rank gone,
//                      RESTARTING ◀──── RestartPolicy says restart ─────────────────┤     restart
//                          │                                                        │ (8) every rank gone,
//                          │ (9) stop signal during the backoff → CANCELLED         ▼     no restart
//                          └────────────────────────────────────────▶ FAILED | CANCELLED
//   RUNNING ── (7) every rank exited 0 ──▶ SUCCEEDED
//   PLANNING ── (0) an agent's event stream cannot be opened ──▶ FAILED
//
// SetState() is the one function that changes the state; it refuses any edge
// not drawn here. Events arrive on one queue (rank events from every agent's
// stream, lost agents, returning hosts, signals) and one loop
// (launcher/controller_event_loop.h), on the thread that calls Run(), hands
// each to the method named for it on the phase of the job under way: an
// attempt (AttemptState, launcher/attempt_state.h, which draws the attempt's
// own phases: running, checkpointing, stopping) or the backoff before a
// restart (RestartBackoff).
//
// Fail-fast (Note [Fail-fast]): the first rank that ends badly makes the
// controller send StopJob to every agent at once (SIGTERM, then SIGKILL after
// --stop_grace_ms). Nothing waits on a collective timeout: a rank's exit is
// seen by its agent through a pidfd and reaches the controller over an open
// stream, so the other ranks are signalled within milliseconds.
//
// Note [Honest exits]: a job reports success only when every rank exited 0
// by itself. A rank that its agent stopped while this controller was not
// stopping the attempt (an outside StopJob, the agent's lease to this
// controller, the agent's own shutdown) fails the attempt, and the cause says
// who stopped it and why, from the reason the agent reports in RankEnded
// (stop_reason, stop_detail: StopJob's caller and reason, the lease's
// silence). A FreezeWatch sees this process's own freezes (SIGSTOP, a
// suspended machine): the controller says so when it runs again (event
// `controller_frozen`), and a lease that expired or an event stream that
// broke meanwhile is blamed on the freeze (ATTEMPT_CONTROLLER_FROZEN), not on
// a host. docs/control-plane.md has the exit codes with their events.
//
// Restarts: RestartPolicy (Note [Restart policy]) decides after every failed
// attempt; the backoff is spent waiting on the event queue, so a stop signal
// ends it at once. Every state change, attempt, failing rank, signal, restart
// decision and recovery is appended to the JobEventLog (events.jsonl).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include "common/blocking_queue.h"
#include "common/control_plane_defaults.h"
#include "launcher/agent_client.h"
#include "launcher/attempt_report.h"
#include "launcher/controller_event_loop.h"
#include "launcher/freeze_watch.h"
#include "launcher/job_event_log.h"
#include "launcher/job_status_board.h"
#include "launcher/launch_plan.h"
#include "launcher/rank_output.h"
#include "launcher/restart_policy.h"
#include "launcher/stop_attribution.h"
#include "proto/job.pb.h"

namespace dslaunch {

struct JobSpec {
  std::string job_id;
  LaunchPlan plan;
  // The ranks' grid, for --dry_run's coordinates: a dsrank job's
  // tensor_parallel.tp_size and pipeline.stages (1 and 1 otherwise).
  int tensor_parallel_size = 1;
  int pipeline_stages = 1;
  // --dry_run: with pipeline.stages > 1, the layers of each (virtual) stage
  // as every rank will cut them (the lines dsrank prints at start), or one
  // line saying why they are not known before the ranks build the model.
  std::vector<std::string> pipeline_partition;
  std::vector<std::string> program;
  bool no_local_rank = false;
  std::string working_dir;
  // Everything but attempt and max_restarts (the controller fills those in);
  // master_port 0 means "ask rank 0's agent".
  RankEnvironmentInputs environment;
  int max_restarts = 0;
  // Elastic membership: after an attempt loses hosts, the next one runs on
  // the remaining hosts while at least this many remain (0: every planned
  // host is required, as without elasticity).
  int min_nodes = 0;
  // Preemption (Note [Preemption]): on SIGTERM or SIGUSR1 the controller
  // calls request_checkpoint(attempt) and gives the ranks this long to save a
  // checkpoint and exit by themselves before stopping them. 0 or no callback:
  // stop at once, as for SIGINT.
  std::chrono::milliseconds preempt_grace{0};
  std::function<void(int attempt)> request_checkpoint;
  // Hang detection: read_progress(attempt) returns the ranks' progress marker
  // (dsrank: rank 0's step), nullopt before the first one. Once it exists, it
  // must change within hang_timeout or the attempt fails as a hang. 0: off.
  // With rank heartbeats (Note [Rank heartbeats]) the marker is every rank's
  // step instead, and before failing the attempt the controller asks every
  // agent for a diagnosis: it names the lagging rank(s) in the cause and
  // writes each rank's stacks and recent collectives to
  // <diagnosis_dir>/attempt_<N>/diagnosis/rank_<R>.txt.
  std::chrono::milliseconds hang_timeout{0};
  std::function<std::optional<std::string>(int attempt)> read_progress;
  // A rank that sent heartbeats and then none for this long while its
  // process lives fails the attempt as a hang (the agents watch). 0: off.
  std::chrono::milliseconds heartbeat_timeout{0};
  std::string diagnosis_dir;
  // Note [Membership]: a host that was lost comes back into the plan (up to
  // the planned hosts) at the next restart once its agent answers again.
  // With rejoin_check > 0 the controller also tries lost agents that often
  // during an attempt and, when one answers, asks every rank to checkpoint
  // and stop (request_checkpoint, as for a preemption) to restart with it at
  // once (ATTEMPT_RESCALED; no restart budget used). Elastic jobs only.
  std::chrono::milliseconds rejoin_check{0};
  // A host blamed for this many failed attempts (its rank failed, or it was
  // lost) is kept out of the plan for blacklist_cooldown; elastic jobs only,
  // while at least min_nodes others remain. 0: off.
  int blacklist_after = 0;
  std::chrono::milliseconds blacklist_cooldown{kDefaultBlacklistCooldownMs};
  // Variables added to every rank's environment for one attempt (e.g.
  // DSLAUNCH_RESUME_TAG, Note [Committed checkpoints]); called before it starts.
  std::function<std::map<std::string, std::string>(int attempt)> attempt_environment;
  // Note [Store token per attempt] (rendezvous_store.h): the store token the
  // ranks of an attempt get; unset: environment.store_token in every attempt.
  std::function<std::string(int attempt)> store_token_for_attempt;
  // When set (one address per node of `plan`), MASTER_ADDR is rank 0's
  // node's address in every attempt; empty: environment.master_addr as given.
  std::vector<std::string> node_addresses;
  // Note [Core binding] (agent/core_binding.h): each agent binds every rank
  // of its host to cores of its own, from bind_core_list ("1,3-5,7") or the
  // agent's own cores.
  bool bind_cores_to_rank = false;
  std::string bind_core_list;
  // Note [Ranks as another user] (agent/run_as_user.h): the user the ranks
  // run as on every host; empty: each agent's own choice.
  std::string run_as;
  // Wait before attempt k: min(restart_backoff * 2^(k-1), max_restart_backoff).
  std::chrono::milliseconds restart_backoff{1000};
  std::chrono::milliseconds max_restart_backoff{kDefaultMaxRestartBackoffMs};
  std::chrono::milliseconds stop_grace{kDefaultStopGraceMs};
  std::chrono::milliseconds lease{kDefaultLeaseMs};
  std::chrono::milliseconds keepalive_interval{1000};
  // After StopJob, how long beyond the grace to wait for ranks to report
  // their end before treating them as lost.
  std::chrono::milliseconds teardown_margin{5000};
  // Note [Controller failover]: set by dslaunch --resume_job. The job's
  // first attempt is `attempt`, whose ranks already run: the controller
  // attaches to them (a Watch with a replay, no StartRanks) instead of
  // starting them. `earlier` are the attempts before it, as the journal
  // recorded their ends (for the restart budget and policy).
  struct Resume {
    int attempt = 0;
    std::vector<AttemptReport> earlier;
    // The hosts `attempt` runs on; empty: every planned host. Fewer after an
    // elastic shrink: the others count as lost (Note [Membership] takes
    // them back at a restart).
    std::vector<std::string> hosts;
  };
  std::optional<Resume> resume;
  // Note [Honest exits]: sees this process's freezes. Null: the controller
  // runs its own (a look every 100 ms; a gap of max(500 ms, two keep-alive
  // periods) is a freeze).
  std::shared_ptr<FreezeWatch> freeze_watch;
};

struct JobOutcome {
  JobState state = JOB_STATE_UNSPECIFIED;  // SUCCEEDED, FAILED or CANCELLED
  int exit_code = 0;
  std::vector<AttemptReport> attempts;
  // Set when the job ended for a reason the attempts do not show: an early
  // stop ("not restarting: attempt 1 failed to start the same way as ...") or
  // a stop signal during the backoff.
  std::string stop_note;
};

// Thread-safety: Run() runs the job on the calling thread (one call per
// object); OnSignal may be called from any thread. The members marked "event
// loop only" are touched only from Run()'s thread, including by the phase
// objects (AttemptState, RestartBackoff) it runs.
class JobController {
 public:
  // `agents[i]` serves `spec.plan.nodes[i]`. `notice` receives the
  // controller's own one-line messages (root cause, fail-fast figure,
  // restarts, summary). `on_attempt_over` runs after every attempt (the store
  // drops its keys). `event_log` (may be null: nothing is logged) must outlive
  // Run(); it is only written from the thread that calls Run().
  JobController(JobSpec spec, std::vector<AgentClient*> agents, RankOutputSink* output,
                std::function<void(const std::string&)> notice,
                std::function<void(int attempt)> on_attempt_over = nullptr,
                JobEventLog* event_log = nullptr);

  // Note [Live job status]: from now on, everything the controller learns of
  // the job is also written to `board` (which must outlive Run()). Call
  // before Run().
  void PublishStatusTo(JobStatusBoard* board) { board_ = board; }

  JobOutcome Run();

  // A stop signal for dslaunch (SIGINT, SIGTERM): stop every rank and end the
  // job as CANCELLED with 128+signal. A second signal skips the grace. During
  // the backoff before a restart, it ends the job at once: no new attempt.
  void OnSignal(int signal_number);

  JobState state() const { return state_; }

  // "rank 3 on node1 exited with code 7" etc.; exposed for tests.
  static std::string DescribeEnd(int rank, const std::string& host, const RankEnded& ended);

 private:
  // The phases of a job the event loop runs: one attempt, and the wait
  // before the next.
  class AttemptState;
  class RestartBackoff;

  void SetState(JobState next);
  // Opens every agent's event stream; false (having said why and closed the
  // streams opened) when one cannot be opened.
  bool WatchEveryAgent();
  // Note [Controller failover]: the resumed attempt runs on `hosts` only:
  // plan_ and active_ hold those, the other agents are lost.
  void AttachToHosts(const std::vector<std::string>& hosts);
  // The attempts, one after another, until one succeeds or restarts stop;
  // fills outcome->attempts, exit_code and stop_note.
  void RunAttempts(JobOutcome* outcome);
  // `previous` is the attempt before (for the recovery timing), or null.
  AttemptReport RunAttempt(int attempt, const AttemptReport* previous);
  // "restarting the job: attempt N (restart k of M) in X ms".
  void AnnounceRestart(const JobOutcome& outcome, std::chrono::milliseconds backoff);
  // Starts every rank; `node_started[i]` says whether node i's agent took its ranks.
  absl::Status StartAttempt(int attempt, std::vector<bool>* node_started);
  // StopJob to every agent of the attempt (or only `only_agent`) that is not lost.
  void BeginStop(int attempt, std::chrono::milliseconds grace, const std::string& reason,
                 int only_agent = -1);
  void ReportAttempt(const AttemptReport& report);
  // After an attempt that did not succeed (the last of outcome->attempts):
  // asks the policy (no restart after a stop signal), logs and announces the
  // decision, and sets the outcome's exit code and stop note when it stops.
  RestartDecision DecideRestart(JobOutcome* outcome);
  // Elastic membership (Note [Membership]): takes back lost hosts whose
  // agents answer again, leaves out lost and blacklisted ones, and rebuilds
  // the plan when at least spec_.min_nodes remain. Returns false when too few
  // hosts remain.
  bool ReplanMembership(int next_attempt);
  // Opens agent `index`'s event stream into the event queue.
  absl::Status WatchAgent(int index);
  void MarkLost(int index);
  bool Blacklisted(int index) const;
  // After a failed attempt: counts it against the blamed host and
  // blacklists a host that reached spec_.blacklist_after.
  void BlameHost(const AttemptReport& report);
  // Waits out the backoff before `next_attempt` on the event queue. Returns
  // false when a stop signal arrived (the job is cancelled). A lost agent's
  // event is kept for the next attempt; late rank events are dropped.
  bool WaitBeforeRestart(int next_attempt, std::chrono::milliseconds backoff);
  // Counts a stop signal and logs it.
  void RecordSignal(int attempt, int signal_number, const std::string& action);
  void LogRankFailure(int attempt, int rank, const std::string& host, const RankEnded& ended,
                      const std::string& cause);
  void LogAttemptEnd(const AttemptReport& report);
  void LogRecovery(const AttemptReport& failed, const AttemptReport& restarted);
  // Note [Honest exits]: announces and logs the freezes not reported yet.
  void NoteFreezes(int attempt);
  // The longest freeze recent enough to explain what the agents report now:
  // a rank stopped by its lease, or (for_lost_stream) a broken event stream.
  std::optional<FreezeWatch::Freeze> RecentFreeze(bool for_lost_stream = false);
  LeaseTiming lease_timing() const { return LeaseTiming{spec_.lease, spec_.keepalive_interval}; }
  // Note [Rank heartbeats]: asks every agent of the attempt for its ranks'
  // stacks, writes them under spec_.diagnosis_dir and returns the part of
  // the root cause that names the lagging rank(s) and the folder.
  std::string DiagnoseHang(int attempt, const std::map<int, RankProgress>& last_heartbeats);
  void Summarize(const JobOutcome& outcome);
  void LogJobStart();
  void LogJobEnd(const JobOutcome& outcome);
  // One thread for every agent (Note [Agent calls without a thread],
  // grpc_agent_client.h): each interval, a KeepAliveAsync to each agent
  // whose last one has been answered, and (Note [Membership]) probes of a
  // lost agent that report its return as a kHostBack event.
  void StartKeepAlives();
  void StopKeepAlives();
  void KeepAliveLoop();

  const JobSpec spec_;
  const std::vector<AgentClient*> agents_;  // index = the node of spec_.plan it serves
  // The plan of the current attempt and, per plan node, the index of its agent
  // in agents_. They differ from spec_ only after an elastic shrink.
  LaunchPlan plan_;
  std::vector<int> active_;
  std::set<int> lost_agents_;  // agents whose event stream broke (event loop only)
  // Per agent, shared with the keep-alive thread and its callbacks: lost,
  // and its return already reported (kHostBack) since.
  std::unique_ptr<std::atomic<bool>[]> lost_flags_;
  std::unique_ptr<std::atomic<bool>[]> back_reported_;
  std::map<int, int> host_failures_;  // failed attempts blamed on each agent (event loop only)
  std::map<int, std::chrono::steady_clock::time_point> blacklisted_until_;  // event loop only
  RankOutputSink* const output_;
  const std::function<void(const std::string&)> notice_;
  const std::function<void(int)> on_attempt_over_;
  NullJobEventLog null_log_;
  JobEventLog* const log_;  // event_log or &null_log_
  JobStatusBoard* board_ = nullptr;  // Note [Live job status]; may be null
  const RestartPolicy policy_;
  const std::shared_ptr<FreezeWatch> freeze_watch_;

  ControllerEventQueue events_;
  JobState state_ = JOB_PLANNING;
  int attempt_ = 0;  // the attempt running or about to run (event loop only)
  // Note [Controller failover]: the first attempt attaches to running ranks
  // (spec_.resume); false once it has (event loop only).
  bool attaching_ = false;
  // Signals seen so far (the event loop only).
  int signals_seen_ = 0;
  int first_signal_ = 0;
  std::vector<std::thread> stop_threads_;  // StopJob calls in flight
  std::thread keepalive_thread_;
  std::mutex keepalive_mu_;
  std::condition_variable keepalive_cv_;
  bool keepalive_running_ = false;  // guarded by keepalive_mu_
  int keepalives_in_flight_ = 0;    // guarded by keepalive_mu_
  // Per agent: a KeepAliveAsync of it is in flight (a slow or dead agent
  // is not asked again until it answers or the call's deadline passes).
  std::unique_ptr<std::atomic<bool>[]> keepalive_pending_;
};

}  // namespace dslaunch
