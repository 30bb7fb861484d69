//! Tensor parallelism, part 2: the decoder (`crossgpu::tp::Decoder`) over 1, 2 and 3 logical
//! devices on lavapipe, even and weighted splits (one with a member that gets nothing), against
//! a CPU reference of the whole model computed in f64, with the validation layer on.
//!
//! The model is `DecoderConfig::small()` (hidden 256, FFN 640, 8 query and 4 KV heads of 32)
//! with the vocabulary cut to 500 entries (8 units of 64, the last partial, so every split cuts
//! it unevenly) and the KV cache to 40 positions. Measured on this machine (2 cores, lavapipe,
//! validation on), one decode step takes ~0.27 s with 2 layers and ~0.16 s with 1 (the
//! matrix–vector products dominate), so the step-by-step test runs the 2 layers of `small()`
//! for `STEPWISE_STEPS` steps and the five 20-step `generate` runs use 1 layer. On top of that,
//! the validation layer's `UNASSIGNED-VkSemaphore-state-timeout` self-diagnosis (suppressed by
//! tests/common) blocks for ~10 s each time it fires, which here is on roughly 1% of the
//! HostBridge all-reduce rounds, so the runtime varies from run to run.
//!
//! ## The reference and its tolerances
//! `CpuDecoder` recomputes every step in f64 from the exact weights (`tp::init::weight` with
//! the seeds `tp::init::matrix_seed` gives model.rs: ids 1..7 per layer, 8 the vocabulary and 9
//! the embedding, which uses shift 10; the norm weights are 1.0). Alongside every value it
//! carries `e`, the standard deviation of the GPU's deviation from it under the usual
//! probabilistic model of rounding (Wilkinson; Higham & Mary, SIAM J. Sci. Comput. 41 (2019)):
//! every f32 rounding is a relative error of at most U = 2^-24, independent of the others and
//! of mean zero. Propagated op by op to first order:
//! - input errors through each op's derivative, independent components adding in quadrature;
//! - a K-term dot product's own rounding: at most 2K roundings (products, sums, plus the
//!   all-reduce's N - 1 additions), each ≤ U·|partial sum| with |partial sum| ≲ ||terms||_2 for
//!   terms of random sign, so std ≤ U·sqrt(2K + 2(N-1))·||terms||_2. (The worst case,
//!   gamma_K·Σ|terms| with every input error aligned with the weights, grows by the row sums
//!   Σ|W| ≈ 16–20 at every product of this model and no longer says anything after a layer.)
//! - single roundings U·|result|; the built-ins at their Vulkan precision taken as the worst
//!   case (`/` 2.5 ULP, inverseSqrt 2 ULP, exp (3 + 2|x|) ULP, one ULP ≤ 2U relative), and
//!   RoPE's sin/cos/pow at the worst-case bound (2^-11 absolute for sin/cos), added linearly
//!   as a systematic error.
//!
//! The propagation is each kernel's CPU twin in `tests/common/reference.rs`
//! (`ErrorModel::StdDev`), where every kernel's error terms are derived; the worst-case bounds
//! the kernel tests check come from the same functions.
//!
//! A check passes when `|got - want| <= LAMBDA·e` with LAMBDA = 10: ten standard deviations (a
//! Gaussian tail of 1.5e-23), the room beyond a few covering the model's approximations.
//!
//! Two deviations are propagated:
//! - vs exact (`VS_EXACT`): one GPU run against the f64 value;
//! - 1 vs N (`ONE_VS_N`): two GPU runs of the same model on different splits against each
//!   other. Their only differences come from the row-parallel products (attention output, MLP
//!   down), which sum their K terms in another order (partials of K_i terms, then the
//!   all-reduce's N - 1 additions); everything downstream then rounds slightly different
//!   values. Two independent runs: every rounding term counts sqrt(2) times. RoPE's angles
//!   depend only on the position, so both runs use the very same sin/cos/pow values and their
//!   (comparatively large) function error cancels: it is left out.

use crate::common;

use std::sync::OnceLock;

use crate::common::reference::{self, ErrorModel, Ev};
use crate::common::serial;
use crossgpu::tp::AttentionShape;
use crossgpu::tp::{init, Decoder, DecoderConfig, SplitSpec};
use crossgpu::{Comm, CommOptions, Member, ModeRequest};

/// Tolerance in standard deviations of the modelled rounding error.
const LAMBDA: f64 = 10.0;
/// Steps of the step-by-step test (2 layers).
const STEPWISE_STEPS: usize = 12;
/// Steps of every `generate` run (1 layer); attention's later passes over positions (past 32
/// scores, past 128 of V at this head width) are `tp_kernels::attention_whole_and_split_match_f64_reference`'s.
const STEPS: usize = 20;
/// The first token fed to every run.
const FIRST: u32 = 1;

/// The model under test (see the file comment) with `layers` layers (1 or 2).
fn config(layers: usize) -> DecoderConfig {
    DecoderConfig { layers, vocab: 500, max_seq: 40, ..DecoderConfig::small() }
}

// ---------------------------------------------------------------------------------------------
// CPU reference with error estimates
// ---------------------------------------------------------------------------------------------

/// The two deviations propagated (see the file comment), with `extra = 2`: the all-reduce over
/// N ≤ 3 members adds N - 1 additions to a K-term sum.
const VS_EXACT: ErrorModel = ErrorModel::StdDev { r: 1.0, trig: true, extra: 2 };
const ONE_VS_N: ErrorModel = ErrorModel::StdDev { r: std::f64::consts::SQRT_2, trig: false, extra: 2 };

/// A weight matrix, exactly as the device holds it (values k·2^-shift are exact in f16).
struct Mat {
    rows: usize,
    cols: usize,
    w: Vec<f64>,
}

impl Mat {
    fn new(seed: u32, rows: usize, cols: usize, shift: u32) -> Self {
        Self { rows, cols, w: reference::init_matrix(seed, rows, cols, shift) }
    }

    /// `y = W x` (`reference::matvec`; the column-parallel products get the all-reduce's
    /// additions too, conservatively).
    fn apply(&self, x: &Ev, m: ErrorModel) -> Ev {
        assert_eq!(x.v.len(), self.cols);
        reference::matvec(&self.w, self.rows, x, m)
    }
}

struct LayerWeights {
    q: Mat,
    k: Mat,
    v: Mat,
    o: Mat,
    gate: Mat,
    up: Mat,
    down: Mat,
}

struct Weights {
    layers: Vec<LayerWeights>,
    vocab: Mat,
    embed: Mat,
}

/// The weights of the 2-layer model, drawn as model.rs draws them on the devices; the 1-layer
/// model is its first layer with the same vocabulary and embedding (the seeds depend only on
/// the layer index and the matrix id).
fn weights() -> &'static Weights {
    static W: OnceLock<Weights> = OnceLock::new();
    W.get_or_init(|| {
        let c = config(2);
        let (h, f, d) = (c.hidden, c.ffn, c.head_dim);
        let (qd, kvd) = (c.q_heads * d, c.kv_heads * d);
        let s_h = init::shift_for_fan_in(h);
        let layers = (0..c.layers)
            .map(|l| {
                let seed = |id| init::matrix_seed(c.seed, l, id);
                LayerWeights {
                    q: Mat::new(seed(1), qd, h, s_h),
                    k: Mat::new(seed(2), kvd, h, s_h),
                    v: Mat::new(seed(3), kvd, h, s_h),
                    o: Mat::new(seed(4), h, qd, init::shift_for_fan_in(qd)),
                    gate: Mat::new(seed(5), f, h, s_h),
                    up: Mat::new(seed(6), f, h, s_h),
                    down: Mat::new(seed(7), h, f, init::shift_for_fan_in(f)),
                }
            })
            .collect();
        Weights {
            layers,
            vocab: Mat::new(init::matrix_seed(c.seed, usize::MAX, 8), c.vocab, h, s_h),
            embed: Mat::new(init::matrix_seed(c.seed, usize::MAX, 9), c.vocab, h, 10),
        }
    })
}

/// The decoder on the CPU, one deviation mode.
struct CpuDecoder {
    cfg: DecoderConfig,
    mode: ErrorModel,
    k_cache: Vec<Ev>,
    v_cache: Vec<Ev>,
    pos: usize,
}

impl CpuDecoder {
    fn new(cfg: DecoderConfig, mode: ErrorModel) -> Self {
        let n = cfg.kv_heads * cfg.max_seq * cfg.head_dim;
        let caches = || (0..cfg.layers).map(|_| Ev::exact(vec![0.0; n])).collect::<Vec<_>>();
        Self { k_cache: caches(), v_cache: caches(), cfg, mode, pos: 0 }
    }

    /// One decode step of `token`: (logits, the residual stream after the last layer), each
    /// with its tolerance `LAMBDA·e` in `e`.
    fn step(&mut self, token: u32) -> (Ev, Ev) {
        let (w, c, m, pos) = (weights(), self.cfg.clone(), self.mode, self.pos);
        let (d, eps, base) = (c.head_dim, c.eps as f64, c.rope_base as f64);
        let mut x = Ev::exact(reference::embed(&w.embed.w, c.hidden, token).to_vec());
        let shape = AttentionShape {
            q_heads: c.q_heads,
            group: c.q_heads / c.kv_heads,
            head_dim: d,
            pos,
            max_seq: c.max_seq,
        };
        for (l, lw) in w.layers.iter().take(c.layers).enumerate() {
            let h = reference::rmsnorm(&x, None, eps, m);
            let mut q = lw.q.apply(&h, m);
            let mut k = lw.k.apply(&h, m);
            let v = lw.v.apply(&h, m);
            reference::rope(&mut q, c.q_heads, d, pos, base, m);
            reference::rope(&mut k, c.kv_heads, d, pos, base, m);
            let (kc, vc) = (&mut self.k_cache[l], &mut self.v_cache[l]);
            for (new, cache) in [(&k.v, &mut kc.v), (&k.e, &mut kc.e), (&v.v, &mut vc.v), (&v.e, &mut vc.e)] {
                reference::kv_store(new, cache, c.kv_heads, d, pos, c.max_seq);
            }
            let attn = reference::attention(&q, &self.k_cache[l], &self.v_cache[l], shape, m);
            x = reference::add(&x, &lw.o.apply(&attn, m), m);
            let h = reference::rmsnorm(&x, None, eps, m);
            let a = reference::silu_mul(&lw.gate.apply(&h, m), &lw.up.apply(&h, m), m);
            x = reference::add(&x, &lw.down.apply(&a, m), m);
        }
        let logits = w.vocab.apply(&reference::rmsnorm(&x, None, eps, m), m);
        self.pos += 1;
        let tolerance = |mut t: Ev| {
            t.e.iter_mut().for_each(|e| *e *= LAMBDA);
            t
        };
        (tolerance(logits), tolerance(x))
    }
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// The greedy choice: largest value, lowest index among equals (as the kernels choose).
fn argmax(v: &[f32]) -> u32 {
    reference::argmax(v).expect("logits") as u32
}

/// Asserts `|got - want.v| <= want.e` (the tolerance) elementwise; returns (max |error|, max
/// error/tolerance).
fn check_vs(what: &str, got: &[f32], want: &Ev) -> (f64, f64) {
    assert_eq!(got.len(), want.v.len(), "{what}: length");
    let (mut max_err, mut max_ratio, mut worst) = (0.0f64, 0.0f64, 0usize);
    for (i, (&g, (&w, &tol))) in got.iter().zip(want.v.iter().zip(&want.e)).enumerate() {
        let err = (g as f64 - w).abs();
        let ratio = if g.is_nan() { f64::INFINITY } else { err / tol };
        max_err = max_err.max(err);
        if ratio > max_ratio {
            max_ratio = ratio;
            worst = i;
        }
    }
    assert!(
        max_ratio <= 1.0,
        "{what}: element {worst} of {}: got {} want {} (error {:e} > tolerance {:e})",
        got.len(),
        got[worst],
        want.v[worst],
        (got[worst] as f64 - want.v[worst]).abs(),
        want.e[worst]
    );
    (max_err, max_ratio)
}

/// Asserts `|a - b| <= bound` elementwise (two GPU runs); returns (max |a - b|, max
/// difference/tolerance).
fn check_pair(what: &str, a: &[f32], b: &[f32], bound: &[f64]) -> (f64, f64) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    let (mut max_diff, mut max_ratio, mut worst) = (0.0f64, 0.0f64, 0usize);
    for i in 0..a.len() {
        let diff = (a[i] as f64 - b[i] as f64).abs();
        let ratio = if diff.is_nan() { f64::INFINITY } else { diff / bound[i] };
        max_diff = max_diff.max(diff);
        if ratio > max_ratio {
            max_ratio = ratio;
            worst = i;
        }
    }
    assert!(
        max_ratio <= 1.0,
        "{what}: element {worst} of {}: {} vs {} (difference {:e} > tolerance {:e})",
        a.len(),
        a[worst],
        b[worst],
        (a[worst] as f64 - b[worst] as f64).abs(),
        bound[worst]
    );
    (max_diff, max_ratio)
}

/// The GPU's greedy token must be one the reference allows: its reference logit is within the
/// two tolerances of the reference maximum (otherwise the device picked a token it cannot have
/// computed as the largest).
fn check_token(what: &str, token: u32, want: &Ev) {
    let top = reference::argmax(&want.v).expect("logits");
    let t = token as usize;
    assert!(t < want.v.len(), "{what}: token {t} past the vocabulary");
    let gap = want.v[top] - want.v[t];
    assert!(
        gap <= want.e[top] + want.e[t],
        "{what}: the GPU chose {t} (reference logit {}) but the reference's best is {top} ({}), \
         {gap:e} higher, beyond the tolerances {:e} + {:e}",
        want.v[t],
        want.v[top],
        want.e[top],
        want.e[t]
    );
}

/// Every member's residual copy is bitwise the same; returns member 0's.
fn same_residuals(what: &str, d: &Decoder) -> Vec<f32> {
    let r = d.residuals().unwrap();
    assert_eq!(r.len(), d.members().len());
    for (i, x) in r.iter().enumerate().skip(1) {
        if let Some(j) = (0..x.len()).find(|&j| x[j].to_bits() != r[0][j].to_bits()) {
            panic!(
                "{what}: member {i}'s residual differs from member 0's at element {j}: {} vs {} \
                 (replicated activations must stay bitwise equal)",
                x[j], r[0][j]
            );
        }
    }
    r[0].clone()
}

/// Step by step on one member (its norms folded into the products: `Decoder::set_fold_norms`)
/// and on three: after each `step()`, the logits and residuals of
/// both are read and compared with the CPU reference (vs-exact tolerance) and with each other
/// (1-vs-N tolerance); every member's residual must be bitwise equal to the others'; the tokens
/// the devices choose (visible in the next step's input) must agree with the reference.
#[test]
fn step_by_step_logits_match_cpu_reference_and_one_member() {
    let _s = serial();
    let cfg = config(2);
    let g1 = common::logical(1);
    let g3 = common::logical(3);
    let mut d1 = Decoder::new(&g1, cfg.clone(), &SplitSpec::Even).unwrap();
    // One member leaves its residual norms to the products that read them (the scale applied
    // to their finished sums): within the same tolerances, which model rmsnorm's scale error
    // at its worst case.
    d1.set_fold_norms(true).unwrap();
    let mut d3 = Decoder::new(&g3, cfg.clone(), &SplitSpec::Even).unwrap();
    eprintln!("3-member plan {:?}, all-reduce {:?}", d3.plan, d3.comm().map(|c| c.mode()));
    let mut exact = CpuDecoder::new(cfg.clone(), VS_EXACT);
    let mut pair = CpuDecoder::new(cfg.clone(), ONE_VS_N);
    d1.set_token(FIRST).unwrap();
    d3.set_token(FIRST).unwrap();
    let (mut token, mut tokens) = (FIRST, Vec::new());
    // (max |1 - ref|, max ratio), (max |3 - ref|, ratio), (max |1 - 3|, ratio), max tolerances.
    let (mut e1, mut e3, mut e13) = ((0.0f64, 0.0f64), (0.0f64, 0.0f64), (0.0f64, 0.0f64));
    let (mut ex_bound, mut pair_bound, mut x13) = (0.0f64, 0.0f64, 0.0f64);
    let max2 = |a: (f64, f64), b: (f64, f64)| (a.0.max(b.0), a.1.max(b.1));
    for step in 0..STEPWISE_STEPS {
        d1.step().unwrap();
        d3.step().unwrap();
        assert_eq!((d1.position(), d3.position()), (step + 1, step + 1));
        let (l1, l3) = (d1.logits().unwrap(), d3.logits().unwrap());
        assert_eq!((l1.len(), l3.len()), (cfg.vocab, cfg.vocab));
        let x1 = same_residuals(&format!("step {step}, 1 member"), &d1);
        let x3 = same_residuals(&format!("step {step}, 3 members"), &d3);
        let (rl, rx) = exact.step(token);
        let (pl, px) = pair.step(token);
        let what = |s: &str| format!("step {step} (token {token}): {s}");
        e1 = max2(e1, check_vs(&what("1-member logits vs the f64 reference"), &l1, &rl));
        e3 = max2(e3, check_vs(&what("3-member logits vs the f64 reference"), &l3, &rl));
        check_vs(&what("1-member residual vs the f64 reference"), &x1, &rx);
        check_vs(&what("3-member residual vs the f64 reference"), &x3, &rx);
        e13 = max2(e13, check_pair(&what("logits, 1 vs 3 members"), &l1, &l3, &pl.e));
        let (xd, _) = check_pair(&what("residual, 1 vs 3 members"), &x1, &x3, &px.e);
        x13 = x13.max(xd);
        ex_bound = ex_bound.max(rl.e.iter().cloned().fold(0.0, f64::max));
        pair_bound = pair_bound.max(pl.e.iter().cloned().fold(0.0, f64::max));
        let (t1, t3) = (argmax(&l1), argmax(&l3));
        check_token(&what("1-member token"), t1, &rl);
        if t1 != t3 {
            let gap = (l1[t1 as usize] - l1[t3 as usize]) as f64;
            panic!(
                "{}: the 1-member model picks {t1}, the 3-member one {t3}; their 1-member logits \
                 differ by {gap:e} (1-vs-N tolerances {:e}, {:e}){}",
                what("greedy token"),
                pl.e[t1 as usize],
                pl.e[t3 as usize],
                if gap <= pl.e[t1 as usize] + pl.e[t3 as usize] {
                    ": a near tie within rounding, not a bug; change FIRST"
                } else {
                    ""
                }
            );
        }
        token = t1;
        tokens.push(t1);
    }
    eprintln!("step-by-step tokens: {tokens:?}");
    eprintln!(
        "max |logit error| vs f64: 1 member {:.3e} ({:.2e} of the tolerance), 3 members {:.3e} ({:.2e}); \
         largest vs-exact tolerance {ex_bound:.3e}",
        e1.0, e1.1, e3.0, e3.1
    );
    eprintln!(
        "max |logits 1 - logits 3| = {:.3e} ({:.2e} of the tolerance; largest 1-vs-N tolerance {pair_bound:.3e}); \
         max |residual 1 - residual 3| = {x13:.3e}",
        e13.0, e13.1
    );
    let distinct = tokens.iter().collect::<std::collections::BTreeSet<_>>().len();
    assert!(distinct > 3, "the test needs a varied token sequence, got {tokens:?}");
    let s = d3.stats();
    assert_eq!((s.tokens, s.members), (STEPWISE_STEPS, 3));
    assert_eq!(s.all_reduces, (2 * cfg.layers * STEPWISE_STEPS) as u64, "all-reduces: {s:?}");
    assert_eq!(d1.stats().all_reduces, 0, "one member never all-reduces");
    drop((d1, d3));
    common::assert_no_validation_errors();
}

/// A cache longer than two chunks of positions (`max_seq` 300): the decoder cuts attention over
/// the positions (`attention_split`, one more dispatch per layer than the same model with a
/// 40-position cache), on one member and on two; 140 steps so that two chunks of 128 are live
/// at the end, every step's logits and residual against the f64 reference (vs-exact tolerance,
/// which the split's rescaling stays far inside: `tp_kernels::attention_whole_and_split_match_f64_reference`
/// bounds it), the tokens the reference allows, the two members' residuals bitwise equal. With
/// the split turned off (`set_split_attention(false)`) the same long cache takes the whole
/// kernel (the short cache's dispatches) and decodes like the reference too; once a step is
/// recorded the setting is refused.
#[test]
fn a_long_cache_splits_attention_and_decodes_like_the_f64_reference() {
    let _s = serial();
    let long = DecoderConfig { max_seq: 300, ..config(1) };
    let steps = 140;
    let dispatches = |cfg: &DecoderConfig, split: bool| {
        let g = common::logical(1);
        let mut d = Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap();
        d.set_split_attention(split).unwrap();
        assert_eq!(d.splits_attention(), split && cfg.max_seq == long.max_seq, "max_seq {}", cfg.max_seq);
        // Every step recorded, so the counter counts every step's dispatches.
        d.set_replay(false);
        let loaded = d.stats().dispatches;
        d.generate(FIRST, 3, |_| {}).unwrap();
        d.stats().dispatches - loaded
    };
    let (split, whole) = (dispatches(&long, true), dispatches(&config(1), true));
    assert_eq!(split - whole, (3 * long.layers) as u64, "one more dispatch per layer and token");
    assert_eq!(dispatches(&long, false), whole, "the split turned off: the whole kernel's dispatches");
    assert_eq!(dispatches(&config(1), false), whole, "a short cache: the same either way");
    for (members, split) in [(1, true), (2, true), (1, false)] {
        let g = common::logical(members);
        let mut d = Decoder::new(&g, long.clone(), &SplitSpec::Even).unwrap();
        d.set_split_attention(split).unwrap();
        let mut cpu = CpuDecoder::new(long.clone(), VS_EXACT);
        d.set_token(FIRST).unwrap();
        let (mut token, mut worst) = (FIRST, 0.0f64);
        for step in 0..steps {
            d.step().unwrap();
            let (want_logits, want_x) = cpu.step(token);
            let what =
                |s: &str| format!("{members} member(s), split {split}, step {step} (token {token}): {s}");
            let logits = d.logits().unwrap();
            worst = worst.max(check_vs(&what("logits vs the f64 reference"), &logits, &want_logits).1);
            let x = same_residuals(&what("residual"), &d);
            check_vs(&what("residual vs the f64 reference"), &x, &want_x);
            let next = argmax(&logits);
            check_token(&what("token"), next, &want_logits);
            token = next;
        }
        eprintln!("{members} member(s), split {split}, {steps} steps over a {}-position cache: largest logit error {worst:.2e} of the tolerance", long.max_seq);
        // A replayed step holds the setting it was recorded with; steps recorded afresh each
        // time (two members over HostBridge) take a new one.
        match (d.replays(), d.set_split_attention(!split)) {
            (true, Err(e)) => {
                let e = e.to_string();
                assert!(e.contains("set_split_attention") && e.contains("recorded"), "{e}");
            }
            (false, Ok(())) => d.set_split_attention(split).unwrap(),
            (replays, got) => panic!("replays {replays}: set_split_attention after the steps gave {got:?}"),
        }
        assert_eq!(d.set_split_attention(split).map_err(|e| e.to_string()), Ok(()), "the same setting again");
    }
    common::assert_no_validation_errors();
}

/// One `generate` run: (name, tokens, last logits, last residual).
type RunResult = (String, Vec<u32>, Vec<f32>, Vec<f32>);

/// Pipelined greedy decoding (`generate`, two steps in flight) of 32 tokens from the same first
/// token on 1, 2, 3 and 4 members, on a 2:1 split and on a 3-member split whose middle member gets
/// nothing: identical tokens; the tokens are ones the f64 reference allows; after the run every
/// member's residual is bitwise the same, and every split's last logits are within the 1-vs-N
/// tolerance of the one-member logits. Counters: 2·layers + 1 all-reduces per token, and at most
/// one submit per member per token more than that.
#[test]
fn greedy_tokens_are_identical_for_every_split() {
    let _s = serial();
    let cfg = config(1);
    let ar_per_token = 2 * cfg.layers; // the candidates travel by an all-gather
    let runs: [(usize, SplitSpec); 6] = [
        (1, SplitSpec::Even),
        (2, SplitSpec::Even),
        (3, SplitSpec::Even),
        (4, SplitSpec::Even),
        (2, SplitSpec::parse("2:1").unwrap()),
        (3, SplitSpec::Weighted(vec![1.0, 0.0, 1.0])),
    ];
    // (name, tokens, last logits, last residual)
    let mut results: Vec<RunResult> = Vec::new();
    let mut measured = Vec::new();
    for (n, split) in runs {
        let name = format!("{n} member(s), {split:?}");
        let g = common::logical(n);
        let mut d = Decoder::new(&g, cfg.clone(), &split).unwrap();
        match &split {
            SplitSpec::Weighted(w) if w[1] == 0.0 => {
                let p = &d.plan;
                assert!(
                    p.kv_heads[1].is_empty() && p.ffn[1].is_empty() && p.vocab[1].is_empty(),
                    "{name}: member 1 should get nothing: {p:?}"
                );
            }
            SplitSpec::Weighted(_) => {
                let p = &d.plan;
                assert!(
                    p.kv_heads[0].len() > p.kv_heads[1].len() && p.ffn[0].len() > p.ffn[1].len(),
                    "{name}: {p:?}"
                );
            }
            SplitSpec::Even | SplitSpec::Auto => {}
        }
        let members: Vec<Member> = d.members().to_vec();
        let before = d.stats();
        let started = std::time::Instant::now();
        // Submits of every member at each on_step call: the difference between two calls in
        // the loop is one decode step's submits.
        let mut at_step: Vec<Vec<u64>> = Vec::new();
        let mut seen = Vec::new();
        let tokens = d
            .generate(FIRST, STEPS, |i| {
                seen.push(i);
                at_step.push(members.iter().map(|m| m.stats().submits).collect());
            })
            .unwrap();
        let after = d.stats();
        let took = started.elapsed();
        assert_eq!(seen, (0..STEPS).collect::<Vec<_>>(), "{name}: on_step once per step, in order");
        assert_eq!(tokens.len(), STEPS, "{name}");
        assert_eq!((after.tokens, after.members, d.position()), (STEPS, n, STEPS), "{name}");
        let ar = after.all_reduces - before.all_reduces;
        if n >= 2 {
            assert_eq!(ar, (ar_per_token * STEPS) as u64, "{name}: all-reduces per token ({after:?})");
        } else {
            assert_eq!(ar, 0, "{name}");
        }
        // Steady state: between on_step(k-1) and on_step(k), k in 1..STEPS-1 (the last call comes
        // after the final synchronize).
        let per_step_max = (1..STEPS - 1)
            .flat_map(|k| (0..n).map(move |i| (k, i)))
            .map(|(k, i)| at_step[k][i] - at_step[k - 1][i])
            .max()
            .unwrap();
        let avg = (after.submits - before.submits) as f64 / (n * STEPS) as f64;
        // A collective's round is a submit (HostBridge, SyncFd): the all-reduces and the
        // candidates' all-gather, and the step's own.
        let ar_tok = if n >= 2 { ar_per_token + 1 } else { 0 };
        assert!(
            per_step_max as usize <= ar_tok + 1,
            "{name}: {per_step_max} submits per member in one decode step, more than collectives per \
             token ({ar_tok}) + 1"
        );
        measured.push(format!(
            "{name}: {STEPS} tokens in {took:.2?}; {} all-reduces/token; {per_step_max} submits/member/step \
             (avg {avg:.3} with the final read)",
            ar as usize / STEPS
        ));
        let logits = d.logits().unwrap();
        let x = same_residuals(&name, &d);
        results.push((name, tokens, logits, x));
        drop(d);
    }
    for m in &measured {
        eprintln!("{m}");
    }
    let (_, t1, l1, x1) = &results[0];
    eprintln!("generated tokens: {t1:?}");
    for (name, tokens, _, _) in &results[1..] {
        if tokens != t1 {
            let k = (0..STEPS).find(|&k| tokens[k] != t1[k]).unwrap();
            panic!("{name}: tokens differ from one member's at step {k}:\n  {tokens:?}\n  {t1:?}");
        }
    }
    // The reference along the generated tokens.
    let mut exact = CpuDecoder::new(cfg.clone(), VS_EXACT);
    let mut pair = CpuDecoder::new(cfg.clone(), ONE_VS_N);
    let (mut last_exact, mut last_pair) = (None, None);
    for k in 0..STEPS {
        let input = if k == 0 { FIRST } else { t1[k - 1] };
        let (rl, rx) = exact.step(input);
        let (pl, px) = pair.step(input);
        check_token(&format!("step {k}: generated token"), t1[k], &rl);
        last_exact = Some((rl, rx));
        last_pair = Some((pl, px));
    }
    let ((rl, rx), (pl, px)) = (last_exact.unwrap(), last_pair.unwrap());
    check_vs("last logits, 1 member, vs the f64 reference", l1, &rl);
    check_vs("last residual, 1 member, vs the f64 reference", x1, &rx);
    for (name, _, l, x) in &results[1..] {
        let (dl, _) = check_pair(&format!("{name}: last logits vs one member's"), l1, l, &pl.e);
        let (dx, _) = check_pair(&format!("{name}: last residual vs one member's"), x1, x, &px.e);
        eprintln!("{name}: last step max |logit diff| vs 1 member {dl:.3e}, residual {dx:.3e}");
    }
    common::assert_no_validation_errors();
}

/// The decoder with DevicePoll all-reduces (`CROSSGPU_ALLREDUCE=poll`): the same tokens as one
/// member, with an even, an uneven and a zero-share split, and one submit per token per member
/// (the all-reduces add none: they ride in the step's command buffer).
#[test]
fn device_poll_decodes_the_same_tokens_in_one_submit_per_token() {
    let _s = serial();
    let cfg = config(1);
    let one = {
        let g = common::logical(1);
        let mut d = Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap();
        d.generate(FIRST, STEPS, |_| {}).unwrap()
    };
    let runs: [(usize, SplitSpec); 3] = [
        (2, SplitSpec::Even),
        (3, SplitSpec::parse("2:1:1").unwrap()),
        (4, SplitSpec::Weighted(vec![1.0, 0.0, 1.0, 1.0])),
    ];
    for (n, split) in runs {
        let name = format!("DevicePoll, {n} members, {split:?}");
        let g = common::logical(n);
        let opts = CommOptions {
            mode: ModeRequest::Forced(crossgpu::Mode::DevicePoll),
            ..CommOptions::from_env().unwrap()
        };
        let comm = match Comm::with_options(&g, opts) {
            Ok(c) => c,
            // Too few llvmpipe threads, or (GPU machine layouts) two members on one GPU.
            Err(crossgpu::Error::Unsupported(why)) if common::device_poll_refused_by_layout(&why) => {
                common::skip(Some("poll"), &format!("{name}: {why}"));
                continue;
            }
            Err(e) => panic!("{name}: {e}"),
        };
        let mut d = Decoder::with_comm(&g, cfg.clone(), &split, Some(comm)).unwrap();
        let members: Vec<Member> = d.members().to_vec();
        let mut at_step: Vec<Vec<u64>> = Vec::new();
        let tokens = d
            .generate(FIRST, STEPS, |_| at_step.push(members.iter().map(|m| m.stats().submits).collect()))
            .unwrap();
        assert_eq!(tokens, one, "{name}: tokens differ from one member's");
        let per_step_max = (1..STEPS - 1)
            .flat_map(|k| (0..n).map(move |i| (k, i)))
            .map(|(k, i)| at_step[k][i] - at_step[k - 1][i])
            .max()
            .unwrap();
        assert_eq!(per_step_max, 1, "{name}: submits per member in one decode step");
    }
    common::assert_no_validation_errors();
}

/// `SplitSpec::Auto` (CROSSGPU_SPLIT=auto): each member's matvec throughput is measured at
/// load and becomes its weight; the plan covers everything and the tokens are those of one
/// member, as for any split.
#[test]
fn auto_split_measures_every_member_and_decodes_like_one_member() {
    let _s = serial();
    let cfg = config(1);
    let one = common::logical(1);
    let want = Decoder::new(&one, cfg.clone(), &SplitSpec::Even).unwrap().generate(3, 8, |_| {}).unwrap();
    let group = common::logical(2);
    let mut dec = Decoder::new(&group, cfg.clone(), &SplitSpec::Auto).unwrap();
    assert_eq!(dec.plan.weights.len(), 2);
    assert!(
        dec.plan.weights.iter().all(|w| w.is_finite() && *w > 0.0),
        "measured weights {:?}",
        dec.plan.weights
    );
    assert_eq!(dec.plan.ffn.last().unwrap().end, cfg.ffn, "the plan covers the MLP");
    assert_eq!(dec.plan.vocab.last().unwrap().end, cfg.vocab, "the plan covers the vocabulary");
    let got = dec.generate(3, 8, |_| {}).unwrap();
    assert_eq!(got, want, "auto split ({:?}) vs one member", dec.plan.weights);
    common::assert_no_validation_errors();
}
