//! Which adapters a group opens, and how: the `CROSSGPU_DEVICES` syntax.
//!
//! A comma-separated list; each item opens one VkDevice:
//! - `N` — adapter number N (as `crossgpu devices` lists them), one member;
//! - `NAME` — the first adapter whose name, vendor or driver contains NAME (case-insensitive),
//!   e.g. `nvidia`, `llvmpipe`, `radv`;
//! - `Nx K` written `NxK` (e.g. `0x2`), or `ITEM*K` for any item (e.g. `nvidia*4`) — that
//!   adapter's VkDevice with K queues, each queue a member standing in for a separate device:
//!   members keep their own buffers, semaphores and host-slot imports, so they take the same
//!   communication path as real devices, without the cost of the GPU switching between
//!   VkDevices. (`x` counts only after an index, so names such as `rx7900` stay names.)
//!
//! - `ITEM/K` — K members on that adapter's VkDevice sharing one queue: each keeps its own
//!   stream, buffers, semaphores and host-slot imports, but the GPU runs their work on one
//!   hardware channel. Switching the compute engine between channels blocked on semaphores
//!   costs a GPU a time that real separate GPUs never pay (docs/BENCHMARKS.md, "All-reduce
//!   layouts on one H200").
//!
//! `0,0` is two members on adapter 0 as two VkDevices; `0x2` is two queues of one VkDevice;
//! `nvidia,llvmpipe` is the NVIDIA GPU beside lavapipe. `all` (the default) opens every adapter
//! once, or two members when there is only one adapter.

use vk_native::{AdapterInfo, DeviceType};

use crate::error::{Error, Result};

/// How one item picks its adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdapterSelector {
    /// Adapter number N, as [`crate::instance::Instance::adapters`] and `crossgpu devices` list them.
    Index(usize),
    /// Lowercase text (as [`GroupSpec::parse`] stores it): the first adapter whose lowercased
    /// name, driver name or driver id contains it, or whose vendor
    /// ([`AdapterInfo::vendor_name`]) is it.
    Name(String),
}

/// One VkDevice of the group and how many members (queues) it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// The adapter this VkDevice is opened on.
    pub adapter: AdapterSelector,
    /// Members on this VkDevice.
    pub queues: u32,
    /// The members share one queue (`ITEM/K`) instead of one queue each (`ITEM*K`).
    pub shared_queue: bool,
}

/// What a group opens, parsed from the `CROSSGPU_DEVICES` syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupSpec {
    /// Every adapter once; two members when there is only one.
    All,
    /// Every GPU (discrete, integrated or virtual) once, one member each; every CPU device
    /// (lavapipe) once where there is no GPU. What a model should be split over by default:
    /// queue stand-ins of one GPU only add all-reduce rounds, and a CPU device beside a GPU makes
    /// every token wait for the CPU (`crossgpu decode` runs on this unless `CROSSGPU_DEVICES`
    /// says otherwise).
    Gpus,
    /// One VkDevice per item, in order; members are numbered in that order.
    Devices(Vec<DeviceSpec>),
}

impl GroupSpec {
    /// Parses the `CROSSGPU_DEVICES` syntax.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = |why: String| Error::BadConfig { name: "CROSSGPU_DEVICES", value: s.to_string(), why };
        let s = s.trim();
        if s.is_empty() || s.eq_ignore_ascii_case("all") {
            return Ok(Self::All);
        }
        if s.eq_ignore_ascii_case("gpus") {
            return Ok(Self::Gpus);
        }
        let mut out = Vec::new();
        for item in s.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(bad("empty item (two commas, or a trailing comma)".into()));
            }
            // `ITEM*K` for any item; `NxK` only after an index, so names like `rx7900` stay names;
            // `ITEM/K`: K members sharing one queue.
            let shared_queue = item.contains('/');
            let count_at = match item.rfind(['*', '/']) {
                Some(p) => Some(p),
                None => {
                    item.rfind(['x', 'X']).filter(|&p| p > 0 && item[..p].bytes().all(|b| b.is_ascii_digit()))
                }
            };
            let (sel, queues) = match count_at {
                Some(p)
                    if p > 0 && p + 1 < item.len() && item[p + 1..].bytes().all(|b| b.is_ascii_digit()) =>
                {
                    let k: u32 = item[p + 1..]
                        .parse()
                        .map_err(|_| bad(format!("queue count in '{item}' is too large")))?;
                    (&item[..p], k)
                }
                Some(_) => return Err(bad(format!("'{item}': expected ITEM*COUNT, ITEM/COUNT or NxCOUNT"))),
                None => (item, 1),
            };
            if queues == 0 || queues > 64 {
                return Err(bad(format!("'{item}': the queue count must be 1 to 64")));
            }
            let adapter = if sel.bytes().all(|b| b.is_ascii_digit()) {
                AdapterSelector::Index(
                    sel.parse().map_err(|_| bad(format!("adapter index '{sel}' is too large")))?,
                )
            } else if sel.chars().all(|c| c.is_alphanumeric() || " -_.".contains(c)) {
                AdapterSelector::Name(sel.to_lowercase())
            } else {
                return Err(bad(format!("'{item}' is neither an adapter index nor a name")));
            };
            out.push(DeviceSpec { adapter, queues, shared_queue });
        }
        Ok(Self::Devices(out))
    }

    /// Whether each VkDevice's members share one queue (`ITEM/K`), in order.
    pub fn shared_queues(&self) -> Vec<bool> {
        match self {
            Self::All | Self::Gpus => Vec::new(),
            Self::Devices(d) => d.iter().map(|d| d.shared_queue).collect(),
        }
    }

    /// Resolves to `(adapter index, members)` per VkDevice against the adapters present.
    pub fn resolve(&self, adapters: &[AdapterInfo]) -> Result<Vec<(usize, u32)>> {
        let available =
            || adapters.iter().map(|a| format!("[{}] {}", a.index, a.name)).collect::<Vec<_>>().join(", ");
        match self {
            Self::All => {
                if adapters.len() == 1 {
                    let q = if adapters[0].caps.queue_count >= 2 { 2 } else { 1 };
                    Ok(if q == 2 { vec![(0, 2)] } else { vec![(0, 1), (0, 1)] })
                } else {
                    Ok(adapters.iter().map(|a| (a.index, 1)).collect())
                }
            }
            Self::Gpus => {
                let gpus: Vec<(usize, u32)> = adapters
                    .iter()
                    .filter(|a| a.device_type != DeviceType::Cpu)
                    .map(|a| (a.index, 1))
                    .collect();
                Ok(if gpus.is_empty() { adapters.iter().map(|a| (a.index, 1)).collect() } else { gpus })
            }
            Self::Devices(items) => items
                .iter()
                .map(|d| {
                    let index = match &d.adapter {
                        AdapterSelector::Index(i) => adapters.get(*i).map(|a| a.index),
                        AdapterSelector::Name(n) => adapters
                            .iter()
                            .find(|a| {
                                a.name.to_lowercase().contains(n)
                                    || a.vendor_name() == n
                                    || a.driver_name.to_lowercase().contains(n)
                                    || a.driver_id.to_lowercase().contains(n)
                            })
                            .map(|a| a.index),
                    };
                    let selector = match &d.adapter {
                        AdapterSelector::Index(i) => i.to_string(),
                        AdapterSelector::Name(n) => n.clone(),
                    };
                    index
                        .map(|i| (i, d.queues))
                        .ok_or_else(|| Error::NoSuchAdapter { selector, available: available() })
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        use AdapterSelector::*;
        assert_eq!(GroupSpec::parse("all").unwrap(), GroupSpec::All);
        assert_eq!(GroupSpec::parse("GPUs").unwrap(), GroupSpec::Gpus);
        assert_eq!(
            GroupSpec::parse("0,0").unwrap(),
            GroupSpec::Devices(vec![
                DeviceSpec { adapter: Index(0), queues: 1, shared_queue: false },
                DeviceSpec { adapter: Index(0), queues: 1, shared_queue: false }
            ])
        );
        assert_eq!(
            GroupSpec::parse("0x2").unwrap(),
            GroupSpec::Devices(vec![DeviceSpec { adapter: Index(0), queues: 2, shared_queue: false }])
        );
        assert_eq!(
            GroupSpec::parse("NVIDIA, llvmpipe").unwrap(),
            GroupSpec::Devices(vec![
                DeviceSpec { adapter: Name("nvidia".into()), queues: 1, shared_queue: false },
                DeviceSpec { adapter: Name("llvmpipe".into()), queues: 1, shared_queue: false }
            ])
        );
        assert_eq!(
            GroupSpec::parse("nvidia*4").unwrap(),
            GroupSpec::Devices(vec![DeviceSpec {
                adapter: Name("nvidia".into()),
                queues: 4,
                shared_queue: false
            }])
        );
        assert_eq!(
            GroupSpec::parse("rx7900").unwrap(),
            GroupSpec::Devices(vec![DeviceSpec {
                adapter: Name("rx7900".into()),
                queues: 1,
                shared_queue: false
            }])
        );
        assert_eq!(
            GroupSpec::parse("1*3").unwrap(),
            GroupSpec::Devices(vec![DeviceSpec { adapter: Index(1), queues: 3, shared_queue: false }])
        );
    }

    fn adapter(index: usize, device_type: DeviceType) -> AdapterInfo {
        AdapterInfo {
            index,
            name: format!("adapter {index}"),
            vendor_id: 0,
            device_id: 0,
            device_type,
            driver_id: String::new(),
            driver_name: String::new(),
            driver_info: String::new(),
            driver_version: String::new(),
            api_version: String::new(),
            caps: Default::default(),
        }
    }

    /// A model's default group: every GPU once, a CPU device only where there is no GPU.
    #[test]
    fn gpus_leaves_cpu_devices_out_beside_a_gpu() {
        use DeviceType::*;
        let resolve = |types: &[DeviceType]| {
            let adapters: Vec<AdapterInfo> = types.iter().enumerate().map(|(i, &t)| adapter(i, t)).collect();
            GroupSpec::Gpus.resolve(&adapters).unwrap()
        };
        assert_eq!(resolve(&[Discrete, Cpu]), vec![(0, 1)]);
        assert_eq!(resolve(&[Cpu, Integrated, Discrete]), vec![(1, 1), (2, 1)]);
        assert_eq!(resolve(&[Cpu]), vec![(0, 1)]);
        // `all` keeps every adapter, and two members on the only one.
        assert_eq!(
            GroupSpec::All.resolve(&[adapter(0, Discrete), adapter(1, Cpu)]).unwrap(),
            vec![(0, 1), (1, 1)]
        );
        assert_eq!(GroupSpec::All.resolve(&[adapter(0, Cpu)]).unwrap(), vec![(0, 1), (0, 1)]);
    }

    #[test]
    fn rejects_malformed_values() {
        for bad in
            ["0,", ",1", "0x0", "0x65", "a/b", "0,,1", "99999999999999999999999", "nvidia*", "*2", "a*b"]
        {
            assert!(
                matches!(GroupSpec::parse(bad), Err(Error::BadConfig { .. })),
                "{bad} should be rejected"
            );
        }
    }
}
