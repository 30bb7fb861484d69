//! Dispatching a [`Kernel`] on one member ([`Member::dispatch`]) or on every member of a group
//! at once ([`DeviceGroup::dispatch_each`]): the arguments are checked against the kernel's
//! reflected interface and the member's device (count, owner, dtype, read or write, alignment,
//! size, workgroups, immediates) before anything is recorded, then the dispatch takes the path
//! of the library's own kernels (`MemberShared::dispatch_kernel`).

use vk_native::shader::BindingKind;
use vk_native::BindRange;

mod args;

pub use args::{Arg, Immediates, Value};

use crate::error::{Error, Result};
use crate::group::{DeviceGroup, Member};
use crate::kernels::Kernel;
use args::{binds_as, check_access, dtype_for};

impl Member {
    /// Records `kernel` over `args` (one per binding, in binding order) with `immediates` and
    /// `workgroups` workgroups into this member's stream, after a barrier where an earlier
    /// command conflicts (hazards follow the kernel's own bindings: one it never writes is read).
    ///
    /// Refused before anything is recorded, with an error naming the binding or field: the
    /// wrong number of arguments, a tensor of another member, a dtype the binding does not
    /// hold, [`Arg::read`] for a binding the kernel writes (or [`Arg::write`] for one it cannot),
    /// a view not at the device's binding alignment or smaller than the binding's type, a
    /// uniform past `maxUniformBufferRange`, more workgroups than the device dispatches, an
    /// immediate missing, unknown or of the wrong type; a kernel the device cannot run (its
    /// workgroup size, `var<workgroup>` bytes, immediates or f16) is an
    /// [`Error::Unsupported`].
    pub fn dispatch(
        &self,
        kernel: &Kernel,
        args: &[Arg<'_>],
        immediates: &Immediates,
        workgroups: [u32; 3],
    ) -> Result<()> {
        let words = self.check_dispatch(kernel, args, immediates, workgroups)?;
        self.record_dispatch(kernel, args, &words, workgroups)
    }

    fn record_dispatch(
        &self,
        kernel: &Kernel,
        args: &[Arg<'_>],
        words: &[u32],
        workgroups: [u32; 3],
    ) -> Result<()> {
        let ranges: Vec<BindRange<'_>> = args
            .iter()
            .map(|a| BindRange {
                buffer: &a.view.tensor().buffer,
                offset: a.view.byte_offset(),
                size: a.view.bytes(),
            })
            .collect();
        self.shared.dispatch_kernel(kernel, &ranges, &[], words, workgroups)
    }

    /// Checks a dispatch of `kernel` on this member; returns the immediates' words.
    fn check_dispatch(
        &self,
        kernel: &Kernel,
        args: &[Arg<'_>],
        immediates: &Immediates,
        workgroups: [u32; 3],
    ) -> Result<Vec<u32>> {
        let name = kernel.name();
        let interface = kernel.interface();
        if args.len() != interface.bindings.len() {
            return Err(Error::LengthMismatch {
                what: format!("kernel {name}: arguments (one per binding: {})", binding_names(kernel)),
                expected: interface.bindings.len(),
                got: args.len(),
            });
        }
        let caps = &self.adapter().caps;
        for (b, arg) in interface.bindings.iter().zip(args) {
            let what = format!("kernel {name}, binding {} ({})", b.binding, b.name);
            let t = arg.view.tensor();
            t.check_on(&self.shared, &what)?;
            check_access(name, b, arg)?;
            if !binds_as(t.dtype(), b.element) {
                return Err(match dtype_for(b.element) {
                    Some(expected) => Error::DtypeMismatch { what, expected, got: t.dtype() },
                    None => Error::InvalidArgument(format!(
                        "{what} holds {} ({}), which no tensor dtype is",
                        b.element, b.type_name
                    )),
                });
            }
            let (align, max, limit) = match b.kind {
                BindingKind::Uniform => (
                    caps.min_uniform_buffer_offset_alignment,
                    caps.max_uniform_buffer_range,
                    "maxUniformBufferRange",
                ),
                _ => (
                    caps.min_storage_buffer_offset_alignment,
                    caps.max_storage_buffer_range,
                    "maxStorageBufferRange",
                ),
            };
            let (offset, bytes) = (arg.view.byte_offset(), arg.view.bytes());
            if offset % align.max(1) != 0 {
                return Err(Error::InvalidArgument(format!(
                    "{what}: a view at byte {offset}, but {} binds buffers only at multiples of {align} bytes; start the view there, or pass the offset as an immediate",
                    self.label()
                )));
            }
            if bytes < b.min_bytes.max(1) {
                return Err(Error::InvalidArgument(format!(
                    "{what}: its type {} needs at least {} bytes, the tensor or view has {bytes}",
                    b.type_name, b.min_bytes
                )));
            }
            if bytes > max {
                return Err(Error::InvalidArgument(format!(
                    "{what}: {bytes} bytes, more than {} binds as one {} ({limit} {max} bytes)",
                    self.label(),
                    if b.kind == BindingKind::Uniform { "uniform" } else { "storage buffer" }
                )));
            }
        }
        let max = caps.max_compute_work_group_count;
        if let Some(axis) = (0..3).find(|&a| workgroups[a] > max[a]) {
            return Err(Error::InvalidArgument(format!(
                "kernel {name}: {workgroups:?} workgroups, but {} dispatches at most {} along {} (maxComputeWorkGroupCount {max:?})",
                self.label(),
                max[axis],
                ["x", "y", "z"][axis]
            )));
        }
        immediates.encode(kernel)
    }
}

fn binding_names(kernel: &Kernel) -> String {
    let b = &kernel.interface().bindings;
    if b.is_empty() {
        return "none".into();
    }
    b.iter().map(|b| b.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// One member's part of [`DeviceGroup::dispatch_each`]: its arguments, immediates and
/// workgroups.
#[derive(Clone, Debug)]
pub struct MemberDispatch<'a> {
    /// One argument per binding, tensors of this member.
    pub args: Vec<Arg<'a>>,
    /// The immediates.
    pub immediates: Immediates,
    /// Workgroups per dimension.
    pub workgroups: [u32; 3],
}

impl DeviceGroup {
    /// Records `kernel` on every member, member `i` with `calls[i]` (its own tensors): every
    /// call is checked first (as [`Member::dispatch`] checks one), so a refused call records
    /// nothing on any member.
    pub fn dispatch_each(&self, kernel: &Kernel, calls: &[MemberDispatch<'_>]) -> Result<()> {
        if calls.len() != self.len() {
            return Err(Error::LengthMismatch {
                what: format!("kernel {}: calls (one per member)", kernel.name()),
                expected: self.len(),
                got: calls.len(),
            });
        }
        let words = self
            .members()
            .iter()
            .zip(calls)
            .map(|(m, c)| m.check_dispatch(kernel, &c.args, &c.immediates, c.workgroups))
            .collect::<Result<Vec<_>>>()?;
        for ((m, c), w) in self.members().iter().zip(calls).zip(&words) {
            m.record_dispatch(kernel, &c.args, w, c.workgroups)?;
        }
        Ok(())
    }
}
