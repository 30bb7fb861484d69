//! A step: work on every member of a group (dispatches, copies, all-reduces) that runs many
//! times the same way, recorded once and replayed where it can be, so the host records nothing
//! after the first runs: one submit per member and run. The decoder's tokens are steps of this
//! kind; [`Step`] gives the same to any program.
//!
//! How a step runs: the first [`Step::run`] records and submits the closure's work as any
//! work is (and learns its all-reduce rounds); the second records it into a command buffer of
//! each member's own (`vk_native::Recorder::begin_capture`) and submits that; every later run
//! submits the recordings again. A step replays when its all-reduces can run without the host
//! between their phases: none at all, or DevicePoll rounds on the f32 wire, at least two and
//! fewer than the communicator's ring of slot entries (each replay's rounds run as the
//! communicator's next ones: the devices advance the round numbers). Otherwise every run calls
//! the closure again and records its work anew, with the same result.
//!
//! What it must never do: replay a recording whose work differs from what the closure would
//! record: the closure must do the same thing at every run (what changes between runs is read
//! by the kernels from buffers: a counter a kernel advances, say).

use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::group::{DeviceGroup, Member};
use vk_native::Replay;

/// Work that runs many times the same way on every member of a group, recorded once and
/// replayed where it can be (module docs: [`crate::step`]).
///
/// ```
/// # fn main() -> crossgpu::Result<()> {
/// use crossgpu::{AllReduceOptions, Comm, DeviceGroup, Instance, Step};
/// let instance = Instance::new()?;
/// let group = DeviceGroup::from_env(&instance)?;
/// let parts: Vec<_> = group.members().iter().map(|m| m.upload_f32(&[1.0; 4])).collect::<Result<_, _>>()?;
/// let mut comm = Comm::new(&group)?;
/// let mut step = Step::new(&group, |comm: Option<&mut Comm>| {
///     for (m, p) in group.members().iter().zip(&parts) {
///         m.scale(p, 0.5)?;
///     }
///     match comm {
///         Some(c) => c.all_reduce(&mut parts.iter().collect::<Vec<_>>(), &AllReduceOptions::default()),
///         None => Ok(()),
///     }
/// });
/// for _ in 0..3 {
///     step.run(Some(&mut comm))?;
/// }
/// group.synchronize()?;
/// # Ok(()) }
/// ```
pub struct Step<F> {
    members: Vec<Member>,
    work: F,
    runs: u64,
    /// All-reduce rounds one run performs (learned at the first run).
    rounds: u64,
    /// The largest round, in f32 elements (slots grow to it before the recording).
    largest: usize,
    /// Whether the first run's rounds can be replayed.
    replayable: bool,
    /// Why not, where they cannot.
    why_not: Option<String>,
    recorded: Option<Vec<Replay>>,
    /// Why the step refuses further runs (its members were left out of step).
    broken: Option<String>,
}

impl<F: FnMut(Option<&mut Comm>) -> Result<()>> Step<F> {
    /// A step over `group`'s members doing `work` (called with the communicator that
    /// [`Step::run`] is given).
    pub fn new(group: &DeviceGroup, work: F) -> Self {
        Self {
            members: group.members().to_vec(),
            work,
            runs: 0,
            rounds: 0,
            largest: 0,
            replayable: false,
            why_not: None,
            recorded: None,
            broken: None,
        }
    }

    /// Whether runs from the third on submit a recording (decided at the first run; `false`
    /// before it).
    pub fn replays(&self) -> bool {
        self.runs > 0 && self.replayable
    }

    /// Why the step is recorded at every run instead of replayed (`None` where it replays, or
    /// before its first run).
    pub fn recorded_because(&self) -> Option<&str> {
        self.why_not.as_deref()
    }

    /// Runs the step once more: records it (the first run), records it for replay (the
    /// second, where it [replays](Step::replays)), or submits the recording (later runs). Pass
    /// the same communicator (or none) at every run. Nothing waits for the devices.
    pub fn run(&mut self, comm: Option<&mut Comm>) -> Result<()> {
        if let Some(why) = &self.broken {
            return Err(Error::Poisoned("the step".into(), why.clone()));
        }
        let r = match (self.runs, self.replayable) {
            (0, _) => self.first(comm),
            (_, false) => (self.work)(comm),
            (_, true) if self.recorded.is_none() => self.record(comm),
            (_, true) => self.replay(comm),
        };
        if r.is_ok() {
            self.runs += 1;
        }
        r
    }

    fn first(&mut self, comm: Option<&mut Comm>) -> Result<()> {
        match comm {
            None => {
                (self.work)(None)?;
                self.replayable = true;
            }
            Some(c) => {
                c.take_round_log();
                let first_round = c.rounds();
                (self.work)(Some(&mut *c))?;
                let log = c.take_round_log();
                self.rounds = c.rounds() - first_round;
                self.largest = log.largest;
                self.why_not = if log.calls == 0 {
                    None
                } else if c.mode() != crate::comm::Mode::DevicePoll {
                    Some(format!(
                        "{} needs the host between an all-reduce's phases (DevicePoll replays)",
                        c.mode()
                    ))
                } else if log.unreplayable > 0 || self.rounds != log.calls {
                    Some("an all-reduce ran on the f16 wire or in several rounds (DevicePoll replays single f32 rounds)".into())
                } else if self.rounds < 2 {
                    Some("it has one all-reduce; a replayed step needs two or more (its rounds reuse slot entries)".into())
                } else if !c.replay_fits(self.rounds, log.largest) {
                    Some(format!(
                        "its {} all-reduces do not fit one ring of the communicator's slot entries",
                        self.rounds
                    ))
                } else {
                    None
                };
                self.replayable = self.why_not.is_none();
            }
        }
        Ok(())
    }

    fn record(&mut self, mut comm: Option<&mut Comm>) -> Result<()> {
        if let Some(c) = comm.as_deref_mut().filter(|_| self.rounds > 0) {
            c.prepare_recording(self.largest)?;
            if !c.replay_fits(self.rounds, self.largest) {
                // Growing the slots left fewer entries (or fell back): record every run.
                self.replayable = false;
                self.why_not =
                    Some("the communicator's slots grew and left too few entries, or it fell back".into());
                return (self.work)(Some(c));
            }
        }
        // Earlier work goes out on its own: a replay's submission holds its own rounds only.
        for m in &self.members {
            m.flush()?;
        }
        let first_round = comm.as_deref().map_or(0, Comm::rounds);
        let (rounds, work) = (self.rounds, &mut self.work);
        let recorded = capture(&self.members, || {
            work(comm.as_deref_mut())?;
            if let Some(c) = comm.as_deref_mut().filter(|_| rounds > 0) {
                if c.rounds() - first_round != rounds {
                    return Err(Error::InvalidArgument(format!(
                        "the step did {} all-reduces when recorded, {rounds} at its first run: a step must do the same work at every run",
                        c.rounds() - first_round
                    )));
                }
                c.replays()?.record_advance(rounds)?;
            }
            Ok(())
        });
        match recorded {
            Ok(r) => self.recorded = Some(r),
            Err(Capture::NotBegun(e)) => return Err(e),
            Err(Capture::Failed(e)) => return Err(self.broken(comm, e)),
        }
        self.submit(comm)
    }

    fn replay(&mut self, mut comm: Option<&mut Comm>) -> Result<()> {
        if let Some(c) = comm.as_deref_mut().filter(|_| self.rounds > 0) {
            // Only all-reduces replay here (other collectives mark a step unreplayable).
            c.replays()?.replayed(self.rounds, self.rounds)?;
        }
        self.submit(comm)
    }

    fn submit(&mut self, comm: Option<&mut Comm>) -> Result<()> {
        let recorded = self.recorded.as_ref().expect("recorded before");
        // On an error the members before the failed one run rounds it never joins.
        submit_recorded(&self.members, recorded).map_err(|e| self.broken(comm, e))
    }

    /// Marks the step unusable after `e` left its members out of step, poisoning the
    /// communicator; returns `e`.
    fn broken(&mut self, comm: Option<&mut Comm>, e: Error) -> Error {
        if let Some(c) = comm {
            c.abandon(&e);
        }
        self.broken = Some(e.to_string());
        e
    }
}

/// Why [`capture`] recorded nothing.
pub(crate) enum Capture {
    /// A member could not begin its recording: nothing was recorded, every member records as
    /// before.
    NotBegun(Error),
    /// The work or a member's end of recording failed: every recording is cancelled, but the
    /// work's all-reduce rounds were counted (the caller's members are out of step).
    Failed(Error),
}

/// Records `work` into a command buffer of each member's own (`Member::begin_capture` on every
/// member first) and returns the recordings, one per member in order; where anything fails no
/// member is left recording. The step and the decoder record their replays through it.
pub(crate) fn capture(members: &[Member], work: impl FnOnce() -> Result<()>) -> Result<Vec<Replay>, Capture> {
    for (i, m) in members.iter().enumerate() {
        if let Err(e) = m.begin_capture() {
            members[..i].iter().for_each(Member::cancel_capture);
            return Err(Capture::NotBegun(e));
        }
    }
    work().and_then(|()| members.iter().map(Member::end_capture).collect()).map_err(|e| {
        members.iter().for_each(Member::cancel_capture);
        Capture::Failed(e)
    })
}

/// Submits each member's recording, in member order; stops at the first member that fails.
pub(crate) fn submit_recorded(members: &[Member], recorded: &[Replay]) -> Result<()> {
    members.iter().zip(recorded).try_for_each(|(m, r)| m.submit_replay(r))
}
