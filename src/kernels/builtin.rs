//! The library's own kernels, in `wgsl/`: checked by `build.rs` with naga at build time (a WGSL
//! error fails the build), which also generates, per entry point, a typed handle (an `Entry`,
//! e.g. `ATTENTION_DECODE`) whose immediates are a Rust mirror of the file's `var<immediate>`
//! struct, so a dispatch cannot pass another kernel's immediates or misplace a field. Each is a
//! [`Kernel`] like a user's, compiled from its build-checked source at first use (once per
//! process), and dispatched by the same path.

use std::marker::PhantomData;
use std::sync::OnceLock;

use vk_native::{CompileOptions, Shader};

use super::kernel::Kernel;
use crate::error::{Error, Result};

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
    /// Whether it runs on the matrix units (`enable wgpu_cooperative_matrix;`): compiled with
    /// cooperative matrices, subgroups and f16 allowed, for devices that have them.
    pub cooperative_matrix: bool,
}

/// The library's kernels as [`Kernel`]s, compiled at first use, by index in [`KERNELS`].
fn compiled(index: usize) -> Result<&'static Kernel> {
    static COMPILED: OnceLock<Vec<OnceLock<Kernel>>> = OnceLock::new();
    let all = COMPILED.get_or_init(|| KERNELS.iter().map(|_| OnceLock::new()).collect());
    let cell = all.get(index).ok_or(Error::IndexOutOfRange {
        what: "kernel index",
        index,
        len: KERNELS.len(),
        of: "kernels in wgsl/",
    })?;
    if let Some(k) = cell.get() {
        return Ok(k);
    }
    let k = Kernel::from_shader(KERNELS[index].shader().map_err(Error::Shader)?);
    // Another thread may have compiled it meanwhile: one of the two is kept.
    Ok(cell.get_or_init(|| k))
}

impl KernelSpec {
    /// The entry point as a [`Kernel`], compiled at its first use in the process (later calls
    /// return the same one). The build checked the source, so an error here is naga's alone.
    pub fn kernel(&self) -> Result<Kernel> {
        let index = KERNELS.iter().position(|k| std::ptr::eq(k, self)).ok_or_else(|| {
            Error::InvalidArgument(format!("{} is not one of the library's kernels", self.entry))
        })?;
        compiled(index).cloned()
    }

    /// The entry point compiled by vk-native's compiler (a new compile each call; the wgpu
    /// embedding takes its kernel so).
    pub fn shader(&self) -> std::result::Result<Shader, vk_native::ShaderError> {
        Shader::compile(
            self.entry,
            self.source,
            &CompileOptions {
                entry: self.entry.to_string(),
                cooperative_matrix: self.cooperative_matrix,
                ..Default::default()
            },
        )
    }
}

/// A kernel's immediates as the words its `var<immediate>` block holds (implemented by the
/// structs build.rs generates from the WGSL).
pub(crate) trait ImmediateWords {
    /// `[u32; N]`, N the block's size in words.
    type Words: AsRef<[u32]>;
    /// The block, word for word: each field at its WGSL offset, padding zero.
    fn words(&self) -> Self::Words;
}

/// The immediates of a kernel without a `var<immediate>` block.
#[allow(dead_code)] // every kernel has one today; the generator names this type for one that has not
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoImmediates;

impl ImmediateWords for NoImmediates {
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

    /// The entry point as a [`Kernel`] (compiled at first use).
    pub(crate) fn kernel(self) -> Result<&'static Kernel> {
        compiled(self.index)
    }

    /// The entry point's name, as in the WGSL.
    pub(crate) const fn name(self) -> &'static str {
        self.name
    }
}

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// Finds an entry point by name.
pub fn spec(entry: &str) -> Option<&'static KernelSpec> {
    KERNELS.iter().find(|k| k.entry == entry)
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
