//! The GPU itself, through burn: burn-wgpu's device (Vulkan, Metal or DX12 natively, WebGPU in
//! the browser) and its CubeCL client, one per process; what its adapter is; each model's own
//! stream on it ([`Stream`]); and the counts and errors of everything a model does there.
//!
//! burn and CubeCL make every GPU object: buffers, pipelines, bind groups, command encoders and
//! submissions. tokenometer asks them for buffers (each its own device allocation), writes,
//! launches of its WGSL kernels and graph replays (`launch.rs`), and counts what it asked
//! ([`Counts`]), so that a step says what it takes; the page's test counts the same in the
//! browser's own WebGPU calls. wgpu's reaction to a validation error is a panic (and CubeCL's
//! handler panics its device thread); here every error is kept and becomes the next read-back's
//! error, one sentence, and a lost device says so.

use std::sync::{Arc, Mutex};

use burn_wgpu::graphics::AutoGraphicsApi;
use burn_wgpu::{RuntimeOptions, WgpuDevice, wgpu};
use cubecl::bytes::Bytes;
use cubecl::client::Client;
use cubecl::server::{Handle, ServerError};
use cubecl_environment::stream::StreamId;

use crate::error::{Error, Result};

/// Launches CubeCL gathers into one command buffer before it submits on its own: more than a
/// step's dispatches (a SmolLM2 step is 122, Gemma 3 270M's 74), so that a step is one submit,
/// its read-back's (CubeCL's default of 32 split a step into four).
const TASKS_MAX: usize = 8192;

/// The adapter wgpu was granted and its device.
#[derive(Clone)]
pub struct Granted {
    /// The device, for the rest of the process (it is never given back).
    pub gpu: &'static Gpu,
    /// Its name ("NVIDIA H100", "google swiftshader").
    pub adapter: String,
    /// Driver and limits worth showing, one line.
    pub details: String,
    /// A software renderer posing as a GPU (see `is_software`).
    pub software: bool,
}

/// How many of each thing a model has asked burn for on the device since it was loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Buffers allocated (each its own device allocation).
    pub buffers: u64,
    /// Bind groups CubeCL builds for what the model asked: one a dispatch launched outside a
    /// graph or recorded into one, none a replayed dispatch.
    pub bind_groups: u64,
    pub dispatches: u64,
    /// Queue submits CubeCL makes for the model: one a read-back, and one a write that follows
    /// launched work (CubeCL submits that work before the write lands, to keep their order).
    pub submits: u64,
    /// Host time spent on steps up to their read-back, in ns: recording, writing their inputs,
    /// launching or replaying (CubeCL encodes a replay before it answers). Not the submits, which
    /// CubeCL makes inside the read-back, where a software adapter also waits for the work.
    pub host_ns: u64,
}

impl std::ops::Sub for Counts {
    type Output = Counts;
    fn sub(self, before: Counts) -> Counts {
        Counts {
            buffers: self.buffers - before.buffers,
            bind_groups: self.bind_groups - before.bind_groups,
            dispatches: self.dispatches - before.dispatches,
            submits: self.submits - before.submits,
            // A time, not a count: two runs' difference may be below zero by noise.
            host_ns: self.host_ns.saturating_sub(before.host_ns),
        }
    }
}

impl Counts {
    /// Each count over `steps` (whole numbers: the tests check that they divide).
    pub fn per(self, steps: u64) -> Counts {
        Counts {
            buffers: self.buffers / steps,
            bind_groups: self.bind_groups / steps,
            dispatches: self.dispatches / steps,
            submits: self.submits / steps,
            host_ns: self.host_ns / steps,
        }
    }

    /// Host microseconds a dispatch: recording, writing, launching or replaying, not submitting
    /// or waiting.
    pub fn host_us_per_dispatch(&self) -> f64 {
        self.host_ns as f64 / 1e3 / self.dispatches.max(1) as f64
    }
}

/// burn's device and CubeCL's client on it, its limits, and what has gone wrong on it.
pub struct Gpu {
    /// burn's device (CubeCL's wgpu device), which burn's graph capture names.
    pub device: cubecl::Device,
    /// CubeCL's client on it; each model issues on a stream of its own ([`Stream`]).
    client: Client,
    pub limits: wgpu::Limits,
    /// Whether the adapter has `timestamp-query`: CubeCL then times a profile window by the
    /// device's own clock (the step's phases, `timer.rs`).
    pub timestamps: bool,
    /// The first error wgpu reported (validation, out of memory), not yet returned.
    error: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Gpu {
    /// The device's state as a result: an error wgpu reported since the last check.
    pub fn check(&self) -> Result<()> {
        match self.error.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(error) => Err(Error::Device(error)),
            None => Ok(()),
        }
    }

    /// Remember `error` for the next check (the first one wins), as wgpu's own errors are.
    pub fn fail(&self, error: String) {
        self.error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(error);
    }

    /// The bytes one storage binding (and one buffer) may hold on this device.
    pub fn most_bytes(&self) -> u64 {
        let l = &self.limits;
        l.max_storage_buffer_binding_size.min(l.max_buffer_size)
    }
}

/// CubeCL's error as ours: a lost device says so (nothing more runs on it), anything else is
/// the device's error, one line.
pub fn server_error(e: ServerError) -> Error {
    let message = one_line(&e.to_string());
    if e.is_device_poisoned() {
        Error::DeviceLost(message)
    } else {
        Error::Device(message)
    }
}

/// A model's own CubeCL stream on the device. Everything one model does (its buffers, writes,
/// launches, graphs and reads) goes on it, in order: a graph's replay is ordered only against
/// work on the stream it was captured on, and a buffer made on another stream costs a flush of
/// that stream whenever it is bound.
pub struct Stream {
    pub gpu: &'static Gpu,
    id: StreamId,
}

impl Stream {
    pub fn new(gpu: &'static Gpu) -> Stream {
        Stream {
            gpu,
            id: StreamId::allocate(),
        }
    }

    /// Run `f` on CubeCL's client with this stream current: every call it makes issues here,
    /// burn's graph capture and CubeCL's allocation windows included (they ask for the current
    /// stream). A read's future borrows the client for as long as the process (the device's).
    pub fn run<T>(&self, f: impl FnOnce(&'static Client) -> T) -> T {
        self.id.executes(|| f(&self.gpu.client))
    }

    /// A buffer of `bytes` (at least 16: WebGPU binds no empty buffer), zeroed, counted. Each is
    /// its own device allocation (CubeCL's dedicated allocations), never a slice of a shared
    /// page: a page bound read-only by one binding of a dispatch and read-write by another
    /// is refused, and what the plan frees goes back to the driver.
    pub fn buffer(&self, counts: &mut Counts, bytes: u64) -> Handle {
        counts.buffers += 1;
        let size = bytes.max(16).next_multiple_of(4) as usize;
        self.run(|c| c.memory_dedicated_allocation((), |_| c.empty(size)))
    }

    /// A buffer holding `words`, counted.
    pub fn buffer_with(&self, counts: &mut Counts, words: Vec<u32>) -> Handle {
        if words.len() < 4 {
            let handle = self.buffer(counts, 16);
            self.write(&handle, 0, &words);
            return handle;
        }
        counts.buffers += 1;
        let bytes = Bytes::from_elems(words);
        self.run(|c| c.memory_dedicated_allocation(bytes, |bytes| c.create(bytes)))
    }

    /// Write `words` into `handle` from byte `offset`, on this stream: after the work launched
    /// before it, before the work launched after it.
    pub fn write(&self, handle: &Handle, offset: u64, words: &[u32]) {
        if words.is_empty() {
            return;
        }
        let (end, size) = (offset + 4 * words.len() as u64, handle.size_in_used());
        if end > size {
            self.gpu.fail(format!(
                "a write of {end} bytes into a GPU buffer of {size} (a bug: please report it)"
            ));
            return;
        }
        let range = handle.clone().offset_start(offset).offset_end(size - end);
        let bytes = Bytes::from_bytes_vec(bytemuck::cast_slice(words).to_vec());
        self.run(|c| c.write(&range, bytes));
    }
}

/// Names of software renderers that present themselves as GPU adapters.
const SOFTWARE_ADAPTERS: [&str; 6] = [
    "swiftshader",
    "llvmpipe",
    "lavapipe",
    "softpipe",
    "microsoft basic render",
    "warp",
];

/// Whether an adapter is a software renderer, by its name or device type.
fn is_software(name: &str, device_type: wgpu::DeviceType) -> bool {
    let name = name.to_ascii_lowercase();
    device_type == wgpu::DeviceType::Cpu || SOFTWARE_ADAPTERS.iter().any(|s| name.contains(s))
}

/// One device per process; later calls reuse it. The lock is held across the initialization, so
/// that concurrent first calls (parallel tests) share one device: the Vulkan loader misbehaves
/// when instances come and go on several threads at once.
static GPU: async_lock::Mutex<Option<Granted>> = async_lock::Mutex::new(None);

/// The GPU device (async: in a browser this awaits WebGPU's adapter and device). burn-wgpu
/// chooses the adapter (a hardware one before a software one) and asks for its own limits and
/// features, `timestamp-query` among them where the adapter has it.
pub async fn init() -> Result<Granted> {
    let mut ready = GPU.lock().await;
    if let Some(granted) = ready.as_ref() {
        return Ok(granted.clone());
    }
    let device = WgpuDevice::default();
    let options = RuntimeOptions {
        tasks_max: TASKS_MAX,
        ..RuntimeOptions::try_default().map_err(|e| Error::Device(one_line(&e.to_string())))?
    };
    let setup = burn_wgpu::try_init_setup_async::<AutoGraphicsApi>(&device, options)
        .await
        .map_err(|e| {
            Error::Device(format!(
                "no usable GPU adapter: {}",
                one_line(&e.to_string())
            ))
        })?;
    let info = setup.adapter.get_info();
    let limits = setup.device.limits();
    let error = Arc::new(Mutex::new(None));
    {
        // CubeCL's handler panics on any error of a device it has not seen lost; keep the error
        // instead, for the next read-back to return (a device lost is CubeCL's to notice: its
        // reads then fail as poisoned).
        let error = error.clone();
        setup
            .device
            .on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(one_line(&e.to_string()));
            }));
    }
    let (name, fallback) = if !info.name.is_empty() {
        (info.name.clone(), false)
    } else {
        // Browsers leave wgpu's adapter name empty; ask WebGPU itself for vendor and architecture.
        browser_adapter()
            .await
            .unwrap_or_else(|| (format!("{:?} {:?}", info.backend, info.device_type), false))
    };
    let device = cubecl::Device::Wgpu(device);
    let gpu: &'static Gpu = Box::leak(Box::new(Gpu {
        timestamps: setup
            .device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY),
        client: device.client(),
        device,
        limits: limits.clone(),
        error,
    }));
    let granted = Granted {
        details: format!(
            "{:?}, {:?}, driver {:?}, max buffer {} MiB, max storage binding {} MiB, max workgroup invocations {}",
            info.backend,
            info.device_type,
            info.driver,
            limits.max_buffer_size >> 20,
            limits.max_storage_buffer_binding_size >> 20,
            limits.max_compute_invocations_per_workgroup,
        ),
        software: fallback || is_software(&name, info.device_type),
        adapter: name,
        gpu,
    };
    *ready = Some(granted.clone());
    Ok(granted)
}

/// An error's innermost cause, on one line, as every error message here is (wgpu's nest:
/// "Validation Error\n\nCaused by:\n  ...").
pub fn one_line(message: &str) -> String {
    let cause = message.rsplit("Caused by:").next().unwrap_or(message);
    cause.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `GPUAdapter.info` as "vendor architecture (description)", e.g. "google swiftshader", and its
/// `isFallbackAdapter` (a browser's own word that the adapter is a software one).
#[cfg(target_arch = "wasm32")]
async fn browser_adapter() -> Option<(String, bool)> {
    use wasm_bindgen::{JsCast, JsValue};
    let get = |target: &JsValue, key: &str| js_sys::Reflect::get(target, &key.into()).ok();
    let gpu = get(&get(&js_sys::global(), "navigator")?, "gpu")?;
    let request: js_sys::Function = get(&gpu, "requestAdapter")?.dyn_into().ok()?;
    let promise: js_sys::Promise = request.call0(&gpu).ok()?.dyn_into().ok()?;
    let adapter = wasm_bindgen_futures::JsFuture::from(promise).await.ok()?;
    let info = get(&adapter, "info")?;
    let field = |key: &str| {
        get(&info, key)
            .and_then(|v| v.as_string())
            .filter(|s| !s.is_empty())
    };
    let mut name: Vec<String> = ["vendor", "architecture"]
        .iter()
        .filter_map(|k| field(k))
        .collect();
    if let Some(description) = field("description") {
        name.push(format!("({description})"));
    }
    // Older browsers put the flag on the adapter itself.
    let fallback = [&info, &adapter]
        .iter()
        .any(|o| get(o, "isFallbackAdapter").is_some_and(|v| v.is_truthy()));
    (!name.is_empty()).then(|| (name.join(" "), fallback))
}

#[cfg(not(target_arch = "wasm32"))]
async fn browser_adapter() -> Option<(String, bool)> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_their_innermost_cause_on_one_line() {
        assert_eq!(
            one_line(
                "Validation Error\n\nCaused by:\n  In a set_bind_group command\n    Buffer is invalid\n"
            ),
            "In a set_bind_group command Buffer is invalid"
        );
        assert_eq!(
            one_line("Lost: Device was destroyed."),
            "Lost: Device was destroyed."
        );
    }
}
