//! The members and their all-reduce: one `wgpu::Device` per member opened by crossgpu (with the
//! interop extensions its all-reduce needs), handed to burn's wgpu runtime (cubecl-wgpu's
//! `try_init_device`), and a [`crossgpu::embed::WgpuComm`] over the same devices that sums
//! burn's own tensor buffers in place. [`Comm`]'s documentation says how.

use burn::tensor::{DType, Device, Tensor};
use burn_cubecl::{tensor::CubeTensor, CubeBackend, CubeDevice};
use crossgpu::embed::{self, WgpuComm};
use cubecl::wgpu::{AutoCompiler, RuntimeOptions, WgpuDevice, WgpuServer, WgpuSetup};

use crate::error::{Error, Result};

/// The most f32 elements one all-reduce of gradients carries by default (64 MiB): a larger
/// model's gradients go in several; a single parameter larger than this goes alone.
pub const BUCKET_ELEMENTS: usize = 16 << 20;

/// One member: a wgpu device crossgpu opened, and burn's device on it.
struct Member {
    name: String,
    device: wgpu::Device,
    cube: WgpuDevice,
    burn: Device,
}

/// A group of burn devices, one per member, and the all-reduce across them.
///
/// # How a burn tensor is summed
///
/// A burn float tensor on the wgpu backend (without fusion) is a `CubeTensor`: a handle into
/// cubecl's memory pool, which sub-allocates tensors from large `wgpu::Buffer`s. The
/// all-reduce takes the tensor's primitive, asks cubecl for the handle's buffer and byte
/// offset (`Client::get_resource`, which also pins the allocation while it is held), flushes
/// cubecl's queued work to the member's queue, and hands `(buffer, offset)` to
/// [`WgpuComm::all_reduce_ranges`](crossgpu::embed::WgpuComm::all_reduce_ranges). The sum is
/// written over the tensor's own memory; nothing is copied through the host but the
/// all-reduce's own exchange.
///
/// A tensor that shares its memory with another (a clone, a view), or is not laid out
/// contiguously, is first copied into a buffer of its own by a cubecl kernel on its device,
/// so summing it never changes another tensor.
///
/// # Ordering with burn's work
///
/// cubecl records burn's operations into its own command encoder and submits them on its
/// member's `wgpu::Queue`, the queue crossgpu submits to. The all-reduce flushes that encoder
/// first, so every burn operation issued before the call comes before the all-reduce in queue
/// order; crossgpu's command buffers begin and end with a global memory barrier, so every
/// burn operation issued after the call sees the sum. Reading a result (`into_data`) waits for
/// the GPU as usual. One thread drives a [`Comm`] and its members' burn work (the contract of
/// [`crossgpu::embed`]: no other thread submits to the queues while an all-reduce is
/// submitted).
///
/// # Example
///
/// ```no_run
/// use crossgpu_burn::{burn::tensor::Tensor, Comm};
///
/// // Two members on the first two Vulkan adapters (or one adapter twice: "0,0").
/// let mut comm = Comm::open("0,1", 2)?;
/// let parts: Vec<Tensor<2>> = comm
///     .devices()
///     .iter()
///     .map(|d| Tensor::<2>::ones([64, 64], d))
///     .collect();
/// let sums = comm.all_reduce(parts)?; // every element 2.0, on each member's device
/// # Ok::<(), crossgpu_burn::Error>(())
/// ```
pub struct Comm {
    // Before `members`: the communicator's drop waits for its GPU work on their devices.
    pub(crate) wgpu: WgpuComm,
    members: Vec<Member>,
    /// The most f32 one all-reduce of gradients carries ([`Comm::set_bucket_elements`]).
    pub(crate) bucket_elements: usize,
    /// Tensors copied before their sum because their memory was shared or strided.
    pub(crate) copied: u64,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm").field("members", &self.names()).finish()
    }
}

impl Comm {
    /// `n` members on the Vulkan adapters `spec` names (crossgpu's `CROSSGPU_DEVICES`
    /// convention, [`crossgpu::embed::select_adapters`]: indices in enumeration order or name
    /// fragments, taken round-robin — `0,1` for two GPUs, `llvmpipe` for lavapipe, `0,0` for
    /// two devices on one adapter), through a wgpu instance of its own (Vulkan; validation as
    /// `WGPU_VALIDATION` and wgpu's other environment variables say).
    ///
    /// Errors: `n` of zero, no Vulkan adapter, a `spec` no adapter matches, and those of
    /// [`Comm::from_adapters`].
    pub fn open(spec: &str, n: usize) -> Result<Self> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::VULKAN;
        desc.flags = wgpu::InstanceFlags::from_build_config().with_env();
        let instance = wgpu::Instance::new(desc);
        let adapters: Vec<wgpu::Adapter> =
            pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN)).into_iter().collect();
        if adapters.is_empty() {
            return Err(crossgpu::Error::NoDriver("wgpu lists no Vulkan adapter".into()).into());
        }
        let picked = embed::select_adapters(&adapters, spec, n)?;
        Self::from_adapters(&instance, &picked)
    }

    /// One member on each of `adapters` (of `instance`, Vulkan), in member order; an adapter
    /// named twice gets two devices. Each device is opened by crossgpu
    /// ([`embed::request_device`]) with the adapter's features and limits, as burn's own
    /// set-up asks for them, and registered with burn's wgpu runtime.
    ///
    /// cubecl keeps a registered device for the rest of the process (its registry has no
    /// removal): dropping a `Comm` frees the all-reduce's memory, not the devices.
    ///
    /// Errors: no adapter, a non-Vulkan adapter, a device crossgpu or burn cannot open.
    pub fn from_adapters(instance: &wgpu::Instance, adapters: &[wgpu::Adapter]) -> Result<Self> {
        if adapters.is_empty() {
            return Err(crossgpu::Error::InvalidArgument("a Comm needs at least one adapter".into()).into());
        }
        let mut members = Vec::with_capacity(adapters.len());
        let mut queues = Vec::with_capacity(adapters.len());
        for (i, adapter) in adapters.iter().enumerate() {
            let info = adapter.get_info();
            if info.backend != wgpu::Backend::Vulkan {
                return Err(crossgpu::Error::InvalidArgument(format!(
                    "adapter {i} ({}) is on {:?}; crossgpu needs Vulkan",
                    info.name, info.backend
                ))
                .into());
            }
            // What cubecl-wgpu's own set-up requests (every feature but mappable primary
            // buffers, the adapter's limits), so burn sees the device it would have opened —
            // without wgpu's experimental features, which cubecl's WGSL path does not need and
            // which would take `ExperimentalFeatures::enabled()` (an unsafe promise).
            let desc = wgpu::DeviceDescriptor {
                label: Some("crossgpu-burn member"),
                required_features: adapter
                    .features()
                    .difference(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
                    .difference(wgpu::Features::all_experimental_mask()),
                required_limits: adapter.limits(),
                memory_hints: wgpu::MemoryHints::MemoryUsage,
                ..Default::default()
            };
            let (device, queue) = embed::request_device(adapter, &desc)?;
            let setup = WgpuSetup {
                instance: instance.clone(),
                adapter: adapter.clone(),
                device: device.clone(),
                queue: queue.clone(),
                backend: wgpu::Backend::Vulkan,
            };
            let options = RuntimeOptions::try_default()
                .map_err(|e| Error::Register { member: i, why: e.to_string() })?;
            let cube = cubecl::wgpu::try_init_device(setup, options)
                .map_err(|e| Error::Register { member: i, why: e.to_string() })?;
            let burn = Device::from(cube.clone());
            members.push(Member { name: info.name, device, cube, burn });
            queues.push(queue);
        }
        let pairs: Vec<(&wgpu::Device, &wgpu::Queue)> =
            members.iter().map(|m| &m.device).zip(queues.iter()).collect();
        let wgpu = WgpuComm::new(&pairs)?;
        Ok(Self { wgpu, members, bucket_elements: BUCKET_ELEMENTS, copied: 0 })
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there are no members (never: a `Comm` has at least one).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// burn's device of each member, in member order: create tensors and modules on these.
    /// `device.clone().autodiff()` gives the member's autodiff device.
    pub fn devices(&self) -> Vec<Device> {
        self.members.iter().map(|m| m.burn.clone()).collect()
    }

    /// burn's device of `member`. Panics if there is no such member (an index, like a slice's).
    pub fn device(&self, member: usize) -> &Device {
        &self.members[member].burn
    }

    /// cubecl's device of `member`.
    pub(crate) fn cube(&self, member: usize) -> &WgpuDevice {
        &self.members[member].cube
    }

    /// The adapter name of each member, in member order.
    pub fn names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    /// Sums `tensors` (one per member, in member order, each on its member's device, f32, all
    /// of one shape) across the members and returns the sums, one per member on its device:
    /// every member's result is bitwise the same (each device adds the members' values in
    /// member order). The sum is written into the tensors' own memory where they own it (see
    /// [`Comm`]'s documentation); a tensor sharing memory with another is copied
    /// first. Returns once the work is submitted; reading a result waits for it.
    ///
    /// The tensors are consumed: on an error they are dropped.
    ///
    /// Errors, before any work is submitted: a wrong number of tensors, a tensor of another
    /// dtype, on another device, of another shape, or taking part in an autodiff graph;
    /// larger than the devices can bind. Then crossgpu's errors (a failed member poisons the
    /// `Comm`).
    pub fn all_reduce<const D: usize>(&mut self, tensors: Vec<Tensor<D>>) -> Result<Vec<Tensor<D>>> {
        let n = self.members.len();
        if tensors.len() != n {
            return Err(Error::Count { what: "all_reduce", expected: n, got: tensors.len() });
        }
        let shape = tensors[0].dims();
        for (i, t) in tensors.iter().enumerate() {
            self.check(i, t, &shape)?;
        }
        let len: usize = shape.iter().product();
        // Primitives that own their memory, contiguously.
        let mut prims = Vec::with_capacity(n);
        for (i, t) in tensors.into_iter().enumerate() {
            let p = t.try_into_primitive::<CubeBackend>().map_err(|e| Error::Runtime {
                member: i,
                why: format!("not a tensor of burn's wgpu backend without fusion: {e:?}"),
            })?;
            let owned = p.can_mut() && p.is_contiguous() && p.handle.size() >= (len * 4) as u64;
            if !owned {
                self.copied += 1;
            }
            prims.push(if owned { p } else { p.copy() });
        }
        if len > 0 {
            self.sum_in_place(&prims, len)?;
        }
        Ok(prims.into_iter().map(Tensor::from_primitive::<CubeBackend>).collect())
    }

    /// How many tensors [`Comm::all_reduce`] has copied before summing them, because another
    /// tensor shared their memory (a clone still alive) or they were strided views: each copy
    /// is a kernel and a buffer more. Drop or move the other handles to sum in place.
    pub fn copied_tensors(&self) -> u64 {
        self.copied
    }

    /// Blocks until every submitted all-reduce, and every burn operation queued on a member,
    /// has completed on the members' GPUs. Call it before the process exits: burn's runtime
    /// records queued work on threads of its own, which must not still be inside the Vulkan
    /// driver (or a layer) while the process's exit handlers tear it down.
    pub fn synchronize(&mut self) -> Result<()> {
        self.wgpu.synchronize()?;
        for (i, m) in self.members.iter().enumerate() {
            m.burn.sync().map_err(|e| Error::Runtime { member: i, why: format!("{e:?}") })?;
        }
        Ok(())
    }

    fn check<const D: usize>(&self, i: usize, t: &Tensor<D>, shape: &[usize; D]) -> Result<()> {
        if t.is_autodiff() {
            return Err(Error::Autodiff { member: i });
        }
        if t.dtype() != DType::F32 {
            return Err(Error::DType { member: i, got: t.dtype() });
        }
        let device = t.device();
        if device != self.members[i].burn {
            return Err(Error::Device {
                member: i,
                got: format!("{device:?}"),
                expected: format!("{:?}", self.members[i].burn),
            });
        }
        if t.dims() != *shape {
            return Err(Error::Shape { member: i, got: t.dims().to_vec(), expected: shape.to_vec() });
        }
        Ok(())
    }

    /// The all-reduce of `len` f32 of each primitive's memory, in place.
    fn sum_in_place(&mut self, prims: &[CubeTensor], len: usize) -> Result<()> {
        let mut resources = Vec::with_capacity(prims.len());
        for (i, p) in prims.iter().enumerate() {
            if p.device != CubeDevice::Wgpu(self.members[i].cube.clone()) {
                return Err(Error::Device {
                    member: i,
                    got: format!("{:?}", p.device),
                    expected: format!("{:?}", self.members[i].cube),
                });
            }
            let runtime = |e: &dyn std::fmt::Debug| Error::Runtime { member: i, why: format!("{e:?}") };
            // The handle's buffer and offset; held (pinned) until the work is submitted.
            let r = p
                .client
                .get_resource::<WgpuServer<AutoCompiler>>(p.handle.clone())
                .map_err(|e| runtime(&e))?;
            if r.resource().size < (len * 4) as u64 {
                return Err(runtime(&format!(
                    "the tensor's memory holds {} bytes, its {len} f32 need more",
                    r.resource().size
                )));
            }
            // burn's queued work (the tensor's producer among it) goes first on the queue.
            p.client.flush().map_err(|e| runtime(&e))?;
            resources.push(r);
        }
        let ranges: Vec<(&wgpu::Buffer, u64)> =
            resources.iter().map(|r| (&r.resource().buffer, r.resource().offset)).collect();
        self.wgpu.all_reduce_ranges(&ranges, len)?;
        Ok(())
    }
}
