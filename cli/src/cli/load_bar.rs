//! The progress bar of a decoder's load: layers loaded, and for a checkpoint the bytes read from
//! the file so far and their rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// A load's progress, shown on the terminal (or hidden).
pub struct LoadBar {
    bar: ProgressBar,
    read: Option<Arc<AtomicU64>>,
    t0: Instant,
}

impl LoadBar {
    /// A bar of `layers` steps; `read` counts the checkpoint's bytes read (none for seeded
    /// weights, which are generated on the devices).
    pub fn new(show: bool, layers: usize, read: Option<Arc<AtomicU64>>) -> Self {
        let bar = if show { ProgressBar::new(layers as u64) } else { ProgressBar::hidden() };
        bar.set_style(
            ProgressStyle::with_template("loading weights {bar:40} {pos}/{len} layers, eta {eta} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Self { bar, read, t0: Instant::now() }
    }

    /// `done` layers are loaded.
    pub fn update(&self, done: usize) {
        self.bar.set_position(done as u64);
        if let Some(read) = &self.read {
            let gb = read.load(Ordering::Relaxed) as f64 / 1e9;
            let rate = gb / self.t0.elapsed().as_secs_f64().max(1e-9);
            self.bar.set_message(format!("({gb:.2} GB read, {rate:.2} GB/s)"));
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
