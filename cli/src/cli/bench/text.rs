//! How `crossgpu bench` prints: payloads in binary units, numbers to three significant digits,
//! and a progress bar (on stderr) that lines are printed past.

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar (on stderr, hidden when that is not a terminal) whose length is in
/// estimated work units, so its ETA holds when the steps' durations differ a hundredfold.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len.max(1));
    b.set_style(
        ProgressStyle::with_template("{bar:30} {percent:>3}% {elapsed} elapsed, eta {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b.set_message(what.to_string());
    b
}

/// Prints a line to stdout at once (println flushes per line), with the bar out of the way.
pub fn say(pb: &ProgressBar, line: String) {
    pb.suspend(|| println!("{line}"));
}

/// "4 KiB", "1 MiB", "1.5 MiB", "512 B".
pub fn fmt_bytes(b: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if b >= size {
            let v = b as f64 / size as f64;
            return if b.is_multiple_of(size) {
                format!("{} {unit}", b / size)
            } else {
                format!("{v:.1} {unit}")
            };
        }
    }
    format!("{b} B")
}

/// `x` with 3 significant digits (at least), no exponent: 0.00123, 1.23, 12.3, 123, 12345.
pub fn sig3(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    if x == 0.0 {
        return "0".into();
    }
    let decimals = (2 - x.abs().log10().floor() as i32).clamp(0, 12) as usize;
    format!("{x:.decimals$}")
}
