//! The CPU twins of the kernels, one per kernel: every value computed in f64 from the exact
//! inputs, and beside it `e`, how far the GPU's f32 result may be from it, in one of two error
//! models (`ErrorModel`):
//!
//! - `Bound`: a rigorous worst-case bound for one kernel on exact inputs, `|got - v| <= e`
//!   (tests/tp_kernels.rs, tests/tp_linear.rs, tests/kernels.rs, the all-reduce tests). The
//!   inputs must carry no error (the functions check it).
//! - `StdDev`: the standard deviation of the GPU's deviation under the probabilistic model of
//!   rounding (Wilkinson; Higham & Mary, SIAM J. Sci. Comput. 41 (2019)): every f32 rounding a
//!   relative error of at most U, independent of the others and of mean zero, propagated op by
//!   op to first order, input deviations through each op's derivative (independent components
//!   in quadrature). This is what a whole model accumulates (tests/tp_model.rs).
//!
//! The arithmetic both start from (U = 2^-24, the unit roundoff of f32; one ULP of a normal f32
//! `v` is at most 2U·|v|):
//! - f32 `+ - *` are correctly rounded: one op is off by at most U relative;
//! - a dot product or sum of K terms (any order: tree, strided, fused or not) is off by at most
//!   `gamma_K · sum|terms|` with `gamma_K = K·U / (1 - K·U)` (Higham, *Accuracy and Stability
//!   of Numerical Algorithms*, §3.1); for terms of random sign each of its at most 2K roundings
//!   is ≤ U·|partial sum| with |partial sum| ≲ ||terms||_2, so its std is ≤ U·sqrt(2K)·||terms||_2;
//! - the built-ins carry the Vulkan precision requirements (Vulkan spec, "Precision and
//!   Operation of SPIR-V Instructions"): `a / b` 2.5 ULP, `inverseSqrt` 2 ULP, `exp`/`exp2`
//!   (3 + 2|x|) ULP, `log2` 3 ULP, `pow(b, e)` inherited from `exp2(e·log2 b)`, `sin`/`cos`
//!   2^-11 absolute; `StdDev` takes them at that worst case too;
//! - moves (embed, copy_region, kv_store, argmax/select, init_weights) must be exact, bit for
//!   bit: their twins give values only.
//!
//! `all_reduce` has its own bound (N - 1 f32 additions in member order), the same in every
//! test that checks an all-reduce.

use std::ops::Range;

use crossgpu::tp::init;
use crossgpu::tp::AttentionShape;

/// Unit roundoff of f32 (round to nearest).
pub const U: f64 = 1.0 / (1u64 << 24) as f64;

/// sin/cos absolute error: the Vulkan bound (2^-11), assumed to hold for the angles used here
/// after the implementation's range reduction.
pub const TRIG_ABS: f64 = 1.0 / 2048.0;

/// `gamma_K`: the error bound factor of a K-term f32 dot product or sum.
pub fn gamma(k: usize) -> f64 {
    let ku = k as f64 * U;
    ku / (1.0 - ku)
}

/// `v` widened exactly to f64.
pub fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Values computed in f64, each with its error estimate (see `ErrorModel`).
#[derive(Clone, Debug)]
pub struct Ev {
    pub v: Vec<f64>,
    pub e: Vec<f64>,
}

impl Ev {
    /// Exact values (no error).
    pub fn exact(v: Vec<f64>) -> Self {
        let e = vec![0.0; v.len()];
        Self { v, e }
    }

    /// Exact values, as the device holds them in f32.
    pub fn from_f32(v: &[f32]) -> Self {
        Self::exact(f64s(v))
    }

    /// (value, error) element by element.
    pub fn pairs(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.v.iter().copied().zip(self.e.iter().copied())
    }

    fn is_exact(&self) -> bool {
        self.e.iter().all(|&e| e == 0.0)
    }
}

/// Which error `Ev::e` carries (see the module comment).
#[derive(Clone, Copy, Debug)]
pub enum ErrorModel {
    /// A worst-case bound for one kernel on exact inputs. `extra`: further f32 additions of
    /// partial sums on top of a dot product's own K terms (an all-reduce's N - 1; or 1 to cover
    /// the f64 reference's own rounding, which is below U·Σ|terms| for K < 2^29).
    Bound { extra: usize },
    /// A standard deviation.
    StdDev {
        /// Independently rounded runs covered, as a factor on rounding std: 1 (one run vs the
        /// exact value) or sqrt(2) (one run vs another).
        r: f64,
        /// Include RoPE's sin/cos/pow error (only vs exact: two runs share it otherwise).
        trig: bool,
        /// N - 1, the additions an all-reduce over N members adds to a K-term sum.
        extra: usize,
    },
}

impl ErrorModel {
    /// The worst-case bound of one kernel, no extra additions.
    pub const BOUND: ErrorModel = ErrorModel::Bound { extra: 0 };
}

/// Checks that a worst-case bound is asked of exact inputs only (it is derived for them).
fn bound_inputs(what: &str, inputs: &[&Ev]) {
    assert!(
        inputs.iter().all(|x| x.is_exact()),
        "reference::{what}: ErrorModel::Bound is derived for exact inputs"
    );
}

/// A K-term dot product: (Σ a_k b_k, Σ |a_k b_k|), summed in order.
pub fn dot(a: &[f64], b: &[f64]) -> (f64, f64) {
    assert_eq!(a.len(), b.len(), "reference::dot: lengths");
    a.iter().zip(b).fold((0.0, 0.0), |(s, abs), (&x, &y)| (s + x * y, abs + (x * y).abs()))
}

/// `y = W x` for `W` [rows, x.len()] (row major, the exact values the device holds).
/// - Bound: `gamma_{K + extra}·Σ_k|W_rk x_k|` (K = x.len()).
/// - StdDev: `e_y[r]² = Σ_k W_rk² e_k² + r²U²(2K + 2·extra) Σ_k (W_rk x_k)²`.
pub fn matvec(w: &[f64], rows: usize, x: &Ev, m: ErrorModel) -> Ev {
    let cols = x.v.len();
    assert_eq!(w.len(), rows * cols, "reference::matvec: W is not [rows, x.len()]");
    let (mut v, mut e) = (vec![0.0; rows], vec![0.0; rows]);
    for r in 0..rows {
        let row = &w[r * cols..(r + 1) * cols];
        let (s, abs) = dot(row, &x.v);
        v[r] = s;
        e[r] = match m {
            ErrorModel::Bound { extra } => gamma(cols + extra) * abs,
            ErrorModel::StdDev { r: runs, extra, .. } => {
                let round = (runs * U).powi(2) * (2 * cols + 2 * extra) as f64;
                let (mut sq, mut p) = (0.0, 0.0);
                for ((&w, &xv), &xe) in row.iter().zip(&x.v).zip(&x.e) {
                    let t = w * xv;
                    sq += t * t;
                    p += (w * xe).powi(2);
                }
                (p + round * sq).sqrt()
            }
        };
    }
    if let ErrorModel::Bound { .. } = m {
        bound_inputs("matvec", &[x]);
    }
    Ev { v, e }
}

/// RMSNorm `y = x·s·w`, `s = (Σx²/n + eps)^-1/2`; `w: None` is unit weights (`·1.0` is exact).
/// - Rounding, worst case: the sum of squares is a K = n term dot product of positive terms, so
///   relative gamma_n; `/n` and `+eps` add U each; inverseSqrt halves that relative error and
///   adds 2 ULP ≤ 4U; `x·s` adds U and `·w` one more. With one more gamma step for second-order
///   terms: `|y|·(gamma_{n+1}/2 + 6U [+ U with weights])`. `StdDev` takes this worst case too
///   (it is tiny), times r.
/// - StdDev, through the derivative (`∂s/∂x_j = -s³x_j/n`): `(s w_i e_i)² + (x_i w_i (s³/n)
///   sqrt(Σ_j x_j² e_j²))²`, and the rounding in quadrature.
pub fn rmsnorm(x: &Ev, w: Option<&[f64]>, eps: f64, m: ErrorModel) -> Ev {
    let n = x.v.len();
    if let Some(w) = w {
        assert_eq!(w.len(), n, "reference::rmsnorm: weights");
    }
    let ss: f64 = x.v.iter().map(|v| v * v).sum();
    let s = 1.0 / (ss / n as f64 + eps).sqrt();
    let v: Vec<f64> = match w {
        Some(w) => x.v.iter().zip(w).map(|(xv, wv)| xv * s * wv).collect(),
        None => x.v.iter().map(|xv| xv * s).collect(),
    };
    // The single roundings after the sum of squares: 6U, and U more for `·w`.
    let singles = if w.is_some() { 7.0 } else { 6.0 };
    let rel = gamma(n + 1) / 2.0 + singles * U;
    let e = match m {
        ErrorModel::Bound { .. } => {
            bound_inputs("rmsnorm", &[x]);
            v.iter().map(|v| v.abs() * rel).collect()
        }
        ErrorModel::StdDev { r, .. } => {
            let rel = r * rel;
            let ds =
                s * s * s / n as f64 * x.v.iter().zip(&x.e).map(|(v, e)| (v * e).powi(2)).sum::<f64>().sqrt();
            (0..n)
                .map(|i| {
                    let wi = w.map_or(1.0, |w| w[i]);
                    ((s * x.e[i] * wi).powi(2) + (x.v[i] * ds * wi).powi(2) + (rel * v[i]).powi(2)).sqrt()
                })
                .collect()
        }
    };
    Ev { v, e }
}

/// `x + y`: one rounding, U|x + y|; StdDev: the deviations in quadrature, plus that rounding.
pub fn add(x: &Ev, y: &Ev, m: ErrorModel) -> Ev {
    assert_eq!(x.v.len(), y.v.len(), "reference::add: lengths");
    let v: Vec<f64> = x.v.iter().zip(&y.v).map(|(a, b)| a + b).collect();
    let e = match m {
        ErrorModel::Bound { .. } => {
            bound_inputs("add", &[x, y]);
            v.iter().map(|v| U * v.abs()).collect()
        }
        ErrorModel::StdDev { r, .. } => {
            (0..v.len()).map(|i| (x.e[i].powi(2) + y.e[i].powi(2) + (r * U * v[i]).powi(2)).sqrt()).collect()
        }
    };
    Ev { v, e }
}

/// `p + y` for a bounded `p` (a product within `p.e`, `ErrorModel::Bound`) and exact f32 `y`, as
/// a kernel adds its product to y in one rounding: within `p.e + gamma(1) (|p + y| + p.e)`.
pub fn add_to_bounded(p: &Ev, y: &[f32]) -> Ev {
    assert_eq!(p.v.len(), y.len(), "reference::add_to_bounded: lengths");
    let v: Vec<f64> = p.v.iter().zip(y).map(|(v, &y)| v + y as f64).collect();
    let e = p.e.iter().zip(&v).map(|(e, v)| e + gamma(1) * (v.abs() + e) + f64::MIN_POSITIVE).collect();
    Ev { v, e }
}

/// `silu(g) = g·σ(g) = g / (1 + exp(-g))`.
pub fn silu(g: f64) -> f64 {
    g / (1.0 + (-g).exp())
}

/// The relative rounding error of silu_mul's `a = g / (1 + exp(-g)) · u`: exp(-g) is within
/// (3 + 2|g|) ULP ≤ 2(3 + 2|g|)U relative; `1 + E` passes at most that relative error on
/// (E/(1+E) ≤ 1) and adds U; the division adds 2.5 ULP ≤ 5U, the product U.
pub fn silu_mul_rtol(g: f64) -> f64 {
    2.0 * (3.0 + 2.0 * g.abs()) * U + 7.0 * U
}

/// `a = silu(g)·u`. Bound: `|a|·silu_mul_rtol(g)`. StdDev: through the derivative
/// `σ(1 + g(1 - σ))·u·e_g` and `silu(g)·e_u`, and that rounding.
pub fn silu_mul(g: &Ev, u: &Ev, m: ErrorModel) -> Ev {
    let n = g.v.len();
    assert_eq!(u.v.len(), n, "reference::silu_mul: lengths");
    let (mut v, mut e) = (vec![0.0; n], vec![0.0; n]);
    for i in 0..n {
        let (gv, uv) = (g.v[i], u.v[i]);
        let silu = silu(gv);
        v[i] = silu * uv;
        e[i] = match m {
            ErrorModel::Bound { .. } => v[i].abs() * silu_mul_rtol(gv),
            ErrorModel::StdDev { r, .. } => {
                let sig = 1.0 / (1.0 + (-gv).exp());
                let dsilu = sig * (1.0 + gv * (1.0 - sig));
                let round = r * v[i].abs() * silu_mul_rtol(gv);
                ((dsilu * uv * g.e[i]).powi(2) + (silu * u.e[i]).powi(2) + round * round).sqrt()
            }
        };
    }
    if let ErrorModel::Bound { .. } = m {
        bound_inputs("silu_mul", &[g, u]);
    }
    Ev { v, e }
}

/// `a = silu(g)·u` from bounded `g` and `u` (each within its `e` of the exact value, as a
/// product kernel leaves them), as the fused gate/up kernels compute it: silu's slope is below
/// 1.1 everywhere, so `|a - a*| <= 1.1 e_g (|u| + e_u) + |silu(g)| e_u`, and the kernel's own
/// rounding (`silu_mul_rtol`) of a value at most that far from `a*`.
pub fn silu_mul_of_bounded(g: &Ev, u: &Ev) -> Ev {
    assert_eq!(g.v.len(), u.v.len(), "reference::silu_mul_of_bounded: lengths");
    let (mut v, mut e) = (Vec::with_capacity(g.v.len()), Vec::with_capacity(g.v.len()));
    for ((gv, eg), (uv, eu)) in g.pairs().zip(u.pairs()) {
        let silu = silu(gv);
        let a = silu * uv;
        let moved = 1.1 * eg * (uv.abs() + eu) + silu.abs() * eu;
        v.push(a);
        e.push(moved + silu_mul_rtol(gv.abs() + eg) * (a.abs() + moved) + f64::MIN_POSITIVE);
    }
    Ev { v, e }
}

/// `y = s·W(x∘w)` with `s = (Σx²/n + eps)^-1/2`: a product whose input is an RMSNorm left
/// pending, as the normed fused kernels compute it (each dot product reads `x·w`, rounded
/// once, sums its n terms and multiplies the sum by `s`). The sum of the rounded terms is
/// within `gamma_{n+1}·Σ|W x w|`; `s` within rmsnorm's `gamma_{n+1}/2 + 5U` relative (the sum of
/// squares, `/n`, `+eps`, inverseSqrt) and the product by it one U more, so
/// `|y - y*| <= s·gamma_{n+1}·Σ|W x w| + (gamma_{n+1}/2 + 6U)|y*|`, with one gamma step more for
/// the second-order terms. `x` and `w` exact (f32), `W` [rows, n] exact.
pub fn normed_matvec(w_mat: &[f64], rows: usize, x: &[f32], w: &[f32], eps: f64) -> Ev {
    let n = x.len();
    assert_eq!(w.len(), n, "reference::normed_matvec: norm weights");
    assert_eq!(w_mat.len(), rows * n, "reference::normed_matvec: W is not [rows, x.len()]");
    let xs = f64s(x);
    let ss: f64 = xs.iter().map(|v| v * v).sum();
    let s = 1.0 / (ss / n as f64 + eps).sqrt();
    let h: Vec<f64> = xs.iter().zip(w).map(|(&xv, &wv)| xv * wv as f64).collect();
    let rel = gamma(n + 1) / 2.0 + 6.0 * U;
    let (mut v, mut e) = (vec![0.0; rows], vec![0.0; rows]);
    for r in 0..rows {
        let (sum, abs) = dot(&w_mat[r * n..(r + 1) * n], &h);
        v[r] = s * sum;
        e[r] = (s * gamma(n + 1) * abs + rel * v[r].abs()) * (1.0 + gamma(n + 2)) + f64::MIN_POSITIVE;
    }
    Ev { v, e }
}

/// RoPE (as `rope`) of a bounded `x`: the rotation moves an input error by at most
/// `e_a + e_b` (|cos|, |sin| ≤ 1), and rounds and takes the angle's error on values at most
/// that far from the exact ones: `Bound`'s terms on `|a| + |b| + e_a + e_b`.
pub fn rope_of_bounded(x: &mut Ev, heads: usize, d: usize, pos: usize, base: f64) {
    assert_eq!(x.v.len(), heads * d, "reference::rope_of_bounded: length");
    let moved: Vec<f64> = (0..heads * d)
        .map(|i| {
            let (h, j) = (i / d, i % d % (d / 2));
            x.e[h * d + j] + x.e[h * d + j + d / 2]
        })
        .collect();
    let mut exact = Ev::exact(x.v.clone());
    rope(&mut exact, heads, d, pos, base, ErrorModel::BOUND);
    for (i, m) in moved.iter().enumerate() {
        let (h, j) = (i / d, i % d % (d / 2));
        let mag = x.v[h * d + j].abs() + x.v[h * d + j + d / 2].abs();
        // Bound's relative terms, taken from its error on the exact values, on the larger magnitude.
        let rel = if mag > 0.0 { exact.e[i] / mag } else { TRIG_ABS + 3.0 * U };
        x.v[i] = exact.v[i];
        x.e[i] = m + rel.max(TRIG_ABS + 3.0 * U) * (mag + m);
    }
}

/// The rotation angle's relative error bound for pair `i` of a `dim`-wide head: `-2i/dim`
/// rounds once (U relative on e, so ln2·U·|x| on pow with x = e·log2 b); pow = exp2(e·log2 b):
/// the product rounds (U), log2 is within 3 ULP ≤ 6U·|log2 b| (ln2·6U·|x| relative on the
/// result), exp2 within (3 + 2|x|) ULP; `pos·pow` adds U.
pub fn rope_theta_rel_error(i: usize, dim: usize, base: f64) -> f64 {
    // x = e·log2(base) with e = -2i/dim; pow(base, e) = exp2(x).
    let x = (2.0 * i as f64 / dim as f64) * base.log2();
    2.0 * (3.0 + 2.0 * x) * U + std::f64::consts::LN_2 * x * 8.0 * U + U
}

/// RoPE on `heads` heads of `d`, in place: pairs (i, i + d/2) rotated by θ_i =
/// pos·base^(-2i/d), `a' = a·c - b·s`, `b' = a·s + b·c`. The angle is within
/// `θ·rope_theta_rel_error` and sin/cos add 2^-11 each; the rotation rounds three times.
/// - Bound: `(|a| + |b|)(θ·ε_θ + 2^-11 + 3U)`.
/// - StdDev: through the rotation `(c e_a)² + (s e_b)²`, the three roundings `3r²U²(|a| +
///   |b|)²`, and with `trig` the angle and function error `(|a| + |b|)(θ·ε_θ + 2^-11)` added
///   linearly as a systematic error.
///
/// At pos 0 (θ = 0) the GPU's rotation is the identity, bit for bit (tests/tp_kernels.rs).
pub fn rope(x: &mut Ev, heads: usize, d: usize, pos: usize, base: f64, m: ErrorModel) {
    assert_eq!(x.v.len(), heads * d, "reference::rope: length");
    if let ErrorModel::Bound { .. } = m {
        bound_inputs("rope", &[x]);
    }
    let half = d / 2;
    for h in 0..heads {
        for i in 0..half {
            let (ia, ib) = (h * d + i, h * d + i + half);
            let (a, b, ea, eb) = (x.v[ia], x.v[ib], x.e[ia], x.e[ib]);
            let theta = pos as f64 * base.powf(-2.0 * i as f64 / d as f64);
            let (s, c) = theta.sin_cos();
            let mag = a.abs() + b.abs();
            x.v[ia] = a * c - b * s;
            x.v[ib] = a * s + b * c;
            match m {
                ErrorModel::Bound { .. } => {
                    let e = mag * (theta * rope_theta_rel_error(i, d, base) + TRIG_ABS + 3.0 * U);
                    x.e[ia] = e;
                    x.e[ib] = e;
                }
                ErrorModel::StdDev { r, trig, .. } => {
                    let round = (r * U * mag).powi(2) * 3.0;
                    let mut fun = 0.0;
                    if trig && pos > 0 {
                        fun = mag * (theta * rope_theta_rel_error(i, d, base) + TRIG_ABS);
                    }
                    x.e[ia] = ((c * ea).powi(2) + (s * eb).powi(2) + round).sqrt() + fun;
                    x.e[ib] = ((s * ea).powi(2) + (c * eb).powi(2) + round).sqrt() + fun;
                }
            }
        }
    }
}

/// Decode attention of `q` ([q_heads, d]) over caches [q_heads / group, max_seq, d], positions
/// 0..=pos, σ = 1/sqrt(d): scores `s_t = σ·q·k_t`, softmax weights p, `out_d = Σ_t p_t v_td`.
///
/// Bound. Scores: the dot is within gamma_d·Σ|q k|, σ is rounded twice on the host (sqrt,
/// divide) and the product once: `|δs_t| <= σ·gamma_d·Σ|q k| + 3U|s_t|`. A perturbation δs of
/// the scores moves the softmax weights by `|δp_t| <= p_t(|δs_t| + Σ_u p_u|δs_u|)`. The softmax
/// itself: `s_t - m` rounds (U|x_t|, x_t = s_t - m, relative on the exponential), exp is within
/// (3 + 2|x_t|) ULP, so each e_t is within `ε_t = U|x_t| + 2(3 + 2|x_t|)U` relative; the sum of
/// e's is within gamma_len (positive terms), as is the weighted sum of V; the reciprocal adds
/// 2.5 ULP ≤ 5U and the last product U. So `|out_d - out*_d| <= Σ_t p_t|v_td| (|δs_t| +
/// Σ_u p_u|δs_u| + ε_t + max ε + 2·gamma_len + 6U)`.
///
/// StdDev. Scores: through the inputs `σ²Σ_j(q_j² e_kj² + k_j² e_qj²)`; rounding
/// `σU sqrt(2d)||q∘k_t||_2 + 3U|s_t|` (the dot, σ's two host roundings, the product). A score
/// error δs_t moves the output by `p_t δs_t (v_td - v̄_d)` (v̄ = Σ_t p_t v_t; exactly zero for a
/// single position); each exponential's own error ε_t acts the same way; the normalising sum
/// rounds within `U sqrt(2 len)||p||_2` relative, the reciprocal 2.5 ULP, the last product U;
/// the weighted sum of V within `U sqrt(2 len)||p∘v_d||_2`.
pub fn attention(q: &Ev, kc: &Ev, vc: &Ev, shape: AttentionShape, m: ErrorModel) -> Ev {
    let (d, len, group, max_seq) = (shape.head_dim, shape.pos + 1, shape.group, shape.max_seq);
    assert_eq!(q.v.len(), shape.q_heads * d, "reference::attention: q");
    if let ErrorModel::Bound { .. } = m {
        bound_inputs("attention", &[q, kc, vc]);
    }
    let sigma = 1.0 / (d as f64).sqrt();
    let mut out = Ev::exact(vec![0.0; shape.q_heads * d]);
    for h in 0..shape.q_heads {
        let base = (h / group) * max_seq * d;
        let qb = h * d;
        // Scores, and their errors δs_t (Bound) or deviations (StdDev).
        let (mut s, mut ds) = (vec![0.0; len], vec![0.0; len]);
        for t in 0..len {
            let kb = base + t * d;
            let (mut dot, mut abs, mut sq, mut ein) = (0.0, 0.0, 0.0, 0.0);
            for j in 0..d {
                let (qv, kv) = (q.v[qb + j], kc.v[kb + j]);
                dot += qv * kv;
                abs += (qv * kv).abs();
                sq += (qv * kv).powi(2);
                ein += (qv * kc.e[kb + j]).powi(2) + (kv * q.e[qb + j]).powi(2);
            }
            s[t] = sigma * dot;
            ds[t] = match m {
                ErrorModel::Bound { .. } => sigma * gamma(d) * abs + 3.0 * U * s[t].abs(),
                ErrorModel::StdDev { r, .. } => {
                    let round = r * (sigma * U * ((2 * d) as f64 * sq).sqrt() + 3.0 * U * s[t].abs());
                    (sigma * sigma * ein + round * round).sqrt()
                }
            };
        }
        let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let ex: Vec<f64> = s.iter().map(|st| (st - mx).exp()).collect();
        let sum: f64 = ex.iter().sum();
        let p: Vec<f64> = ex.iter().map(|v| v / sum).collect();
        // Each exponential's own relative error.
        let eps: Vec<f64> = s
            .iter()
            .map(|st| {
                let x = (st - mx).abs();
                U * x + 2.0 * (3.0 + 2.0 * x) * U
            })
            .collect();
        let vj = |t: usize, j: usize| vc.v[base + t * d + j];
        match m {
            ErrorModel::Bound { .. } => {
                let eps_max = eps.iter().cloned().fold(0.0, f64::max);
                let spread: f64 = p.iter().zip(&ds).map(|(a, b)| a * b).sum();
                for j in 0..d {
                    let (mut o, mut b) = (0.0, 0.0);
                    for t in 0..len {
                        let v = vj(t, j);
                        o += p[t] * v;
                        b +=
                            p[t] * v.abs() * (ds[t] + spread + eps[t] + eps_max + 2.0 * gamma(len) + 6.0 * U);
                    }
                    out.v[qb + j] = o;
                    out.e[qb + j] = b;
                }
            }
            ErrorModel::StdDev { r, .. } => {
                let p2: f64 = p.iter().map(|v| v * v).sum();
                let norm_rel = r * (U * ((2 * len) as f64 * p2).sqrt() + 6.0 * U);
                for j in 0..d {
                    let vbar: f64 = (0..len).map(|t| p[t] * vj(t, j)).sum();
                    let (mut var, mut pv2) = (0.0, 0.0);
                    for t in 0..len {
                        let (v, ev) = (vj(t, j), vc.e[base + t * d + j]);
                        let et = r * eps[t];
                        var +=
                            (p[t] * ev).powi(2) + (p[t] * (v - vbar)).powi(2) * (ds[t].powi(2) + et.powi(2));
                        pv2 += (p[t] * v).powi(2);
                    }
                    var += (norm_rel * vbar).powi(2) + (r * U).powi(2) * (2 * len) as f64 * pv2;
                    out.v[qb + j] = vbar;
                    out.e[qb + j] = var.sqrt();
                }
            }
        }
    }
    out
}

/// What a member puts on the all-reduce's wire for `v`: itself, or on the f16 wire its f16
/// value, saturating at ±65504 (the conversion kernel's clamp; NaN stays NaN).
pub fn wire(v: f32, f16_wire: bool) -> f64 {
    if f16_wire {
        half::f16::from_f32(v.clamp(-65504.0, 65504.0)).to_f64()
    } else {
        v as f64
    }
}

/// all_reduce over N = `parts.len()` members, element by element: the f64 sum of the wire
/// values, members listed in `zero` contributing zeros. The GPU (or Generic's CPU loop) adds
/// the N values in f32 in member order: N - 1 roundings, each ≤ U of the running sum's
/// magnitude, itself ≤ Σ|x_j|, so `|got - want| <= (N-1)·U·Σ|x_j|`.
pub fn all_reduce(parts: &[impl AsRef<[f32]>], zero: &[usize], f16_wire: bool) -> Ev {
    let n = parts.first().map_or(0, |p| p.as_ref().len());
    let nm = parts.len() as f64;
    let contributing: Vec<&[f32]> =
        parts.iter().enumerate().filter(|(j, _)| !zero.contains(j)).map(|(_, p)| p.as_ref()).collect();
    let (mut v, mut e) = (vec![0.0; n], vec![0.0; n]);
    for i in 0..n {
        let (sum, mag) = contributing.iter().fold((0f64, 0f64), |(s, m), p| {
            let w = wire(p[i], f16_wire);
            (s + w, m + w.abs())
        });
        v[i] = sum;
        e[i] = (nm - 1.0) * U * mag;
    }
    Ev { v, e }
}

/// The greedy choice: the index of the largest value, the lowest among equal values (as the
/// kernels choose); `None` for an empty slice.
pub fn argmax<T: PartialOrd>(v: &[T]) -> Option<usize> {
    if v.is_empty() {
        return None;
    }
    let mut best = 0;
    for i in 1..v.len() {
        if v[i] > v[best] {
            best = i;
        }
    }
    Some(best)
}

/// The (value, index) pair argmax_pair must write: the largest value, the lowest index among
/// equal values, offset; an empty slice gives (-3.4e38, -1).
pub fn argmax_pair(v: &[f32], offset: usize) -> (f32, f32) {
    match argmax(v) {
        None => (-3.4e38, -1.0),
        Some(best) => (v[best], (best + offset) as f32),
    }
}

/// embed: row `token` of a [vocab, width] table (the values the device holds), tokens past the
/// end clamped to the last row.
pub fn embed<T>(table: &[T], width: usize, token: u32) -> &[T] {
    let rows = table.len() / width;
    let r = (token as usize).min(rows - 1);
    &table[r * width..(r + 1) * width]
}

/// kv_store into one cache [heads, max_seq, dim]: each head's row of `k` ([heads, dim]) lands
/// at `pos`.
pub fn kv_store<T: Copy>(k: &[T], cache: &mut [T], heads: usize, dim: usize, pos: usize, max_seq: usize) {
    assert_eq!(k.len(), heads * dim, "reference::kv_store: k");
    assert_eq!(cache.len(), heads * max_seq * dim, "reference::kv_store: cache");
    for h in 0..heads {
        let at = (h * max_seq + pos) * dim;
        cache[at..at + dim].copy_from_slice(&k[h * dim..(h + 1) * dim]);
    }
}

/// init_weights: rows `rows` × columns `cols` of the logical `[*, full_cols]` matrix the
/// library's CPU twin (`tp::init::weight`) defines.
pub fn init_weights(
    seed: u32,
    full_cols: usize,
    rows: Range<usize>,
    cols: Range<usize>,
    shift: u32,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows.len() * cols.len());
    for r in rows {
        for c in cols.clone() {
            out.push(init::weight(seed, (r * full_cols + c) as u32, shift));
        }
    }
    out
}

/// The whole `[rows, cols]` matrix init_weights draws, exactly (f64; values k·2^-shift are
/// exact in f16).
pub fn init_matrix(seed: u32, rows: usize, cols: usize, shift: u32) -> Vec<f64> {
    init_weights(seed, cols, 0..rows, 0..cols, shift).into_iter().map(f64::from).collect()
}
