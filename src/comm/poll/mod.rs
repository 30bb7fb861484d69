//! The DevicePoll transport: the two phases of a round recorded into each member's stream like
//! any other work, with no semaphore and no submit of their own; many rounds ride in one
//! command buffer.
//!
//! ## A round k on member i
//! 1. Phase A writes the member's wire value into its region of slot entry `k mod E` in host
//!    memory (as HostBridge does).
//! 2. A barrier from every earlier compute and transfer command to host reads: the data are
//!    available to the host before anything after it runs, and so is the end of phase B(k-1),
//!    the last reader of entry `k-1 mod E` (an execution dependency on all earlier work).
//! 3. `poll_wait` (one invocation) stores k into i's arrival word in host memory, then polls
//!    i's `go` word in its mapped device-local memory, bounded ([`WaitPlan`]).
//! 4. Phase B (`reduce_slots`), after a barrier on the wait, sums every member's wire values in
//!    member order: bitwise the same as HostBridge for the same wire.
//!
//! On a GPU, rounds of the f32 wire up to [`FUSED_WAIT_MAX_WORDS`] elements do 3 and 4 in one
//! dispatch (`reduce_slots_f32_poll`: thread 0 of every workgroup stores the arrival and waits,
//! then the workgroup sums), which saves each member a dispatch and a barrier per round, on the
//! GPU and in the host's recording. The decoder's fused rounds do the same in their norm.
//!
//! The relay thread (`relay.rs`) stores k into every `go` once every member's arrival reached
//! k. Nothing is submitted: the rounds go out with the member's next submit, and submitting a
//! member that holds rounds submits its peers too (`PollHook`, a hook on their streams), since a
//! submitted wait needs the peers' phase A on their GPUs, not on the host.
//!
//! ## Why a ring of entries, and a submit every E rounds
//! On NVIDIA 580, once a dispatch has read lines of imported host memory, nothing later in the
//! same submission makes a dispatch see host (or peer) writes to those lines — no barrier, no
//! event; the next submission sees them (docs/BENCHMARKS.md#waking-a-running-kernel). So no
//! line of host memory may be read twice in one submission expecting new contents: round k
//! uses entry `k mod E`, and a member's stream is submitted once it holds E rounds since its
//! last submit, so every entry is read at most once per submission. A reader never reads its
//! own region (phase B takes its own term from its tensor), nor lines a peer is writing.
//!
//! ## Why no member overwrites an entry a peer still reads
//! Member i writes entry e again in round k+E ≥ k+2, after its own wait for round k+1, which
//! the relay releases only once every peer j stored arrival k+1. That store runs after j's
//! barrier (2) of round k+1, whose first scope holds j's phase B(k), the last reader of entry
//! e in round k. So every read of round k completes before any write of round k+E.
//!
//! ## Never a hang
//! A wait polls a bounded number of times, calibrated at start to 90% of the communicator's
//! timeout (so the device's error comes before a host wait on the same stream gives up).
//! Where it runs out it sets `expired`; the relay sees it within a millisecond, aborts every
//! other wait, and the communicator is poisoned; a member's next successful synchronisation
//! also reports it. llvmpipe ends every loop of an invocation after 65,535 trips, so there a
//! wait is a chain of dispatches, each resuming the last ([`WaitPlan`]).
//!
//! - `wait.rs`: whether DevicePoll can run ([`blocker`]) and how each member's wait is planned.
//! - `hook.rs`: the hook on the members' streams.
//! - `device_poll.rs`: the transport's state and the recording of its rounds.
//! - `rounds.rs`, `transport.rs`: its [`super::transport::DeviceRounds`] and
//!   [`super::transport::Transport`] implementations.

mod device_poll;
mod hook;
mod rounds;
mod transport;
mod wait;

pub(super) use device_poll::DevicePoll;
pub(crate) use wait::blocker;
