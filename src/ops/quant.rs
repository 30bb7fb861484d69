//! Matrix–vector products over ggml-quantized weights, read on the device as GGUF stores them
//! and dequantized in registers: [`QuantMatrix`] (uploaded by [`Member::upload_quant`]) and
//! [`Member::matvec_quant`].
//!
//! # Layouts
//! A row of `cols` elements is `cols / block_elems` blocks, rows back to back; multi-byte fields
//! are little-endian, `f16` IEEE binary16 (ggml-common.h):
//!
//! - [`QuantFormat::Q8_0`], 32 elements in 34 bytes: `d: f16` at 0, `qs: [i8; 32]` at 2;
//!   element `j` is `qs[j] · d`.
//! - [`QuantFormat::Q4_0`], 32 elements in 18 bytes: `d: f16` at 0, `qs: [u8; 16]` at 2;
//!   element `j < 16` is the low nibble `q` of `qs[j]`, element `j + 16` its high nibble;
//!   value `(q - 8) · d`.
//! - [`QuantFormat::Q4_1`], 32 elements in 20 bytes: `d: f16` at 0, `m: f16` at 2, `qs: [u8; 16]`
//!   at 4, nibbles as in Q4_0; value `q · d + m`.
//! - [`QuantFormat::Q4_K`], 256 elements in 144 bytes: `d: f16` at 0, `dmin: f16` at 2,
//!   `scales: [u8; 12]` at 4 (eight 6-bit scales `sc` and mins `m`, packed as ggml's
//!   `get_scale_min_k4` reads them), `qs: [u8; 128]` at 16. Chunk `c` of 64 elements takes
//!   `qs[32c .. 32c + 32]`: low nibbles are elements `64c ..` (sub-block `2c`), high nibbles
//!   `64c + 32 ..` (sub-block `2c + 1`); value `d·sc·q - dmin·m`.
//! - [`QuantFormat::Q6_K`], 256 elements in 210 bytes: `ql: [u8; 128]` at 0, `qh: [u8; 64]` at
//!   128, `scales: [i8; 16]` at 192, `d: f16` at 208. Half `n` of 128 elements uses `ql[64n ..]`,
//!   `qh[32n ..]`, `scales[8n ..]`; for `l < 32`, elements `l, l + 32, l + 64, l + 96` are the
//!   low nibbles of `ql[l]`, `ql[l + 32]`, then their high nibbles, each with the next two bits
//!   of `qh[l]` on top; value `(q - 32) · d · scales[e / 16]`.
//! - [`QuantFormat::BF16`], bfloat16 as stored (Hugging Face checkpoints, ggml's BF16): the top
//!   16 bits of an f32 per element; the kernel takes rows in blocks of 8 elements (16 bytes), so
//!   every row starts on a word.
//!
//! Q8_0, Q4_0 and Q6_K blocks are an odd number of 16-bit halves long, so a block, and a row, may
//! start at byte 2 of a word: the kernels read whole 32-bit words from the one holding a
//! block's first byte and take fields that straddle two words by a funnel shift. The matrix is
//! held as one u32 tensor of the bytes, zero-padded to a whole word: the words a kernel reads
//! for a block end at most 2 bytes past it, in the next block or in that padding.
//!
//! # Kernels
//! Q8_0, Q4_0 and Q4_1 (`wgsl/matvec_q8_0_wide.wgsl`, `matvec_q4_0_wide.wgsl`,
//! `matvec_q4_1_wide.wgsl`, around `wgsl/include/matvec_quant_wide.wgsl`) are laid out as the
//! f16 kernels are: a workgroup of 256 invocations computes 4 rows, 64 invocations a row; an
//! invocation takes quarter blocks (8 elements: one or two words of quants and the block's
//! scale) `i, i + 64, …` of its row, two a trip so that both units' loads are in flight before
//! either is used, and accumulates in f32; each row's 64 partial sums meet in a tree in
//! workgroup memory. The others (`matvec_bf16.wgsl`, the two-row Q4_K/Q6_K kernels, and the
//! whole-block Q8_0/Q4_0/Q4_1 kernels, which a CPU device uses: about three times faster than
//! the wide ones on lavapipe), around
//! `wgsl/include/matvec_quant.wgsl`: a workgroup of 64 invocations computes 2 or 4 rows, each
//! invocation whole units of all of them, loading a unit's x once for those rows. Rows past
//! 65535 workgroups spill into the grid's y, as for the f16 kernels. Each product `w·x` is of
//! the weight exactly as ggml's `dequantize` gives it (scales factored out of a block only where
//! that is exact), so the result is within the usual dot-product bound `γ_cols · Σ_k |w_k x_k|`
//! of the exact product.
//!
//! On one H200 (2026-12-03, docs/BENCHMARKS.md "Quantized weights as stored"), the 27B-class
//! shape cut to 16 layers decodes from Q8_0, Q4_0 and Q4_1 files at 263, 292 and 290 tokens/s
//! with these kernels (201, 205 and 212 with the 64-invocation ones before them; the F16 preset
//! 249): far from the bytes' bound — a step before, Q8_0 and Q4_1 products took the same time
//! (33 µs on average) though Q8_0 reads 1.7 times the bytes, so the work per element, not
//! memory, limits them.
//!
//! What it must never do: read a byte outside the matrix's buffer, or accept bytes whose
//! length does not match the shape (the kernels index by block, so a short buffer would
//! silently read the next row).

use vk_native::{BindRange, DeviceType};

use crate::error::{Error, Result};
use crate::group::{FillRows, Member};
use crate::kernels::{
    elementwise_groups, row_groups, Entry, FillParams, MatvecParams, FILL_U32, MATVEC_BF16, MATVEC_Q4_0,
    MATVEC_Q4_0_WIDE, MATVEC_Q4_1, MATVEC_Q4_1_WIDE, MATVEC_Q4_K, MATVEC_Q6_K, MATVEC_Q8_0, MATVEC_Q8_0_WIDE,
};
use crate::tensor::{DType, Tensor, MAX_ELEMENTS};

/// Every quantized kernel: its format, entry point and rows per workgroup (`ROWS` in its
/// WGSL). The first of a format is the one [`Member::matvec_quant`] uses on a GPU (a CPU
/// device takes [`CPU_KERNELS`] where they have the format); the others are
/// measured beside it (`crossgpu bench matvec`) and checked like it. For Q8_0, Q4_0 and Q4_1 the
/// 256-invocation kernels (`_wide`) lead: in the decode of the 27B-class shape on one H200
/// (2026-12-03) they took Q8_0 from 201 to 263 tokens/s, Q4_0 from 205 to 292 and Q4_1 from 212
/// to 290 against the quarter-block kernels of 64 invocations at 4 rows (the default before);
/// 32 invocations a row, two rows an invocation, whole blocks an invocation, and conversions by
/// exponent bits instead of conversion instructions were each slower there. Q4_K and Q6_K keep
/// their 64-invocation kernels of 2 rows on every device: the same wide layout by 64-element
/// units (32 invocations a row, 8 rows a workgroup of 256) decoded a Q4_K_M file of that shape
/// at 39.1 tokens/s against their 85.5 on one H200 (2026-12-05, three processes each), and
/// was twice as slow on lavapipe too, so it was removed. With 8-bit inputs (the decoder's
/// default on a GPU, [`crate::tp::Decoder::set_q8_activations`]) the same file decodes at 273.
const KERNELS: [(QuantFormat, Entry<MatvecParams>, usize); 9] = [
    (QuantFormat::Q8_0, MATVEC_Q8_0_WIDE, 4),
    (QuantFormat::Q8_0, MATVEC_Q8_0, 2),
    (QuantFormat::Q4_0, MATVEC_Q4_0_WIDE, 4),
    (QuantFormat::Q4_0, MATVEC_Q4_0, 2),
    (QuantFormat::Q4_1, MATVEC_Q4_1_WIDE, 4),
    (QuantFormat::Q4_1, MATVEC_Q4_1, 2),
    (QuantFormat::Q4_K, MATVEC_Q4_K, 2),
    (QuantFormat::Q6_K, MATVEC_Q6_K, 2),
    (QuantFormat::BF16, MATVEC_BF16, 4),
];

/// On a CPU device (lavapipe) the whole-block 64-invocation kernels lead instead: llvmpipe runs
/// a workgroup's invocations as SIMD lanes of one thread, so the wide kernels' 256 invocations
/// and their tree in workgroup memory cost more than the loads they overlap. Measured with
/// `crossgpu bench matvec --adapter llvmpipe --matvec-shapes 1536x576,576x1536` (Mesa 22.3,
/// 2026-12-04): Q8_0 15.6 -> 5.8 ms and 6.4 -> 2.3 ms, Q4_0 15.4 -> 5.3 and 6.2 -> 2.2, Q4_1
/// 15.0 -> 5.2 and 6.2 -> 2.3 (wide -> whole-block); SmolLM2's decode on one lavapipe member
/// went from 2.2 to 0.8 s a token (`crossgpu decode --model … --profile 1`). Their formats and
/// rows per workgroup are [`KERNELS`]'.
const CPU_KERNELS: [Entry<MatvecParams>; 3] = [MATVEC_Q8_0, MATVEC_Q4_0, MATVEC_Q4_1];

/// A ggml block format with a GPU matrix–vector kernel (`model::quant::GgmlType::quant_format`
/// maps a GGUF tensor type onto it).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantFormat {
    /// 8-bit, 32 elements in 34 bytes: one f16 scale.
    Q8_0,
    /// 4-bit, 32 elements in 18 bytes: one f16 scale, values `q - 8`.
    Q4_0,
    /// 4-bit, 32 elements in 20 bytes: f16 scale and f16 min.
    Q4_1,
    /// 4-bit k-quant, 256 elements in 144 bytes: f16 scale and min, 6-bit sub-block scales and
    /// mins.
    Q4_K,
    /// 6-bit k-quant, 256 elements in 210 bytes: 8-bit scales per 16 elements, one f16 scale.
    Q6_K,
    /// bfloat16 as stored, read by the kernel in blocks of 8 elements (16 bytes): rows of a
    /// multiple of 8 columns.
    BF16,
}

impl QuantFormat {
    /// Every format, in the order of the enum.
    pub const ALL: [QuantFormat; 6] = [
        QuantFormat::Q8_0,
        QuantFormat::Q4_0,
        QuantFormat::Q4_1,
        QuantFormat::Q4_K,
        QuantFormat::Q6_K,
        QuantFormat::BF16,
    ];

    /// Elements per block.
    pub const fn block_elems(self) -> usize {
        match self {
            Self::Q8_0 | Self::Q4_0 | Self::Q4_1 => 32,
            Self::Q4_K | Self::Q6_K => 256,
            Self::BF16 => 8,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Q8_0 => 34,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q4_K => 144,
            Self::Q6_K => 210,
            Self::BF16 => 16,
        }
    }

    /// Bytes of a row of `cols` elements, or `None` when `cols` is not a whole number of blocks
    /// or the size overflows.
    pub fn row_bytes(self, cols: usize) -> Option<usize> {
        if !cols.is_multiple_of(self.block_elems()) {
            return None;
        }
        (cols / self.block_elems()).checked_mul(self.block_bytes())
    }

    /// ggml's name for it (`"Q4_1"`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Q8_0 => "Q8_0",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q4_K => "Q4_K",
            Self::Q6_K => "Q6_K",
            Self::BF16 => "BF16",
        }
    }

    /// The kernel on a device of type `device` and the rows one of its workgroups computes
    /// (`ROWS` in its WGSL): [`CPU_KERNELS`] first on a CPU device, else the first of
    /// [`KERNELS`].
    fn kernel(self, device: DeviceType) -> (Entry<MatvecParams>, usize) {
        let of_format = || KERNELS.into_iter().filter(move |k| k.0 == self);
        let for_cpu = |k: &(QuantFormat, Entry<MatvecParams>, usize)| {
            device == DeviceType::Cpu && CPU_KERNELS.iter().any(|c| c.name() == k.1.name())
        };
        let (_, entry, rows) =
            of_format().find(for_cpu).or_else(|| of_format().next()).expect("every format has a kernel");
        (entry, rows)
    }

    /// The names of every kernel of this format, the one a GPU uses first (for the benchmark
    /// and the tests that compare them: [`Member::matvec_quant_with`]).
    pub fn kernel_names(self) -> Vec<&'static str> {
        KERNELS.iter().filter(|k| k.0 == self).map(|k| k.1.name()).collect()
    }

    /// The entry point name of the kernel [`Member::matvec_quant`] uses on a device of type
    /// `device` (`"matvec_q4_1_wide"` on a GPU, `"matvec_q4_1"` on a CPU device), for
    /// benchmarks and profiles.
    pub fn kernel_name(self, device: DeviceType) -> &'static str {
        self.kernel(device).0.name()
    }
}

impl std::fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A quantized `[rows, cols]` matrix on one member: the GGUF tensor's bytes (row-major blocks
/// of [`QuantMatrix::format`]) in a u32 tensor, zero-padded to a whole word. Made by
/// [`Member::upload_quant`]; dropping it frees the buffer once the work using it has finished.
pub struct QuantMatrix {
    tensor: Tensor,
    format: QuantFormat,
    rows: usize,
    cols: usize,
}

impl std::fmt::Debug for QuantMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantMatrix")
            .field("member", &self.tensor.member_index())
            .field("format", &self.format)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish()
    }
}

impl QuantMatrix {
    /// The block format.
    pub fn format(&self) -> QuantFormat {
        self.format
    }

    /// Rows (outputs of a product).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (inputs of a product), a whole number of blocks.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The u32 tensor holding the bytes (`bytes()` of them, then zeros to a whole word).
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    /// The member that holds it.
    pub fn member_index(&self) -> usize {
        self.tensor.member_index()
    }

    /// Bytes of the blocks: `rows · format.row_bytes(cols)`.
    pub fn bytes(&self) -> usize {
        // The product checked at upload.
        self.rows * (self.cols / self.format.block_elems() * self.format.block_bytes())
    }
}

impl Member {
    /// Uploads a `[rows, cols]` matrix of `format` from `bytes`, its blocks as GGUF stores them
    /// (row-major, rows back to back: e.g. a tensor's range of a memory-mapped file). `cols`
    /// must be a whole number of blocks and `bytes.len()` exactly `rows · row_bytes(cols)`; the
    /// bytes go from the slice to a staging buffer and from there to the device (no other copy).
    pub fn upload_quant(
        &self,
        format: QuantFormat,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<QuantMatrix> {
        // The shape itself is checked by `upload_quant_with`, before `fill` runs.
        let row_bytes = format.row_bytes(cols).unwrap_or(0);
        if let Some(need) = format.row_bytes(cols).and_then(|b| rows.checked_mul(b)) {
            if bytes.len() != need {
                return Err(Error::LengthMismatch {
                    what: format!(
                        "upload_quant bytes of a [{rows}, {cols}] {format} matrix ({row_bytes} per row)"
                    ),
                    expected: need,
                    got: bytes.len(),
                });
            }
        }
        self.upload_quant_with(format, rows, cols, &mut |r, dst| {
            dst.copy_from_slice(&bytes[r.start * row_bytes..r.end * row_bytes]);
            Ok(())
        })
    }

    /// [`Member::upload_quant`] with the bytes written by `fill(rows, dst)` straight into
    /// staging memory, a run of rows at a time (a checkpoint reader reads the file into `dst`).
    pub(crate) fn upload_quant_with(
        &self,
        format: QuantFormat,
        rows: usize,
        cols: usize,
        fill: &mut FillRows<'_>,
    ) -> Result<QuantMatrix> {
        let row_bytes = format.row_bytes(cols).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "upload_quant: {cols} columns are not a whole number of {format} blocks of {} elements",
                format.block_elems()
            ))
        })?;
        if rows > MAX_ELEMENTS || cols > MAX_ELEMENTS {
            return Err(Error::Unsupported(format!(
                "upload_quant: a [{rows}, {cols}] matrix: rows and columns are at most {MAX_ELEMENTS} (kernels index with 32-bit integers)"
            )));
        }
        let need = rows.checked_mul(row_bytes).ok_or_else(|| {
            Error::InvalidArgument(format!("upload_quant: {rows} rows of {row_bytes} bytes overflow"))
        })?;
        let words = need.div_ceil(4);
        // Refused past maxStorageBufferRange or MAX_ELEMENTS words, before anything is recorded.
        let tensor = self.empty(&[words], DType::U32)?;
        self.shared.upload_rows(&tensor.buffer, rows, row_bytes, words * 4 - need, fill)?;
        Ok(QuantMatrix { tensor, format, rows, cols })
    }

    /// `y = W x` with `w` quantized `[rows, cols]`, `x` f32 of `cols` elements and `y` f32 of
    /// `rows` (overwritten). All checked (member, dtypes, lengths, `y` not `x`) before one
    /// dispatch is recorded.
    pub fn matvec_quant(&self, w: &QuantMatrix, x: &Tensor, y: &Tensor) -> Result<()> {
        self.matvec_quant_with(w.format.kernel_name(self.adapter().device_type), w, x, y)
    }

    /// `y += W x`, as [`Member::matvec_quant`] checks and computes it: each row's sum, then
    /// added to the `y` it finds (the bits of `matvec_quant` followed by [`Member::add`]).
    pub fn matvec_quant_accumulate(&self, w: &QuantMatrix, x: &Tensor, y: &Tensor) -> Result<()> {
        self.matvec_quant_accumulate_with(w.format.kernel_name(self.adapter().device_type), w, x, y)
    }

    /// [`Member::matvec_quant_accumulate`] through the kernel named `kernel`, as
    /// [`Member::matvec_quant_with`]: for the tests.
    #[doc(hidden)]
    pub fn matvec_quant_accumulate_with(
        &self,
        kernel: &str,
        w: &QuantMatrix,
        x: &Tensor,
        y: &Tensor,
    ) -> Result<()> {
        self.matvec_quant_named(kernel, w, x, y, true)
    }

    /// [`Member::matvec_quant`] through the kernel named `kernel`, one of
    /// [`QuantFormat::kernel_names`] of `w`'s format: for the benchmark and the tests.
    #[doc(hidden)]
    pub fn matvec_quant_with(&self, kernel: &str, w: &QuantMatrix, x: &Tensor, y: &Tensor) -> Result<()> {
        self.matvec_quant_named(kernel, w, x, y, false)
    }

    fn matvec_quant_named(
        &self,
        kernel: &str,
        w: &QuantMatrix,
        x: &Tensor,
        y: &Tensor,
        accumulate: bool,
    ) -> Result<()> {
        let (_, entry, rows_per_workgroup) = KERNELS
            .into_iter()
            .find(|k| k.0 == w.format && k.1.name() == kernel)
            .ok_or_else(|| Error::InvalidArgument(format!("no {} matvec kernel named {kernel}", w.format)))?;
        self.check_product_y("matvec_quant y", w, y)?;
        self.matvec_quant_checked(w, x, y, 0, (entry, rows_per_workgroup), accumulate)
    }

    /// Checks that `y` can take `w`'s whole product: f32 on this member, `w.rows` long
    /// (`what` names it in the error: "matvec_quant y").
    pub(super) fn check_product_y(&self, what: &str, w: &QuantMatrix, y: &Tensor) -> Result<()> {
        y.check_on(&self.shared, what)?;
        y.check_dtype(DType::F32, what)?;
        if y.len() != w.rows {
            return Err(Error::LengthMismatch {
                what: format!("{what} vs w rows"),
                expected: w.rows,
                got: y.len(),
            });
        }
        Ok(())
    }

    /// [`Member::matvec_quant`] into `y[y_offset .. y_offset + rows]`, leaving the rest of `y`
    /// as it was (as the decoder writes a member's rows into its slot of a wider vector).
    pub fn matvec_quant_at(&self, w: &QuantMatrix, x: &Tensor, y: &Tensor, y_offset: usize) -> Result<()> {
        self.matvec_quant_checked(w, x, y, y_offset, w.format.kernel(self.adapter().device_type), false)
    }

    fn matvec_quant_checked(
        &self,
        w: &QuantMatrix,
        x: &Tensor,
        y: &Tensor,
        y_offset: usize,
        kernel: (Entry<MatvecParams>, usize),
        accumulate: bool,
    ) -> Result<()> {
        y.check_on(&self.shared, "matvec_quant y")?;
        y.check_dtype(DType::F32, "matvec_quant y")?;
        let end = y_offset.saturating_add(w.rows);
        if end > y.len() {
            return Err(Error::LengthMismatch {
                what: format!("matvec_quant y (rows {y_offset}..{end} of the result)"),
                expected: end,
                got: y.len(),
            });
        }
        if y.id() == x.id() {
            return Err(Error::InvalidArgument(
                "matvec_quant: y must not be the same tensor as x (rows read x while others write y)".into(),
            ));
        }
        self.matvec_quant_into_with(w, x, BindRange::whole(&y.buffer), y_offset as u64, kernel, accumulate)
    }

    /// `matvec_quant` whose output goes to `out` (a buffer range, such as a DevicePoll slot
    /// region) from word `at` on: `out` must hold `at + rows` words (checked here). A matrix
    /// of no columns writes zeros.
    pub(crate) fn matvec_quant_into(
        &self,
        w: &QuantMatrix,
        x: &Tensor,
        out: BindRange<'_>,
        at: u64,
    ) -> Result<()> {
        self.matvec_quant_into_with(w, x, out, at, w.format.kernel(self.adapter().device_type), false)
    }

    fn matvec_quant_into_with(
        &self,
        w: &QuantMatrix,
        x: &Tensor,
        out: BindRange<'_>,
        at: u64,
        kernel: (Entry<MatvecParams>, usize),
        accumulate: bool,
    ) -> Result<()> {
        w.tensor.check_on(&self.shared, "matvec_quant w")?;
        x.check_on(&self.shared, "matvec_quant x")?;
        x.check_dtype(DType::F32, "matvec_quant x")?;
        if x.len() != w.cols {
            return Err(Error::LengthMismatch {
                what: "matvec_quant x vs w columns".into(),
                expected: w.cols,
                got: x.len(),
            });
        }
        self.quant_product(w, BindRange::whole(&x.buffer), out, at, kernel, accumulate)
    }

    /// Records `w`'s product with the x bound at `x` (f32, or 8-bit blocks for the `_q8`
    /// kernels: the caller checked it against `w`) into words `at..` of `out`, checked to hold
    /// them. A matrix of no columns writes zeros (or, accumulating, nothing).
    pub(super) fn quant_product(
        &self,
        w: &QuantMatrix,
        x: BindRange<'_>,
        out: BindRange<'_>,
        at: u64,
        (entry, rows_per_workgroup): (Entry<MatvecParams>, usize),
        accumulate: bool,
    ) -> Result<()> {
        let (rows, cols) = (w.rows, w.cols);
        let end = at.saturating_add(rows as u64);
        if end.saturating_mul(4) > out.size || end > u64::from(u32::MAX) {
            return Err(Error::InvalidArgument(format!(
                "matvec_quant into a range of {} bytes from word {at}: {rows} rows do not fit",
                out.size
            )));
        }
        if rows == 0 || (cols == 0 && accumulate) {
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
        let imm = MatvecParams {
            rows: rows as u32,
            cols: cols as u32,
            y_offset: at as u32,
            accumulate: accumulate.into(),
        };
        let ranges = [BindRange::whole(&w.tensor.buffer), x, out];
        self.shared.dispatch_ranges(entry, &ranges, &[], &imm, row_groups(rows.div_ceil(rows_per_workgroup)))
    }
}
