//! The GPU itself: one wgpu device per process (Vulkan, Metal or DX12 natively, WebGPU in the
//! browser), what its adapter is, and the counts and errors of everything done on it.
//!
//! Every buffer and bind group a model makes goes through [`Gpu::buffer`] and
//! [`Gpu::bind_group`] with its plan's [`Counts`], and every dispatch and submit through its step
//! (`plan.rs`), so that the counts say what a decode step creates (nothing, once warm) and how
//! many dispatches it takes. wgpu's own reaction to a validation error is a panic; here every
//! error is kept and becomes the next read-back's error, one sentence, and a lost device says so.

use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use crate::error::{Error, Result};

/// The adapter wgpu was granted and its device.
#[derive(Clone)]
pub struct Granted {
    pub gpu: Arc<Gpu>,
    /// Its name ("NVIDIA H100", "google swiftshader").
    pub adapter: String,
    /// Driver and limits worth showing, one line.
    pub details: String,
    /// A software renderer posing as a GPU (see `is_software`).
    pub software: bool,
}

/// How many of each thing a model has done on the device since it was loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub buffers: u64,
    pub bind_groups: u64,
    pub dispatches: u64,
    pub submits: u64,
    /// Host time spent recording, encoding and submitting steps (not waiting for them), in ns.
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

    /// Host microseconds a dispatch: recording, encoding and submitting, not waiting.
    pub fn host_us_per_dispatch(&self) -> f64 {
        self.host_ns as f64 / 1e3 / self.dispatches.max(1) as f64
    }
}

/// The device, its queue and limits, and what has gone wrong on it.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: wgpu::Limits,
    /// Nanoseconds a timestamp tick where the adapter has `timestamp-query` (granted then), for
    /// the step's phases (`timer.rs`); `None` where it has not.
    pub timestamp_ns: Option<f32>,
    /// The first error wgpu reported (validation, out of memory), not yet returned.
    error: Arc<Mutex<Option<String>>>,
    /// Why the device was lost, once it was.
    lost: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Gpu {
    /// A buffer of `size` bytes (at least 16: WebGPU binds no empty buffer), counted.
    pub fn buffer(
        &self,
        counts: &mut Counts,
        label: &str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> wgpu::Buffer {
        counts.buffers += 1;
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: size.max(16).next_multiple_of(4),
            usage,
            mapped_at_creation: false,
        })
    }

    /// A buffer holding `words`, counted.
    pub fn buffer_with(
        &self,
        counts: &mut Counts,
        label: &str,
        words: &[u32],
        usage: wgpu::BufferUsages,
    ) -> wgpu::Buffer {
        let buffer = self.buffer(
            counts,
            label,
            4 * words.len() as u64,
            usage | wgpu::BufferUsages::COPY_DST,
        );
        if !words.is_empty() {
            self.queue
                .write_buffer(&buffer, 0, bytemuck::cast_slice(words));
        }
        buffer
    }

    /// A bind group of `buffers` in binding order, counted.
    pub fn bind_group(
        &self,
        counts: &mut Counts,
        layout: &wgpu::BindGroupLayout,
        buffers: &[&wgpu::Buffer],
    ) -> wgpu::BindGroup {
        counts.bind_groups += 1;
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout,
            entries: &entries,
        })
    }

    /// The device's state as a result: lost, or an error wgpu reported since the last check.
    pub fn check(&self) -> Result<()> {
        if let Some(why) = self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Err(Error::DeviceLost(why));
        }
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

/// The GPU device (async: in a browser this awaits WebGPU's adapter and device).
pub async fn init() -> Result<Granted> {
    let mut ready = GPU.lock().await;
    if let Some(granted) = ready.as_ref() {
        return Ok(granted.clone());
    }
    let backends = if cfg!(target_arch = "wasm32") {
        wgpu::Backends::BROWSER_WEBGPU
    } else {
        wgpu::Backends::PRIMARY
    };
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            apply_limit_buckets: false,
        })
        .await
        .map_err(|e| Error::Device(format!("no usable GPU adapter: {e}")))?;
    let info = adapter.get_info();
    // The adapter's own limits, not WebGPU's defaults: a storage binding of 128 MiB would split a
    // 150 MB classifier, and most adapters bind far more.
    let limits = adapter.limits();
    // Timestamps for the step's phases, wherever the adapter has them: granted, they cost
    // nothing until a phase clock is on (only then does a step write them).
    let timestamps = adapter.features() & wgpu::Features::TIMESTAMP_QUERY;
    let (device, queue) = adapter
        .request_device(&wgpu::DeviceDescriptor {
            label: Some("tokenometer"),
            required_features: timestamps,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        })
        .await
        .map_err(|e| Error::Device(format!("the GPU adapter refused a device: {e}")))?;
    let error = Arc::new(Mutex::new(None));
    let lost = Arc::new(Mutex::new(None));
    {
        let error = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(one_line(&e.to_string()));
        }));
        let lost = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            lost.lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(one_line(&format!("{reason:?}: {message}")));
        });
    }
    let (name, fallback) = if !info.name.is_empty() {
        (info.name.clone(), false)
    } else {
        // Browsers leave wgpu's adapter name empty; ask WebGPU itself for vendor and architecture.
        browser_adapter()
            .await
            .unwrap_or_else(|| (format!("{:?} {:?}", info.backend, info.device_type), false))
    };
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
        gpu: Arc::new(Gpu {
            timestamp_ns: (!timestamps.is_empty()).then(|| queue.get_timestamp_period()),
            device,
            queue,
            limits,
            error,
            lost,
        }),
    };
    *ready = Some(granted.clone());
    Ok(granted)
}

/// A read-back's outcome once wgpu calls back, and the task waiting for it.
type Mapping = (
    Option<std::result::Result<(), wgpu::BufferAsyncError>>,
    Option<Waker>,
);

/// Map `bytes` of `buffer` for reading and wait: natively by polling the device, in a browser by
/// awaiting WebGPU's promise.
pub(crate) async fn map(gpu: &Gpu, buffer: &wgpu::Buffer, bytes: u64) -> Result<()> {
    let state: Arc<Mutex<Mapping>> = Arc::default();
    let done = state.clone();
    buffer
        .slice(..bytes)
        .map_async(wgpu::MapMode::Read, move |result| {
            let mut s = done.lock().unwrap_or_else(|e| e.into_inner());
            s.0 = Some(result);
            if let Some(waker) = s.1.take() {
                waker.wake();
            }
        });
    #[cfg(not(target_arch = "wasm32"))]
    gpu.device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| {
            Error::Device(format!(
                "waiting for the GPU failed: {}",
                one_line(&e.to_string())
            ))
        })?;
    let result = std::future::poll_fn(|cx| {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        match s.0.take() {
            Some(result) => Poll::Ready(result),
            None => {
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    })
    .await;
    gpu.check()?;
    result.map_err(|e| {
        Error::Device(format!(
            "reading results back from the GPU failed: {}",
            one_line(&e.to_string())
        ))
    })
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
