//! The kernels of `wgsl/`, checked by `build.rs` with naga at build time (so a WGSL error
//! fails the build, and binaries carry their kernels' source and need no files at run time),
//! compiled by vk-native's compiler (`vk_native::Shader`, bounds-checked SPIR-V) once per
//! process and entry point at first use, and turned into pipelines once per VkDevice.
//!
//! Inside the crate a kernel is named by its generated handle (an `Entry`, e.g.
//! `ATTENTION_DECODE`), typed by the Rust mirror of its WGSL immediate struct, so a dispatch
//! cannot pass another kernel's immediates or misplace a field.

use std::marker::PhantomData;
use std::sync::{Mutex, OnceLock};

use vk_native::{CompileOptions, Device, Kernel, Shader};

/// A compute entry point of `wgsl/` and its resource interface, read from the module by build.rs.
#[derive(Debug)]
pub struct KernelSpec {
    /// The entry point's name, unique across `wgsl/`.
    pub entry: &'static str,
    /// The WGSL file that defines it, e.g. `wgsl/add.wgsl`.
    pub file: &'static str,
    /// The file's WGSL with its `// #include` lines expanded, as naga compiles it.
    pub source: &'static str,
    /// One entry per storage buffer at `@group(0) @binding(0..n)`: `true` for `read`, `false`
    /// for `read_write`.
    pub read_only: &'static [bool],
    /// Size of the `var<immediate>` block (push constants) in bytes (0 without one).
    pub immediate_bytes: u32,
    /// `@workgroup_size` of the entry point, in invocations per dimension.
    pub workgroup_size: [u32; 3],
}

/// A kernel's immediates as the words its `var<immediate>` block holds (implemented by the
/// structs build.rs generates from the WGSL).
pub(crate) trait Immediates {
    /// `[u32; N]`, N the block's size in words.
    type Words: AsRef<[u32]>;
    /// The block, word for word: each field at its WGSL offset, padding zero.
    fn words(&self) -> Self::Words;
}

/// The immediates of a kernel without a `var<immediate>` block.
#[allow(dead_code)] // every kernel has one today; the generator names this type for one that has not
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoImmediates;

impl Immediates for NoImmediates {
    type Words = [u32; 0];
    fn words(&self) -> [u32; 0] {
        []
    }
}

/// A compute entry point of `wgsl/`, typed by its immediates `P`: the generated constants
/// (`ATTENTION_DECODE`, …) are the only values.
pub(crate) struct Entry<P> {
    index: usize,
    name: &'static str,
    _immediates: PhantomData<fn(&P)>,
}

impl<P> Clone for Entry<P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P> Copy for Entry<P> {}

impl<P> std::fmt::Debug for Entry<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl<P> Entry<P> {
    const fn new(index: usize, name: &'static str) -> Self {
        Self { index, name, _immediates: PhantomData }
    }

    /// The entry point's compiled module and interface.
    pub(crate) fn spec(self) -> &'static KernelSpec {
        &KERNELS[self.index]
    }

    /// Its position in `KERNELS`: the key of caches of its pipeline and bind groups.
    pub(crate) fn index(self) -> usize {
        self.index
    }

    /// The entry point's name, as in the WGSL.
    pub(crate) const fn name(self) -> &'static str {
        self.name
    }
}

impl KernelSpec {
    /// The entry point compiled by vk-native's compiler (once per process; later calls return
    /// the same shader). The build checked the source, so an error here is naga's alone.
    pub fn shader(&self) -> vk_native::Result<Shader> {
        static COMPILED: OnceLock<Vec<OnceLock<Shader>>> = OnceLock::new();
        let all = COMPILED.get_or_init(|| KERNELS.iter().map(|_| OnceLock::new()).collect());
        let index = KERNELS.iter().position(|k| std::ptr::eq(k, self)).unwrap_or(usize::MAX);
        if let Some(s) = all.get(index).and_then(OnceLock::get) {
            return Ok(s.clone());
        }
        let opts = CompileOptions { entry: self.entry.to_string(), ..Default::default() };
        let shader = Shader::compile(self.entry, self.source, &opts)
            .map_err(|e| vk_native::NativeError::Unsupported(format!("compiling {}: {e}", self.file)))?;
        Ok(match all.get(index) {
            Some(cell) => cell.get_or_init(|| shader).clone(),
            None => shader,
        })
    }
}

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// Finds an entry point by name.
pub fn spec(entry: &str) -> Option<&'static KernelSpec> {
    KERNELS.iter().find(|k| k.entry == entry)
}

/// Pipelines of one VkDevice, made at first use and kept for the device's life.
pub(crate) struct KernelSet {
    device: Device,
    made: Mutex<Vec<Option<Kernel>>>,
}

impl KernelSet {
    pub(crate) fn new(device: Device) -> Self {
        Self { device, made: Mutex::new(vec![None; KERNELS.len()]) }
    }

    pub(crate) fn get<P>(&self, entry: Entry<P>) -> vk_native::Result<Kernel> {
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = &made[entry.index()] {
            return Ok(k.clone());
        }
        let k = Kernel::new(&self.device, &entry.spec().shader()?)?;
        made[entry.index()] = Some(k.clone());
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
