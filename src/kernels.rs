//! The kernels of `wgsl/`, compiled by `build.rs` to SPIR-V at build time (so a WGSL error
//! fails the build, binaries carry their kernels and need no files at run time, and no device
//! pays for naga at start-up), and turned into pipelines once per VkDevice at first use.

use std::collections::HashMap;
use std::sync::Mutex;

use vk_native::{Device, Kernel, KernelLayout};

/// A compute entry point of `wgsl/` and its resource interface, read from the module by build.rs.
#[derive(Debug)]
pub struct KernelSpec {
    /// The entry point's name, unique across `wgsl/` (how kernels are looked up).
    pub entry: &'static str,
    /// The WGSL file that defines it, e.g. `wgsl/add.wgsl`.
    pub file: &'static str,
    /// The compiled SPIR-V module, little-endian 32-bit words as bytes, without debug info.
    pub spirv: &'static [u8],
    /// One entry per storage buffer at `@group(0) @binding(0..n)`: `true` for `read`, `false`
    /// for `read_write`.
    pub read_only: &'static [bool],
    /// Size of the `var<immediate>` block (push constants) in bytes (0 without one).
    pub immediate_bytes: u32,
    /// `@workgroup_size` of the entry point, in invocations per dimension.
    pub workgroup_size: [u32; 3],
}

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// Finds an entry point by name.
pub fn spec(entry: &str) -> Option<&'static KernelSpec> {
    KERNELS.iter().find(|k| k.entry == entry)
}

/// Pipelines of one VkDevice, made at first use and kept for the device's life.
pub(crate) struct KernelSet {
    device: Device,
    made: Mutex<HashMap<&'static str, Kernel>>,
}

impl KernelSet {
    pub(crate) fn new(device: Device) -> Self {
        Self { device, made: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn get(&self, entry: &'static str) -> vk_native::Result<Kernel> {
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = made.get(entry) {
            return Ok(k.clone());
        }
        let spec = spec(entry)
            .ok_or_else(|| vk_native::NativeError::Unsupported(format!("no kernel named {entry}")))?;
        let words: Vec<u32> =
            spec.spirv.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let layout =
            KernelLayout { read_only: spec.read_only.to_vec(), immediate_bytes: spec.immediate_bytes };
        let k = Kernel::new(&self.device, entry, &words, entry, &layout)?;
        made.insert(entry, k.clone());
        Ok(k)
    }
}

/// Workgroups for an element-wise kernel over `n` items with a grid-stride loop.
pub(crate) fn elementwise_groups(n: usize) -> [u32; 3] {
    [n.div_ceil(256).clamp(1, 65_535) as u32, 1, 1]
}

/// Workgroups for one workgroup per row, spilling into y past 65535 rows.
pub(crate) fn row_groups(rows: usize) -> [u32; 3] {
    let x = rows.clamp(1, 65_535);
    [x as u32, rows.div_ceil(x) as u32, 1]
}
