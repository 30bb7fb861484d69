//! The kernels as operations on a member's tensors: each checks its inputs (member, dtype,
//! length) and returns an error before recording anything, then records one dispatch into the
//! member's stream. `quant.rs` holds the products over ggml-quantized weights ([`QuantMatrix`]),
//! `quant_q8.rs` those of them that take x quantized to 8-bit blocks too ([`Q8Vector`]),
//! `matmul.rs` the prompt's products over many positions at once (every storage).

mod matmul;
mod quant;
mod quant_q8;

pub use quant::{QuantFormat, QuantMatrix};
pub use quant_q8::{Q8Vector, Q8_BLOCK_ELEMS, Q8_BLOCK_WORDS};

use vk_native::{BindRange, GpuBuffer};

use crate::error::{Error, Result};
use crate::group::Member;
use crate::kernels::{
    elementwise_groups, row_groups, AddParams, CopyParams, Entry, FillParams, MatvecParams, ScaleParams,
    ADD_F16_INTO_F32, ADD_F32, COPY_U32, F32_TO_F16, FILL_U32, MATVEC_F16, MATVEC_F16_VEC8,
    MATVEC_F16_VEC8_ROWS4, MATVEC_F16_VEC8_ROWS8, MATVEC_F16_VEC8_ROWS8_T2, MATVEC_F16_VEC8_ROWS8_T4,
    MATVEC_F16_VEC8_ROWS8_X4, MATVEC_F16_VEC8_ROWS8_X4_T2, MATVEC_F32, SCALE_F32,
};

use crate::tensor::{DType, Tensor};

/// `a + b`, or an error naming `what` when it overflows.
fn checked_add(what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_add(b).ok_or_else(|| Error::InvalidArgument(format!("{what}: {a} + {b} overflows")))
}

fn same_len(what: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.len() != b.len() {
        return Err(Error::LengthMismatch { what: what.into(), expected: a.len(), got: b.len() });
    }
    Ok(())
}

impl Member {
    /// Sets every element of `t` to `value` (f16 tensors get `value` rounded to f16 and
    /// saturated to ±65504, bf16 tensors it rounded to bf16, integer tensors `value as u32` or
    /// `as i32`).
    pub fn fill(&self, t: &Tensor, value: f32) -> Result<()> {
        t.check_on(&self.shared, "fill")?;
        let (words, bits) = match t.dtype() {
            DType::F32 => (t.len(), value.to_bits()),
            DType::U32 => (t.len(), value as u32),
            DType::I32 => (t.len(), value as i32 as u32),
            DType::F16 => {
                let h = crate::tensor::f16_saturating(value).to_bits() as u32;
                (t.len().div_ceil(2), h | (h << 16))
            }
            DType::BF16 => {
                let h = crate::tensor::bf16_rounded(value).to_bits() as u32;
                (t.len().div_ceil(2), h | (h << 16))
            }
        };
        if words == 0 {
            return Ok(());
        }
        self.shared.dispatch(
            FILL_U32,
            &[&t.buffer],
            &[],
            &FillParams { n: words as u32, value: bits, offset: 0 },
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
            COPY_U32,
            &[&src.buffer, &dst.buffer],
            &[],
            &CopyParams { n: w as u32, src_offset: 0, dst_offset: 0 },
            elementwise_groups(w),
        )
    }

    /// Copies `len` elements of `src` from `src_offset` to `dst` at `dst_offset` (same dtype,
    /// f32 or u32).
    pub fn copy_region(
        &self,
        src: &Tensor,
        src_offset: usize,
        dst: &Tensor,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        src.check_on(&self.shared, "copy_region src")?;
        dst.check_on(&self.shared, "copy_region dst")?;
        dst.check_dtype(src.dtype(), "copy_region")?;
        if src.dtype().is_half() {
            return Err(Error::DtypeMismatch {
                what: "copy_region (element offsets)".into(),
                expected: DType::F32,
                got: src.dtype(),
            });
        }
        let (src_end, dst_end) =
            (checked_add("copy_region", src_offset, len)?, checked_add("copy_region", dst_offset, len)?);
        if src_end > src.len() || dst_end > dst.len() {
            return Err(Error::LengthMismatch {
                what: "copy_region range".into(),
                expected: src.len().min(dst.len()),
                got: src_end.max(dst_end),
            });
        }
        if len == 0 {
            return Ok(());
        }
        let imm = CopyParams { n: len as u32, src_offset: src_offset as u32, dst_offset: dst_offset as u32 };
        self.shared.dispatch(COPY_U32, &[&src.buffer, &dst.buffer], &[], &imm, elementwise_groups(len))
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
            ADD_F32,
            &[&src.buffer, &dst.buffer],
            &[],
            &AddParams { n: n as u32 },
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
            SCALE_F32,
            &[&t.buffer],
            &[],
            &ScaleParams { n: n as u32, factor },
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
            F32_TO_F16,
            &[&src.buffer, &dst.buffer],
            &[],
            &CopyParams { n: n as u32, src_offset: 0, dst_offset: 0 },
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
            ADD_F16_INTO_F32,
            &[&src.buffer, &dst.buffer],
            &[],
            &AddParams { n: n as u32 },
            elementwise_groups(n),
        )
    }

    /// `y = W x` with `w` of shape `[rows, cols]` (f32 or f16, row-major), `x` f32 of `cols`
    /// elements and `y` f32 of `rows`.
    pub fn matvec(&self, w: &Tensor, x: &Tensor, y: &Tensor) -> Result<()> {
        self.matvec_impl(w, x, y, None, false)
    }

    /// `y += W x`, as [`Member::matvec`] checks and computes it: each row's sum, then added to
    /// the `y` it finds (the addition of [`Member::add`] after a `matvec`, so the same bits,
    /// with one dispatch and no vector between them): a residual add folded into the product
    /// before it, as a layer of one's own may want.
    pub fn matvec_accumulate(&self, w: &Tensor, x: &Tensor, y: &Tensor) -> Result<()> {
        self.matvec_impl(w, x, y, None, true)
    }

    /// `matvec` with f16 weights (`cols % 8 == 0`) through a named kernel, one of
    /// [`MATVEC_F16_KERNELS`]: for the benchmark and the tests that compare them.
    #[doc(hidden)]
    pub fn matvec_f16_with(&self, kernel: &str, w: &Tensor, x: &Tensor, y: &Tensor) -> Result<()> {
        let matvec = F16_VEC8
            .iter()
            .copied()
            .find(|k| k.entry.name() == kernel)
            .ok_or_else(|| Error::InvalidArgument(format!("no f16 matvec kernel named {kernel}")))?;
        w.check_dtype(DType::F16, "matvec w")?;
        if w.shape().get(1).is_some_and(|c| c % 8 != 0) {
            return Err(Error::InvalidArgument(format!("{kernel} needs a multiple of 8 columns")));
        }
        self.matvec_impl(w, x, y, Some(matvec), false)
    }

    fn matvec_impl(
        &self,
        w: &Tensor,
        x: &Tensor,
        y: &Tensor,
        f16_kernel: Option<Matvec>,
        accumulate: bool,
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
        if rows == 0 || (cols == 0 && accumulate) {
            return Ok(());
        }
        if cols == 0 {
            return self.fill(y, 0.0);
        }
        let matvec = match w.dtype() {
            DType::F32 => Matvec::F32,
            DType::F16 => f16_kernel.unwrap_or(f16_matvec(cols)),
            other @ (DType::U32 | DType::I32 | DType::BF16) => {
                return Err(Error::DtypeMismatch {
                    what: "matvec w".into(),
                    expected: DType::F16,
                    got: other,
                })
            }
        };
        let bufs: [&dyn GpuBuffer; 3] = [&w.buffer, &x.buffer, &y.buffer];
        let row_blocks = rows.div_ceil(matvec.rows_per_workgroup);
        let imm =
            MatvecParams { rows: rows as u32, cols: cols as u32, y_offset: 0, accumulate: accumulate.into() };
        self.shared.dispatch(matvec.entry, &bufs, &[], &imm, row_groups(row_blocks))
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
                FILL_U32,
                &[out],
                &[],
                &FillParams { n: rows as u32, value: 0, offset: at as u32 },
                elementwise_groups(rows),
            );
        }
        let matvec = match w.dtype() {
            DType::F32 => Matvec::F32,
            DType::F16 => f16_matvec(cols),
            other @ (DType::U32 | DType::I32 | DType::BF16) => {
                return Err(Error::DtypeMismatch {
                    what: "matvec w".into(),
                    expected: DType::F16,
                    got: other,
                })
            }
        };
        let row_blocks = rows.div_ceil(matvec.rows_per_workgroup);
        self.shared.dispatch_ranges(
            matvec.entry,
            &[BindRange::whole(&w.buffer), BindRange::whole(&x.buffer), out],
            &[],
            &MatvecParams { rows: rows as u32, cols: cols as u32, y_offset: at as u32, accumulate: 0 },
            row_groups(row_blocks),
        )
    }
}

/// A matrix–vector kernel (they share `MatvecParams`) and the rows one workgroup computes.
#[derive(Clone, Copy)]
struct Matvec {
    entry: Entry<MatvecParams>,
    rows_per_workgroup: usize,
}

impl Matvec {
    /// f32 weights, one row per workgroup.
    const F32: Self = Self { entry: MATVEC_F32, rows_per_workgroup: 1 };
    /// f16 weights with any number of columns, one row per workgroup.
    const F16_ANY_COLS: Self = Self { entry: MATVEC_F16, rows_per_workgroup: 1 };
}

/// The f16 kernels for `cols % 8 == 0`: one row per workgroup of 256 threads (kept as the
/// benchmark's reference), four rows of 64 threads, eight rows of 32 threads, eight rows with
/// four weight loads in flight per thread, and eight rows with each thread on two or four of
/// them, loading x once for them (all eight-row kernels add the same way, so their bits).
const F16_VEC8: [Matvec; 7] = [
    Matvec { entry: MATVEC_F16_VEC8, rows_per_workgroup: 1 },
    Matvec { entry: MATVEC_F16_VEC8_ROWS4, rows_per_workgroup: 4 },
    Matvec { entry: MATVEC_F16_VEC8_ROWS8, rows_per_workgroup: 8 },
    Matvec { entry: MATVEC_F16_VEC8_ROWS8_X4, rows_per_workgroup: 8 },
    Matvec { entry: MATVEC_F16_VEC8_ROWS8_T2, rows_per_workgroup: 8 },
    Matvec { entry: MATVEC_F16_VEC8_ROWS8_X4_T2, rows_per_workgroup: 8 },
    Matvec { entry: MATVEC_F16_VEC8_ROWS8_T4, rows_per_workgroup: 8 },
];

/// Columns from which [`matvec_f16_kernel`] picks eight rows per workgroup instead of four: with
/// fewer columns a row's 32 threads get too few 16-byte loads each, with more the eight rows'
/// shorter reduction wins (measured in the 27B-class decode on the H200, where the 5120-column
/// `o` product took 23.4 µs with eight rows against 26.2 with four: docs/BENCHMARKS.md,
/// "Matrix–vector products").
pub const MATVEC_F16_EIGHT_ROWS_FROM_COLS: usize = 4096;
/// Columns from which [`matvec_f16_kernel`] has each thread issue four weight loads per row before
/// it uses the first, on two rows at once sharing their x loads (`matvec_f16_vec8_rows8_x4_t2`):
/// the 17408-column `down` product of the 27B-class decode took 54.5 µs with four loads against
/// 57.7 (one H200), and 73.0 with two rows per thread against 75.0 (one H100); at 5120 columns
/// neither gained (two rows per thread: `o` 24.6 → 25.5 µs on the H100).
pub const MATVEC_F16_FOUR_LOADS_FROM_COLS: usize = 8192;
/// The f16 matvec kernels for `cols % 8 == 0`, as [`Member::matvec_f16_with`] names them.
pub const MATVEC_F16_KERNELS: [&str; F16_VEC8.len()] = {
    let mut names = [""; F16_VEC8.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = F16_VEC8[i].entry.name();
        i += 1;
    }
    names
};

/// The kernel `matvec` runs for f16 weights with `cols` columns: eight rows per workgroup from
/// [`MATVEC_F16_EIGHT_ROWS_FROM_COLS`] columns, four below; four loads in flight from
/// [`MATVEC_F16_FOUR_LOADS_FROM_COLS`]; the generic kernel when `cols % 8 != 0`.
fn f16_matvec(cols: usize) -> Matvec {
    if !cols.is_multiple_of(8) {
        Matvec::F16_ANY_COLS
    } else if cols >= MATVEC_F16_FOUR_LOADS_FROM_COLS {
        F16_VEC8[5]
    } else if cols >= MATVEC_F16_EIGHT_ROWS_FROM_COLS {
        F16_VEC8[2]
    } else {
        F16_VEC8[1]
    }
}

/// The name of the kernel `matvec` runs for f16 weights with `cols` columns (see
/// [`MATVEC_F16_EIGHT_ROWS_FROM_COLS`] and [`MATVEC_F16_FOUR_LOADS_FROM_COLS`]).
pub fn matvec_f16_kernel(cols: usize) -> &'static str {
    f16_matvec(cols).entry.name()
}
