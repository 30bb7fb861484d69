//! Kinds of memory access a barrier orders, shared by the recorder (`command/`) and the
//! translation to Vulkan stages and access flags (`conv.rs`), so neither imports the other.

/// Kinds of memory access, for barriers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// A compute shader reads (`COMPUTE_SHADER` stage, `SHADER_READ`).
    pub const COMPUTE_READ: Self = Self(1);
    /// A compute shader writes (`COMPUTE_SHADER` stage, `SHADER_WRITE`).
    pub const COMPUTE_WRITE: Self = Self(2);
    /// A copy or fill reads (`TRANSFER` stage, `TRANSFER_READ`).
    pub const TRANSFER_READ: Self = Self(4);
    /// A copy or fill writes (`TRANSFER` stage, `TRANSFER_WRITE`).
    pub const TRANSFER_WRITE: Self = Self(8);
    /// The host reads (`HOST` stage, `HOST_READ`), e.g. a read-back after the submit completed.
    pub const HOST_READ: Self = Self(16);
    /// The host writes (`HOST` stage, `HOST_WRITE`), e.g. into imported host memory.
    pub const HOST_WRITE: Self = Self(32);
    /// Every device-side access: compute and transfer, read and write.
    pub const DEVICE_ALL: Self = Self(15);

    /// Whether every kind in `other` is in `self`.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
    /// Whether no kind is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for Access {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}
