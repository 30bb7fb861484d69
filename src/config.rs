//! Every environment variable crossgpu reads, parsed in one place into typed values, with an
//! error naming the variable for any value it cannot use.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `CROSSGPU_DEVICES` | the group's members (README, "Choosing devices") | every adapter |
//! | `CROSSGPU_VALIDATION` | `1` enables the Khronos validation layer | `0` |
//! | `CROSSGPU_TIMEOUT_MS` | bound on every wait for a device, in ms | 60000 |
//! | `CROSSGPU_ALLREDUCE` | `auto`, `bridge`, `sync_fd`, `poll` or `generic` | `auto` |
//! | `CROSSGPU_ALLREDUCE_SPIN_US` | how long the host bridge spins before blocking, and the DevicePoll relay before napping, µs | 2000; 200 when a member is a CPU device |
//! | `CROSSGPU_JOINT_SUBMIT` | `1`: members sharing one queue submit each all-reduce phase as one batch (one GPU batch cost instead of one each) | `1` |
//! | `CROSSGPU_F16_WIRE_BYTES` | payload size from which the wire is f16 | 1048576 |
//! | `CROSSGPU_PHASE_A_KERNEL_BYTES` | wire bytes per member up to which phase A writes the host slot from a kernel instead of the copy engine | 65536 |
//! | `CROSSGPU_MAX_IN_FLIGHT` | submits a member's stream keeps in flight before the host waits for the oldest; each holds a command pool | 128 |
//! | `CROSSGPU_MATRIX_UNITS` | `1`: a prompt's products over f16 weights run on a member's matrix units (cooperative matrices) where its device has them, x rounded to f16; `0`: on the tiled kernel everywhere | `1` |
//! | `CROSSGPU_PROMPT_CHUNK` | prompt positions one pass through the layers takes (activations grow with it; the weights are read once per pass) | 512 where every member runs the prompt on matrix units, else 128 |
//! | `CROSSGPU_SPLIT` | tensor-parallel split: `even`, `auto` (weights from each member's matvec throughput measured at load) or weights such as `2:1` | `even` |
//!
//! README.md shows the same table (a unit test below keeps the two equal).

use std::ops::RangeInclusive;

use crate::error::{Error, Result};

fn var(name: &'static str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// Parses an unsigned integer variable within `[min, max]`.
pub(crate) fn u64_var(name: &'static str, default: u64, min: u64, max: u64) -> Result<u64> {
    let Some(v) = var(name) else {
        return Ok(default);
    };
    let n: u64 = v.parse().map_err(|_| Error::BadConfig {
        name,
        value: v.clone(),
        why: "expected a non-negative integer".into(),
    })?;
    if !(min..=max).contains(&n) {
        return Err(Error::BadConfig { name, value: v, why: format!("must be between {min} and {max}") });
    }
    Ok(n)
}

/// Like [`u64_var`], `None` when the variable is unset.
pub(crate) fn opt_u64_var(name: &'static str, min: u64, max: u64) -> Result<Option<u64>> {
    match var(name) {
        Some(_) => u64_var(name, min, min, max).map(Some),
        None => Ok(None),
    }
}

/// Parses a `0`/`1` (or `false`/`true`) variable.
pub(crate) fn bool_var(name: &'static str, default: bool) -> Result<bool> {
    match var(name).as_deref() {
        None => Ok(default),
        Some("0") | Some("false") => Ok(false),
        Some("1") | Some("true") => Ok(true),
        Some(v) => Err(Error::BadConfig { name, value: v.into(), why: "expected 0 or 1".into() }),
    }
}

pub(crate) fn validation_from_env() -> Result<bool> {
    bool_var("CROSSGPU_VALIDATION", false)
}

/// `CROSSGPU_MAX_IN_FLIGHT`'s default and range: submits per stream.
pub(crate) const MAX_IN_FLIGHT: (u64, RangeInclusive<u64>) =
    (vk_native::DEFAULT_MAX_PENDING as u64, 1..=65_536);
/// `CROSSGPU_TIMEOUT_MS`'s default and range: 1 ms to one day.
pub(crate) const TIMEOUT_MS: (u64, RangeInclusive<u64>) = (60_000, 1..=86_400_000);

/// `CROSSGPU_MAX_IN_FLIGHT`.
pub(crate) fn max_in_flight_from_env() -> Result<usize> {
    let (default, range) = MAX_IN_FLIGHT;
    Ok(u64_var("CROSSGPU_MAX_IN_FLIGHT", default, *range.start(), *range.end())? as usize)
}

/// `CROSSGPU_TIMEOUT_MS`.
pub(crate) fn timeout_ms_from_env() -> Result<u64> {
    let (default, range) = TIMEOUT_MS;
    u64_var("CROSSGPU_TIMEOUT_MS", default, *range.start(), *range.end())
}

pub(crate) fn devices_from_env() -> Option<String> {
    var("CROSSGPU_DEVICES")
}

pub(crate) fn string_var(name: &'static str) -> Option<String> {
    var(name)
}

/// `CROSSGPU_ALLREDUCE`, as given (`ModeRequest::parse` reads it).
pub(crate) fn allreduce_from_env() -> Option<String> {
    string_var("CROSSGPU_ALLREDUCE")
}

/// `CROSSGPU_ALLREDUCE_SPIN_US`, µs.
pub(crate) fn allreduce_spin_us_from_env() -> Result<Option<u64>> {
    opt_u64_var("CROSSGPU_ALLREDUCE_SPIN_US", 0, 1_000_000)
}

/// `CROSSGPU_F16_WIRE_BYTES`.
pub(crate) fn f16_wire_bytes_from_env() -> Result<u64> {
    u64_var("CROSSGPU_F16_WIRE_BYTES", 1 << 20, 0, u64::MAX / 2)
}

/// `CROSSGPU_PHASE_A_KERNEL_BYTES`.
pub(crate) fn phase_a_kernel_bytes_from_env() -> Result<u64> {
    u64_var("CROSSGPU_PHASE_A_KERNEL_BYTES", 65536, 0, u64::MAX)
}

/// `CROSSGPU_MATRIX_UNITS`.
pub(crate) fn matrix_units() -> Result<bool> {
    bool_var("CROSSGPU_MATRIX_UNITS", true)
}

/// `CROSSGPU_PROMPT_CHUNK`, if set.
pub(crate) fn prompt_chunk() -> Result<Option<u64>> {
    opt_u64_var("CROSSGPU_PROMPT_CHUNK", 1, 65_536)
}

/// `CROSSGPU_JOINT_SUBMIT`.
pub(crate) fn joint_submit_from_env() -> Result<bool> {
    bool_var("CROSSGPU_JOINT_SUBMIT", true)
}

/// `CROSSGPU_SPLIT`, as given (`SplitSpec::parse` reads it).
pub(crate) fn split_from_env() -> Option<String> {
    string_var("CROSSGPU_SPLIT")
}

#[cfg(test)]
mod tests {
    /// The rows of the environment-variable table in `text` (lines starting `| \`CROSSGPU_`),
    /// without a leading `//! `.
    fn rows(text: &str) -> Vec<String> {
        text.lines()
            .map(|l| l.trim_start_matches("//! ").trim())
            .filter(|l| l.starts_with("| `CROSSGPU_"))
            .map(str::to_string)
            .collect()
    }

    /// One table of variables: README.md's equals this module's, and every variable in it is
    /// parsed here (named in a string literal of this file's code).
    #[test]
    fn readme_table_is_this_modules_and_every_variable_is_parsed_here() {
        let here = include_str!("config.rs");
        let readme = include_str!("../README.md");
        let (ours, theirs) = (rows(here), rows(readme));
        assert!(!ours.is_empty());
        assert_eq!(ours, theirs, "README.md's environment table differs from src/config.rs's");
        let code = &here[here.find("use std::ops::RangeInclusive;").expect("the code starts")..];
        for row in &ours {
            let name = row.split('`').nth(1).expect("a variable name");
            assert!(
                code.contains(&format!("\"{name}\"")),
                "{name} is in the table but not parsed in config.rs"
            );
        }
    }
}
