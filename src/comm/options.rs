//! What a caller chooses: the mode ([`Mode`], [`ModeRequest`]), the wire precision of one
//! all-reduce ([`Precision`], [`AllReduceOptions`]) and a communicator's options
//! ([`CommOptions`], from the environment by default).

use std::time::Duration;

use crate::config;
use crate::error::{Error, Result};

/// How the members synchronise: chosen by [`Comm::new`](super::Comm::new) ([`Comm::mode`](super::Comm::mode), with the reason in
/// [`Comm::reason`](super::Comm::reason)) or forced with `CROSSGPU_ALLREDUCE` ([`ModeRequest`]). Every mode sums the
/// wire values in member order in f32 and follows the wire rule of [`Precision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Two phases through one page-aligned host allocation imported into every member
    /// (VK_EXT_external_memory_host): phase A writes each partial (f32, or converted to f16 on
    /// the f16 wire) into the member's slot and signals `done[i]`; a host thread
    /// (`crossgpu-bridge-N`) signals `go[i]` once every peer is done; phase B sums every
    /// member's wire values on the device, reading the peers' slots from host memory. Needs
    /// VK_EXT_external_memory_host and timeline semaphores on every member.
    HostBridge,
    /// The same two phases, members released by SYNC_FD payloads exchanged between devices
    /// instead of the host thread. Needs at least two members and, on every member, what
    /// HostBridge needs plus VK_KHR_external_semaphore_fd with SYNC_FD export and import.
    SyncFd,
    /// The same two phases recorded into each member's stream with no semaphore and no submit
    /// of their own (many rounds ride in one command buffer): after phase A a one-invocation
    /// kernel stores the round into the member's arrival word in host memory and polls its
    /// `go` word in device-local memory the host maps; a host thread (`crossgpu-relay-N`)
    /// stores the round into every member's `go` once all arrived. Needs at least two members,
    /// each on its own GPU or CPU device (never two VkDevices or queues of one GPU, where a
    /// polling kernel could wait for work queued behind it), with VK_EXT_external_memory_host
    /// and device-local host-visible host-coherent memory. Forced only
    /// (`CROSSGPU_ALLREDUCE=poll`): `auto` does not pick it.
    DevicePoll,
    /// Read every partial back, sum on the CPU in member order in f32 on the same wire values
    /// (on the f16 wire each partial is first rounded to f16 exactly as the device does), and
    /// write the sum back to every member. Works on any devices; used with fewer than two
    /// members, where a member lacks what the other modes need, and as the fallback when host
    /// slots cannot be allocated or imported.
    Generic,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::HostBridge => "HostBridge",
            Self::SyncFd => "SyncFd",
            Self::DevicePoll => "DevicePoll",
            Self::Generic => "Generic",
        })
    }
}

/// Which mode to use: `CROSSGPU_ALLREDUCE=auto|bridge|sync_fd|poll|generic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModeRequest {
    /// Choose: [`Mode::SyncFd`] when every member is on a Mesa driver with SYNC_FD export and
    /// import, else [`Mode::HostBridge`] when every member has VK_EXT_external_memory_host and
    /// timeline semaphores, else [`Mode::Generic`] (always with fewer than two members).
    #[default]
    Auto,
    /// This mode. [`Comm::new`](super::Comm::new) fails with [`Error::Unsupported`] when a member lacks what the
    /// mode needs; a host-slot allocation or import failure still falls back to Generic.
    Forced(Mode),
}

impl ModeRequest {
    /// Parses the `CROSSGPU_ALLREDUCE` syntax.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Self::Auto),
            "bridge" | "hostbridge" | "host_bridge" => Ok(Self::Forced(Mode::HostBridge)),
            "sync_fd" | "syncfd" => Ok(Self::Forced(Mode::SyncFd)),
            "poll" | "device_poll" | "devicepoll" => Ok(Self::Forced(Mode::DevicePoll)),
            "generic" => Ok(Self::Forced(Mode::Generic)),
            _ => Err(Error::BadConfig {
                name: "CROSSGPU_ALLREDUCE",
                value: s.to_string(),
                why: "expected auto, bridge, sync_fd, poll or generic".into(),
            }),
        }
    }
}

/// Precision of the values exchanged between members (the wire), in every [`Mode`].
///
/// On the f16 wire each partial is rounded to f16 (round to nearest: relative error ≤ 2^-11 in
/// f16's normal range, |x| ≥ 2^-14; smaller magnitudes keep less precision and below 2^-25
/// round to zero), values beyond ±65504 (infinities too) **saturate to ±65504**, NaN stays NaN;
/// the sum of the rounded partials is accumulated in f32, so it may exceed 65504. It moves half
/// the bytes of the f32 wire. Use [`Precision::F32`] for data that may exceed the f16 range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// The f32 wire below a payload (4 bytes per element) of
    /// [`AllReduceOptions::f16_threshold_bytes`], else the communicator's threshold
    /// (`CROSSGPU_F16_WIRE_BYTES`, default 1 MiB = 262144 elements); the f16 wire from there.
    #[default]
    Auto,
    /// Always the f32 wire: partials travel unrounded and the sum is the f32 sum in member
    /// order, whatever the magnitude.
    F32,
    /// Always the f16 wire: see the type's docs for its rounding and ±65504 saturation.
    F16,
}

/// Options of one all-reduce.
#[derive(Debug, Clone, Default)]
pub struct AllReduceOptions {
    /// Wire precision. The default, [`Precision::Auto`], uses f32 below 1 MiB of payload and f16
    /// from there, where partials are rounded to f16 and values beyond ±65504 saturate to
    /// ±65504 (NaN stays NaN; the sum is accumulated in f32): set [`Precision::F32`] for data
    /// that may exceed the f16 range.
    pub precision: Precision,
    /// Payload bytes from which `Precision::Auto` uses the f16 wire; `None`: the Comm's
    /// (`CROSSGPU_F16_WIRE_BYTES`, default 1 MiB).
    pub f16_threshold_bytes: Option<u64>,
    /// Members whose part is empty: their tensor is zeroed first, so they contribute zeros
    /// (and receive the sum like everyone else). The f32 sum only.
    pub zero_contribution: Vec<usize>,
    /// How the members' values combine (default the sum).
    pub op: super::ReduceOp,
}

/// Options of a communicator, by default from the environment.
#[derive(Debug, Clone)]
pub struct CommOptions {
    /// Which mode to use (`CROSSGPU_ALLREDUCE`, default [`ModeRequest::Auto`]).
    pub mode: ModeRequest,
    /// How long the bridge spins on `done[]` before blocking, or the DevicePoll relay on the
    /// arrival words before napping (`CROSSGPU_ALLREDUCE_SPIN_US`);
    /// `None`: [`SPIN_GPUS`], or [`SPIN_WITH_CPU_DEVICE`] when a member is a CPU device.
    pub spin: Option<Duration>,
    /// Default f16-wire threshold (`CROSSGPU_F16_WIRE_BYTES`).
    pub f16_threshold_bytes: u64,
    /// Bound on every wait (`CROSSGPU_TIMEOUT_MS`).
    pub timeout: Duration,
    /// Wire bytes per member up to which phase A writes the host slot with a kernel (a copy or
    /// the f16 conversion storing straight into host memory) instead of the copy engine
    /// (`CROSSGPU_PHASE_A_KERNEL_BYTES`, default 64 KiB). Meant for small rounds, where a
    /// dispatch starts sooner than a copy-engine command and bandwidth does not matter
    /// (docs/BENCHMARKS.md, "What we learned").
    pub phase_a_kernel_bytes: u64,
    /// Members that share one queue submit each phase as one batch
    /// (`vk_native::Recorder::submit_together`; `CROSSGPU_JOINT_SUBMIT`, default on): every
    /// submit batch costs the GPU a fixed time (docs/BENCHMARKS.md, "Limits"), so they pay it
    /// once per phase instead of once each. Members on separate queues are unaffected.
    pub joint_submit: bool,
}

/// Default spin time of the host bridge when every member is a GPU. A round's `done` comes
/// within about one decode layer's GPU time, but the host announces rounds up to a token
/// ahead, so a spin of a fraction of a layer runs out on most rounds and the bridge then pays
/// a wake-up from the driver on each (docs/BENCHMARKS.md, "What we learned"). The cost is a
/// host core kept busy while rounds are outstanding; between bursts the bridge sleeps.
pub const SPIN_GPUS: Duration = Duration::from_micros(2000);
/// Default spin time when a member is a CPU device (lavapipe): a spinning bridge takes a core
/// from the device's own threads.
pub const SPIN_WITH_CPU_DEVICE: Duration = Duration::from_micros(200);

impl CommOptions {
    /// Reads `CROSSGPU_ALLREDUCE`, `CROSSGPU_ALLREDUCE_SPIN_US`, `CROSSGPU_F16_WIRE_BYTES`,
    /// `CROSSGPU_TIMEOUT_MS`, `CROSSGPU_PHASE_A_KERNEL_BYTES` and `CROSSGPU_JOINT_SUBMIT`; a bad
    /// value is an error naming the variable.
    pub fn from_env() -> Result<Self> {
        let mode = match config::allreduce_from_env() {
            Some(s) => ModeRequest::parse(&s)?,
            None => ModeRequest::Auto,
        };
        Ok(Self {
            mode,
            spin: config::allreduce_spin_us_from_env()?.map(Duration::from_micros),
            f16_threshold_bytes: config::f16_wire_bytes_from_env()?,
            timeout: Duration::from_millis(config::timeout_ms_from_env()?),
            phase_a_kernel_bytes: config::phase_a_kernel_bytes_from_env()?,
            joint_submit: config::joint_submit_from_env()?,
        })
    }
}
