//! A member's cache of bind groups, keyed by kernel and buffer ranges: every
//! dispatch looks its bind group up here, so the lookup allocates nothing and hashes a few
//! words (FxHash, the hash rustc uses for small integer keys) instead of SipHash over a
//! heap-allocated key.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use vk_native::{BindRange, BufferId};

/// Bindings a key holds; kernels with more are bound without the cache.
const MAX_RANGES: usize = 8;

/// A kernel (by its process-wide id) and its buffer ranges.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BindKey {
    kernel: u64,
    len: usize,
    ranges: [(BufferId, u64, u64); MAX_RANGES],
}

impl BindKey {
    /// The key of `kernel` over `ranges`, or `None` when there are more than [`MAX_RANGES`].
    pub(crate) fn new(kernel: u64, ranges: &[BindRange<'_>]) -> Option<Self> {
        if ranges.len() > MAX_RANGES {
            return None;
        }
        let mut key = Self { kernel, len: ranges.len(), ranges: [(BufferId(0), 0, 0); MAX_RANGES] };
        for (k, r) in key.ranges.iter_mut().zip(ranges) {
            *k = (r.buffer.id(), r.offset, r.size);
        }
        Some(key)
    }

    /// Whether the key binds buffer `id`.
    pub(crate) fn holds(&self, id: BufferId) -> bool {
        self.ranges[..self.len].iter().any(|r| r.0 == id)
    }
}

/// The Fx hash (as in rustc): one rotate, xor and multiply per word.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type BindCache = HashMap<BindKey, vk_native::BindGroup, BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn equal_keys_hash_equal_and_ranges_tell_keys_apart() {
        let k = |ranges: &[(u64, u64, u64)]| BindKey {
            kernel: 1,
            len: ranges.len(),
            ranges: std::array::from_fn(|i| {
                ranges.get(i).map_or((BufferId(0), 0, 0), |&(b, o, s)| (BufferId(b), o, s))
            }),
        };
        let h = |key: &BindKey| BuildHasherDefault::<FxHasher>::default().hash_one(key);
        let (a, b, c) =
            (k(&[(1, 0, 16), (2, 0, 16)]), k(&[(1, 0, 16), (2, 0, 16)]), k(&[(1, 0, 16), (2, 16, 16)]));
        assert!(a == b && h(&a) == h(&b));
        assert!(a != c && h(&a) != h(&c));
        assert!(a.holds(BufferId(2)) && !a.holds(BufferId(3)));
        // A zero range past `len` is not a binding.
        assert!(!k(&[(1, 0, 16)]).holds(BufferId(0)));
    }
}
