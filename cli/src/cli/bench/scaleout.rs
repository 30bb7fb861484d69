//! The α–β model of an all-reduce across hosts and of a decode token split across them
//! (docs/SCALE-OUT.md): from a link's measured latency α (seconds per message) and inverse
//! bandwidth β (seconds per byte), what ring, recursive doubling, a binomial tree and the
//! communicator's own gather form cost for `p` hosts, and what tensor against pipeline
//! parallelism across hosts costs per token. `crossgpu bench ranks` measures α and β and prints
//! the model; this module is the arithmetic, on paper.

/// A link between hosts: `time(bytes) = alpha + beta · bytes`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Seconds per message, whatever its size.
    pub alpha: f64,
    /// Seconds per byte.
    pub beta: f64,
}

/// ⌈log₂ p⌉, the rounds of a doubling algorithm over `p` hosts.
fn log2_ceil(p: usize) -> f64 {
    (usize::BITS - p.saturating_sub(1).leading_zeros()) as f64
}

impl Link {
    /// Fits α and β to `(bytes, seconds)` points by least squares; `None` with fewer than two
    /// distinct sizes. α is clamped at zero (a fit over large messages can cross the axis
    /// below it).
    pub fn fit(points: &[(f64, f64)]) -> Option<Link> {
        let n = points.len() as f64;
        let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), &(x, y)| (a + x, b + y));
        let (mx, my) = (sx / n, sy / n);
        let sxx: f64 = points.iter().map(|&(x, _)| (x - mx) * (x - mx)).sum();
        if points.len() < 2 || sxx == 0.0 {
            return None;
        }
        let sxy: f64 = points.iter().map(|&(x, y)| (x - mx) * (y - my)).sum();
        let beta = sxy / sxx;
        Some(Link { alpha: (my - beta * mx).max(0.0), beta })
    }

    /// One message of `bytes`.
    pub fn message(&self, bytes: f64) -> f64 {
        self.alpha + self.beta * bytes
    }

    /// Ring all-reduce of `bytes` over `p` hosts: a reduce-scatter and an all-gather, `2(p-1)`
    /// steps of `bytes / p` each (bandwidth-optimal; latency grows with `p`).
    pub fn ring(&self, p: usize, bytes: f64) -> f64 {
        let p = p as f64;
        2.0 * (p - 1.0) * self.message(bytes / p)
    }

    /// Recursive-doubling all-reduce: `⌈log₂ p⌉` exchanges of the whole vector
    /// (latency-optimal; each step moves all of it).
    pub fn recursive_doubling(&self, p: usize, bytes: f64) -> f64 {
        log2_ceil(p) * self.message(bytes)
    }

    /// A binomial-tree reduce to one host, then a binomial-tree broadcast.
    pub fn tree(&self, p: usize, bytes: f64) -> f64 {
        2.0 * log2_ceil(p) * self.message(bytes)
    }

    /// The communicator's present form across hosts (`RankComm`, docs/SCALE-OUT.md): an
    /// all-gather of each call's 20-byte header, then an all-gather of every host's sum; each
    /// all-gather as a doubling one (`⌈log₂ p⌉` messages, `(p-1)·bytes` received per host).
    pub fn gather_form(&self, p: usize, bytes: f64) -> f64 {
        let gather = |b: f64| log2_ceil(p) * self.alpha + (p as f64 - 1.0) * b * self.beta;
        gather(20.0) + gather(bytes)
    }

    /// The cheapest of ring, recursive doubling and tree for these sizes.
    pub fn best(&self, p: usize, bytes: f64) -> f64 {
        self.ring(p, bytes).min(self.recursive_doubling(p, bytes)).min(self.tree(p, bytes))
    }
}

/// A decode token of a transformer split over hosts.
#[derive(Debug, Clone, Copy)]
pub struct TokenModel {
    /// Layers: tensor parallelism all-reduces twice per layer (attention and MLP outputs).
    pub layers: usize,
    /// Bytes of one all-reduced activation (hidden × 4 on the f32 wire between ranks).
    pub activation_bytes: f64,
    /// Seconds of one token's work on one host holding the whole model.
    pub token_seconds: f64,
}

/// One row of the model: seconds per token for `hosts` hosts.
#[derive(Debug, Clone, Copy)]
pub struct TokenCost {
    pub hosts: usize,
    /// Tensor parallelism, all-reduces by the cheapest classic algorithm: work / hosts +
    /// `2 · layers` all-reduces.
    pub tensor_best: f64,
    /// Tensor parallelism with the communicator's gather form between hosts.
    pub tensor_gather: f64,
    /// Pipeline parallelism, one sequence: the token passes every host's layers in turn (the
    /// whole work) plus `hosts - 1` activation hand-offs. With `hosts` sequences in flight the
    /// pipeline's throughput is `hosts` times this token's, its latency unchanged.
    pub pipeline: f64,
}

impl TokenModel {
    /// The costs for `hosts` hosts over `link`.
    pub fn cost(&self, link: &Link, hosts: usize) -> TokenCost {
        let work = self.token_seconds / hosts as f64;
        let reduces = 2.0 * self.layers as f64;
        let p = hosts;
        let solo = hosts == 1;
        TokenCost {
            hosts,
            tensor_best: work + if solo { 0.0 } else { reduces * link.best(p, self.activation_bytes) },
            tensor_gather: work
                + if solo { 0.0 } else { reduces * link.gather_form(p, self.activation_bytes) },
            pipeline: self.token_seconds + (hosts as f64 - 1.0) * link.message(self.activation_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINK: Link = Link { alpha: 5e-6, beta: 1e-10 };

    #[test]
    fn fit_recovers_a_line() {
        let pts: Vec<(f64, f64)> = [8.0, 4096.0, 1e6, 6.4e7].iter().map(|&b| (b, LINK.message(b))).collect();
        let f = Link::fit(&pts).unwrap();
        assert!((f.alpha - LINK.alpha).abs() < 1e-12 && (f.beta - LINK.beta).abs() < 1e-18, "{f:?}");
        assert!(Link::fit(&[(8.0, 1.0)]).is_none());
        assert!(Link::fit(&[(8.0, 1.0), (8.0, 2.0)]).is_none());
    }

    #[test]
    fn algorithms_match_their_closed_forms() {
        assert_eq!(log2_ceil(1), 0.0);
        assert_eq!(log2_ceil(2), 1.0);
        assert_eq!(log2_ceil(3), 2.0);
        assert_eq!(log2_ceil(512), 9.0);
        let n = 20480.0;
        // p = 2: ring is two half-vector steps, doubling one whole-vector step.
        assert!((LINK.ring(2, n) - 2.0 * (5e-6 + 1e-10 * n / 2.0)).abs() < 1e-15);
        assert!((LINK.recursive_doubling(2, n) - (5e-6 + 1e-10 * n)).abs() < 1e-15);
        // For small vectors doubling wins at many hosts; for large ones the ring does.
        assert!(LINK.recursive_doubling(512, n) < LINK.ring(512, n));
        assert!(LINK.ring(512, 6.4e7) < LINK.recursive_doubling(512, 6.4e7));
        // The gather form moves (p-1)·n bytes: far more than a ring's 2n at large p and n.
        assert!(LINK.gather_form(64, 6.4e7) > 10.0 * LINK.ring(64, 6.4e7));
    }

    #[test]
    fn tensor_parallelism_pays_until_the_all_reduces_outweigh_the_split_work() {
        let m = TokenModel { layers: 64, activation_bytes: 20480.0, token_seconds: 15.4e-3 };
        let one = m.cost(&LINK, 1);
        assert_eq!(one.tensor_best, one.pipeline);
        let two = m.cost(&LINK, 2);
        assert!(two.tensor_best < one.tensor_best && two.pipeline > one.pipeline);
        // A slow link (1 ms per message) makes the 128 all-reduces dearer than the work saved.
        let slow = Link { alpha: 1e-3, beta: 1e-9 };
        assert!(m.cost(&slow, 2).tensor_best > one.tensor_best);
    }
}
