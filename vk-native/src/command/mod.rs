//! Recording many dispatches and copies into one command buffer and submitting it raw on one
//! queue of the device, with timeline and binary semaphore waits and signals.
//!
//! Command buffers come from wgpu-hal command encoders (one encoder per command buffer in
//! flight, since wgpu-hal resets a whole pool at once); commands are recorded into them with
//! ash, and they are submitted with `vkQueueSubmit` on the recorder's own queue, which
//! wgpu-hal's single-queue API cannot do. Each submit signals the recorder's `progress`
//! timeline semaphore; a command buffer and every resource it used (kept alive by `Arc`s) are
//! released once `progress` passes its value.
//!
//! - `encoders.rs`: the command encoders, recycled once their work completed, and the
//!   back-pressure that bounds the submits in flight ([`DEFAULT_MAX_PENDING`]).
//! - `commands.rs`: the commands recorded: dispatches, copies, fills and global memory barriers.
//! - `profiling.rs`: timestamps after every dispatch and copy, while profiling.
//! - `replay.rs`: work recorded once and submitted any number of times ([`Replay`]).
//! - `submit.rs`: single and joint submission ([`SubmitInfo`]), and waiting for it.

mod commands;
mod encoders;
mod profiling;
mod recorder;
mod replay;
mod submit;

pub use recorder::{Recorder, DEFAULT_MAX_PENDING};
pub use replay::Replay;
pub use submit::SubmitInfo;
