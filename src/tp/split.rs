//! How features are shared out among members: even, or weighted (`2:1` for a fast discrete GPU
//! beside a slow integrated one), cut at multiples of a granularity (64 features for the MLP,
//! whole KV-head groups for attention) with the remainder spread by largest fractional share,
//! or `auto`: weighted by each member's matrix–vector throughput measured at load, so a slow
//! device gets a small share.

use std::ops::Range;
use std::time::Instant;

use crate::config;
use crate::error::{Error, Result};
use crate::group::Member;
use crate::tensor::DType;

/// A split request: `CROSSGPU_SPLIT=even|auto|2:1:1|...`.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum SplitSpec {
    /// Equal weights: every member gets the same share (`CROSSGPU_SPLIT=even`, the default).
    #[default]
    Even,
    /// One non-negative weight per member, in group order.
    Weighted(Vec<f64>),
    /// Weights measured at load: each member's f16 matrix–vector throughput ([`measure_speed`]).
    Auto,
}

impl SplitSpec {
    /// Parses `even` or colon-separated weights such as `2:1` or `3:1:0`.
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        let bad = |why: String| Error::BadConfig { name: "CROSSGPU_SPLIT", value: s.to_string(), why };
        if s.is_empty() || s.eq_ignore_ascii_case("even") {
            return Ok(Self::Even);
        }
        if s.eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto);
        }
        let w = s
            .split(':')
            .map(|p| p.trim().parse::<f64>().map_err(|_| bad(format!("'{p}' is not a number"))))
            .collect::<Result<Vec<_>>>()?;
        if let Some(v) = w.iter().find(|v| !v.is_finite() || **v < 0.0) {
            return Err(bad(format!("weight {v} must be a finite number >= 0")));
        }
        if w.iter().sum::<f64>() <= 0.0 {
            return Err(bad("the weights sum to zero: no member would get any work".into()));
        }
        Ok(Self::Weighted(w))
    }

    /// `CROSSGPU_SPLIT`, default even.
    pub fn from_env() -> Result<Self> {
        config::split_from_env().map_or(Ok(Self::Even), |s| Self::parse(&s))
    }

    /// The weight of each member, measuring them for [`SplitSpec::Auto`].
    pub fn resolve(&self, members: &[Member]) -> Result<Vec<f64>> {
        match self {
            Self::Auto => {
                let w = members.iter().map(measure_speed).collect::<Result<Vec<_>>>()?;
                log::info!(
                    "split auto: measured matvec throughput {:?} GB/s",
                    w.iter().map(|v| (v * 10.0).round() / 10.0).collect::<Vec<_>>()
                );
                Ok(w)
            }
            other => other.weights(members.len()),
        }
    }

    /// The weight of each of `members` members (`Auto` needs the members: see
    /// [`SplitSpec::resolve`]).
    pub fn weights(&self, members: usize) -> Result<Vec<f64>> {
        match self {
            Self::Even => Ok(vec![1.0; members]),
            Self::Auto => Err(Error::InvalidArgument(
                "a measured split needs the members: use SplitSpec::resolve".into(),
            )),
            Self::Weighted(w) if w.len() == members => Ok(w.clone()),
            Self::Weighted(w) => Err(Error::BadConfig {
                name: "CROSSGPU_SPLIT",
                value: w.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(":"),
                why: format!("{} weights for a group of {members} members", w.len()),
            }),
        }
    }
}

/// One member's f16 matrix–vector throughput in GB/s: a 1024 × 4096 product (8 MiB of
/// weights) timed over 8 runs after a warm-up, on that member alone. This is the work that
/// dominates decoding, so its rate is the member's fair share.
pub fn measure_speed(m: &Member) -> Result<f64> {
    let (rows, cols) = (1024, 4096);
    let w = m.empty(&[rows, cols], DType::F16)?;
    m.transformer().init_weights(&w, 0x5EED, cols, 0, 0, 12)?;
    let x = m.full(&[cols], DType::F32, 0.5)?;
    let y = m.empty(&[rows], DType::F32)?;
    m.matvec(&w, &x, &y)?;
    m.synchronize()?;
    const RUNS: usize = 8;
    let t = Instant::now();
    for _ in 0..RUNS {
        m.matvec(&w, &x, &y)?;
    }
    m.synchronize()?;
    let bytes = (RUNS * (rows * cols * 2 + cols * 4 + rows * 4)) as f64;
    Ok(bytes / t.elapsed().as_secs_f64().max(1e-9) / 1e9)
}

/// Contiguous feature ranges, one per member in order, covering `0..total`, with every cut at
/// a multiple of `granularity` (the last unit may be partial). A member whose share rounds to
/// zero units gets an empty range (it contributes zeros).
pub fn split_ranges(total: usize, granularity: usize, weights: &[f64]) -> Result<Vec<Range<usize>>> {
    if granularity == 0 {
        return Err(Error::InvalidArgument("split granularity 0".into()));
    }
    if weights.is_empty() {
        return Err(Error::InvalidArgument("a split over no members".into()));
    }
    if total > u32::MAX as usize {
        return Err(Error::InvalidArgument(format!(
            "a split of {total} features: kernels index with 32 bits"
        )));
    }
    if weights.iter().any(|w| !w.is_finite() || *w < 0.0) {
        return Err(Error::InvalidArgument(format!("split weights must be finite and >= 0: {weights:?}")));
    }
    // Normalise by the largest weight first: `units * w` or the sum of the raw weights could
    // overflow to infinity (weights near f64::MAX), and a saturating cast would then hand a
    // member every unit. After it each weight is in [0, 1] and the sum in [1, len].
    let max = weights.iter().copied().fold(0.0f64, f64::max);
    if max <= 0.0 {
        return Err(Error::InvalidArgument("split weights sum to zero: no member would get any work".into()));
    }
    let norm: Vec<f64> = weights.iter().map(|w| w / max).collect();
    let sum: f64 = norm.iter().sum();
    let units = total.div_ceil(granularity);
    let ideal: Vec<f64> = norm.iter().map(|w| (units as f64 * (w / sum)).min(units as f64)).collect();
    let mut counts: Vec<usize> = ideal.iter().map(|x| x.floor() as usize).collect();
    // Rounding in the division can leave the floors a unit above `units` in total: take it back
    // from the largest share.
    while counts.iter().sum::<usize>() > units {
        let i = (0..counts.len()).max_by_key(|&i| counts[i]).unwrap_or(0);
        counts[i] -= 1;
    }
    let mut left = units - counts.iter().sum::<usize>();
    // Largest fractional share first; ties to the earlier member.
    let mut order: Vec<usize> = (0..weights.len()).filter(|&i| weights[i] > 0.0).collect();
    order.sort_by(|&a, &b| {
        (ideal[b] - ideal[b].floor()).total_cmp(&(ideal[a] - ideal[a].floor())).then(a.cmp(&b))
    });
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        counts[i] += 1;
        left -= 1;
    }
    let mut start = 0usize;
    let at = |units: usize| units.checked_mul(granularity).map_or(total, |f| f.min(total));
    Ok(counts
        .iter()
        .map(|&c| {
            let r = at(start)..at(start + c);
            start += c;
            r
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_weighted_and_zero_shares() {
        assert_eq!(split_ranges(17408, 64, &[1.0, 1.0]).unwrap(), vec![0..8704, 8704..17408]);
        assert_eq!(split_ranges(8, 1, &[1.0, 1.0, 1.0]).unwrap(), vec![0..3, 3..6, 6..8]);
        assert_eq!(split_ranges(300, 64, &[2.0, 1.0]).unwrap(), vec![0..192, 192..300]);
        assert_eq!(split_ranges(128, 64, &[1.0, 0.0, 1.0]).unwrap(), vec![0..64, 64..64, 64..128]);
        // One unit among three members: two get nothing.
        assert_eq!(split_ranges(10, 64, &[1.0, 1.0, 1.0]).unwrap(), vec![0..10, 10..10, 10..10]);
        assert_eq!(split_ranges(0, 64, &[1.0, 1.0]).unwrap(), vec![0..0, 0..0]);
    }

    /// Each member gets ⌊ideal⌋ or ⌊ideal⌋ + 1 units, `ideal = units · w_i / Σw`, computed
    /// here exactly in integers: the weights are integers times a common power of two, up to
    /// f64::MAX, where `units · w` overflows in f64.
    #[test]
    fn shares_are_floor_or_floor_plus_one_even_for_huge_weights() {
        assert_eq!(split_ranges(100, 1, &[1e308, 1.0]).unwrap(), vec![0..100, 100..100]);
        assert_eq!(split_ranges(100, 1, &[1.0, 1e308]).unwrap(), vec![0..0, 0..100]);
        assert_eq!(split_ranges(100, 1, &[f64::MAX, f64::MAX]).unwrap(), vec![0..50, 50..100]);
        assert_eq!(split_ranges(100, 1, &[f64::MIN_POSITIVE, 1e-320]).unwrap().len(), 2);
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..2000 {
            let members = 1 + (next() % 6) as usize;
            let units = (next() % 5000) as usize;
            let mantissas: Vec<u64> = (0..members).map(|_| next() % (1 << 20)).collect();
            if mantissas.iter().all(|&m| m == 0) {
                continue;
            }
            let scale = [1.0, 2f64.powi(1003), 2f64.powi(-1000), 2f64.powi(60)][case % 4];
            let weights: Vec<f64> = mantissas.iter().map(|&m| m as f64 * scale).collect();
            let ranges = split_ranges(units, 1, &weights).unwrap();
            let sum: u128 = mantissas.iter().map(|&m| m as u128).sum();
            let mut at = 0;
            for (i, r) in ranges.iter().enumerate() {
                assert_eq!(r.start, at, "{weights:?}: ranges tile in order");
                at = r.end;
                let floor = (units as u128 * mantissas[i] as u128 / sum) as usize;
                assert!(
                    r.len() == floor || r.len() == floor + 1,
                    "{units} units by {weights:?}: member {i} got {} (ideal floor {floor})",
                    r.len()
                );
                if mantissas[i] == 0 {
                    assert!(r.is_empty(), "{weights:?}: a zero weight gets nothing");
                }
            }
            assert_eq!(at, units, "{weights:?}: every unit is handed out");
        }
        assert_eq!(SplitSpec::parse("1e308:1").unwrap(), SplitSpec::Weighted(vec![1e308, 1.0]));
    }

    #[test]
    fn bad_requests_are_errors() {
        assert!(split_ranges(10, 0, &[1.0]).is_err());
        assert!(split_ranges(10, 1, &[]).is_err());
        assert!(split_ranges(10, 1, &[0.0, 0.0]).is_err());
        assert!(split_ranges(10, 1, &[-1.0, 2.0]).is_err());
        assert!(split_ranges(10, 1, &[f64::NAN]).is_err());
        assert_eq!(SplitSpec::parse("AUTO").unwrap(), SplitSpec::Auto);
        assert!(SplitSpec::Auto.weights(2).is_err());
        for s in ["2:x", "1:-1", "0:0", "inf:1"] {
            assert!(SplitSpec::parse(s).is_err(), "{s}");
        }
        assert_eq!(SplitSpec::parse("2:1").unwrap(), SplitSpec::Weighted(vec![2.0, 1.0]));
        assert!(SplitSpec::parse("2:1").unwrap().weights(3).is_err());
    }
}
