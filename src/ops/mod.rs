//! The kernels as operations on a member's tensors: each checks its inputs (member, dtype,
//! length) and returns an error before recording anything, then records one dispatch into the
//! member's stream.

use vk_native::{BindRange, GpuBuffer};

use crate::error::{Error, Result};
use crate::group::Member;
use crate::kernels::{elementwise_groups, row_groups};
mod transformer;

pub use transformer::AttentionShape;
pub(crate) use transformer::Position;

use crate::tensor::{DType, Tensor};

fn same_len(what: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.len() != b.len() {
        return Err(Error::LengthMismatch { what: what.into(), expected: a.len(), got: b.len() });
    }
    Ok(())
}

impl Member {
    /// Sets every element of `t` to `value` (f16 tensors get `value` rounded to f16 and
    /// saturated to ±65504, u32
    /// tensors `value as u32`).
    pub fn fill(&self, t: &Tensor, value: f32) -> Result<()> {
        t.check_on(&self.shared, "fill")?;
        let (words, bits) = match t.dtype() {
            DType::F32 => (t.len(), value.to_bits()),
            DType::U32 => (t.len(), value as u32),
            DType::F16 => {
                let h = crate::tensor::f16_saturating(value).to_bits() as u32;
                (t.len().div_ceil(2), h | (h << 16))
            }
        };
        if words == 0 {
            return Ok(());
        }
        self.shared.dispatch(
            "fill_u32",
            &[&t.buffer],
            &[],
            &[words as u32, bits, 0, 0],
            elementwise_groups(words),
        )
    }

    /// `dst = src` (same dtype and length).
    pub fn copy(&self, src: &Tensor, dst: &Tensor) -> Result<()> {
        src.check_on(&self.shared, "copy src")?;
        dst.check_on(&self.shared, "copy dst")?;
        dst.check_dtype(src.dtype(), "copy")?;
        same_len("copy", dst, src)?;
        let words = src.dtype().storage_bytes(src.len()) / 4;
        if words == 0 {
            return Ok(());
        }
        let w = words as usize;
        self.shared.dispatch(
            "copy_u32",
            &[&src.buffer, &dst.buffer],
            &[],
            &[w as u32, 0, 0, 0],
            elementwise_groups(w),
        )
    }

    /// `dst += src`, both f32.
    pub fn add(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        src.check_on(&self.shared, "add src")?;
        dst.check_on(&self.shared, "add dst")?;
        dst.check_dtype(DType::F32, "add dst")?;
        src.check_dtype(DType::F32, "add src")?;
        same_len("add", dst, src)?;
        if dst.is_empty() {
            return Ok(());
        }
        let n = dst.len();
        self.shared.dispatch(
            "add_f32",
            &[&src.buffer, &dst.buffer],
            &[],
            &[n as u32, 0, 0, 0],
            elementwise_groups(n),
        )
    }

    /// `t *= factor`, f32.
    pub fn scale(&self, t: &Tensor, factor: f32) -> Result<()> {
        t.check_on(&self.shared, "scale")?;
        t.check_dtype(DType::F32, "scale")?;
        if t.is_empty() {
            return Ok(());
        }
        let n = t.len();
        self.shared.dispatch(
            "scale_f32",
            &[&t.buffer],
            &[],
            &[n as u32, factor.to_bits(), 0, 0],
            elementwise_groups(n),
        )
    }

    /// `dst = f16(src)`: f32 → f16, round to nearest; beyond ±65504 saturates.
    pub fn convert_f32_to_f16(&self, src: &Tensor, dst: &Tensor) -> Result<()> {
        src.check_on(&self.shared, "convert src")?;
        dst.check_on(&self.shared, "convert dst")?;
        src.check_dtype(DType::F32, "convert src")?;
        dst.check_dtype(DType::F16, "convert dst")?;
        same_len("convert", dst, src)?;
        if src.is_empty() {
            return Ok(());
        }
        let n = src.len();
        self.shared.dispatch(
            "f32_to_f16",
            &[&src.buffer, &dst.buffer],
            &[],
            &[n as u32, 0, 0, 0],
            elementwise_groups(n.div_ceil(2)),
        )
    }

    /// `dst += f32(src)` with `src` f16 and `dst` f32.
    pub fn add_f16_into_f32(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        src.check_on(&self.shared, "add_f16 src")?;
        dst.check_on(&self.shared, "add_f16 dst")?;
        src.check_dtype(DType::F16, "add_f16 src")?;
        dst.check_dtype(DType::F32, "add_f16 dst")?;
        same_len("add_f16", dst, src)?;
        if dst.is_empty() {
            return Ok(());
        }
        let n = dst.len();
        self.shared.dispatch(
            "add_f16_into_f32",
            &[&src.buffer, &dst.buffer],
            &[],
            &[n as u32, 0, 0, 0],
            elementwise_groups(n),
        )
    }

    /// `y = W x` with `w` of shape `[rows, cols]` (f32 or f16, row-major), `x` f32 of `cols`
    /// elements and `y` f32 of `rows`.
    pub fn matvec(&self, w: &Tensor, x: &Tensor, y: &Tensor) -> Result<()> {
        self.matvec_impl(w, x, y, None)
    }

    /// `matvec` with f16 weights (`cols % 8 == 0`) through a named kernel, one of
    /// [`MATVEC_F16_KERNELS`]: for the benchmark and the tests that compare them.
    #[doc(hidden)]
    pub fn matvec_f16_with(&self, kernel: &str, w: &Tensor, x: &Tensor, y: &Tensor) -> Result<()> {
        let entry = MATVEC_F16_KERNELS
            .iter()
            .copied()
            .find(|k| *k == kernel)
            .ok_or_else(|| Error::InvalidArgument(format!("no f16 matvec kernel named {kernel}")))?;
        w.check_dtype(DType::F16, "matvec w")?;
        if w.shape().get(1).is_some_and(|c| c % 8 != 0) {
            return Err(Error::InvalidArgument(format!("{kernel} needs a multiple of 8 columns")));
        }
        self.matvec_impl(w, x, y, Some(entry))
    }

    fn matvec_impl(
        &self,
        w: &Tensor,
        x: &Tensor,
        y: &Tensor,
        f16_kernel: Option<&'static str>,
    ) -> Result<()> {
        for (t, what) in [(w, "matvec w"), (x, "matvec x"), (y, "matvec y")] {
            t.check_on(&self.shared, what)?;
        }
        x.check_dtype(DType::F32, "matvec x")?;
        y.check_dtype(DType::F32, "matvec y")?;
        let (rows, cols) = w.matrix_dims("matvec w")?;
        if x.len() != cols {
            return Err(Error::LengthMismatch {
                what: "matvec x vs w columns".into(),
                expected: cols,
                got: x.len(),
            });
        }
        if y.len() != rows {
            return Err(Error::LengthMismatch {
                what: "matvec y vs w rows".into(),
                expected: rows,
                got: y.len(),
            });
        }
        if y.id() == x.id() || y.id() == w.id() {
            return Err(Error::InvalidArgument(
                "matvec: y must not be the same tensor as x or w (rows read x while others write y)".into(),
            ));
        }
        if rows == 0 {
            return Ok(());
        }
        if cols == 0 {
            return self.fill(y, 0.0);
        }
        let entry = match w.dtype() {
            DType::F32 => "matvec_f32",
            DType::F16 => f16_kernel.unwrap_or(matvec_f16_kernel(cols)),
            DType::U32 => {
                return Err(Error::DtypeMismatch {
                    what: "matvec w".into(),
                    expected: DType::F16,
                    got: DType::U32,
                })
            }
        };
        self.matvec_dispatch(entry, w, x, y, rows, cols)
    }

    /// `matvec` whose output goes to `out` (a buffer range, such as a DevicePoll slot region)
    /// from word `at` on, instead of a tensor: `out` must hold `at + rows` words (checked by
    /// the caller, who owns the range). A member with no columns writes zeros.
    pub(crate) fn matvec_into(&self, w: &Tensor, x: &Tensor, out: BindRange<'_>, at: u64) -> Result<()> {
        w.check_on(&self.shared, "matvec w")?;
        x.check_on(&self.shared, "matvec x")?;
        x.check_dtype(DType::F32, "matvec x")?;
        let (rows, cols) = w.matrix_dims("matvec w")?;
        if x.len() != cols {
            return Err(Error::LengthMismatch {
                what: "matvec x vs w columns".into(),
                expected: cols,
                got: x.len(),
            });
        }
        if (at + rows as u64) * 4 > out.size || at + rows as u64 > u64::from(u32::MAX) {
            return Err(Error::InvalidArgument(format!(
                "matvec into a range of {} bytes from word {at}: {rows} rows do not fit",
                out.size
            )));
        }
        if rows == 0 {
            return Ok(());
        }
        if cols == 0 {
            return self.shared.dispatch_ranges(
                "fill_u32",
                &[out],
                &[],
                &[rows as u32, 0, at as u32, 0],
                elementwise_groups(rows),
            );
        }
        let entry = match w.dtype() {
            DType::F32 => "matvec_f32",
            DType::F16 => matvec_f16_kernel(cols),
            DType::U32 => {
                return Err(Error::DtypeMismatch {
                    what: "matvec w".into(),
                    expected: DType::F16,
                    got: DType::U32,
                })
            }
        };
        let row_blocks = rows.div_ceil(matvec_rows_per_workgroup(entry));
        self.shared.dispatch_ranges(
            entry,
            &[BindRange::whole(&w.buffer), BindRange::whole(&x.buffer), out],
            &[],
            &[rows as u32, cols as u32, at as u32, 0],
            row_groups(row_blocks),
        )
    }

    fn matvec_dispatch(
        &self,
        entry: &'static str,
        w: &Tensor,
        x: &Tensor,
        y: &Tensor,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        let bufs: [&dyn GpuBuffer; 3] = [&w.buffer, &x.buffer, &y.buffer];
        let row_blocks = rows.div_ceil(matvec_rows_per_workgroup(entry));
        self.shared.dispatch(entry, &bufs, &[], &[rows as u32, cols as u32, 0, 0], row_groups(row_blocks))
    }
}

/// One row per workgroup of 256 threads (kept as the benchmark's reference).
const MATVEC_F16_ONE_ROW: &str = "matvec_f16_vec8";
/// Four rows per workgroup, 64 threads per row.
const MATVEC_F16_FOUR_ROWS: &str = "matvec_f16_vec8_rows4";
/// Eight rows per workgroup, 32 threads per row.
const MATVEC_F16_EIGHT_ROWS: &str = "matvec_f16_vec8_rows8";
/// Columns from which [`matvec_f16_kernel`] picks eight rows per workgroup instead of four: with
/// fewer columns a row's 32 threads get too few 16-byte loads each, with more the eight rows'
/// shorter reduction wins (measured on the H200s: docs/BENCHMARKS.md, "Matrix–vector
/// products").
pub const MATVEC_F16_EIGHT_ROWS_FROM_COLS: usize = 8192;
/// The f16 matvec kernels for `cols % 8 == 0`, as [`Member::matvec_f16_with`] names them.
pub const MATVEC_F16_KERNELS: [&str; 3] = [MATVEC_F16_ONE_ROW, MATVEC_F16_FOUR_ROWS, MATVEC_F16_EIGHT_ROWS];

/// Rows one workgroup of `entry` computes.
fn matvec_rows_per_workgroup(entry: &str) -> usize {
    match entry {
        MATVEC_F16_FOUR_ROWS => 4,
        MATVEC_F16_EIGHT_ROWS => 8,
        _ => 1,
    }
}

/// The kernel `matvec` runs for f16 weights with `cols` columns: eight rows per workgroup from
/// [`MATVEC_F16_EIGHT_ROWS_FROM_COLS`] columns, four below, and the generic kernel when
/// `cols % 8 != 0`.
pub fn matvec_f16_kernel(cols: usize) -> &'static str {
    if !cols.is_multiple_of(8) {
        "matvec_f16"
    } else if cols >= MATVEC_F16_EIGHT_ROWS_FROM_COLS {
        MATVEC_F16_EIGHT_ROWS
    } else {
        MATVEC_F16_FOUR_ROWS
    }
}
