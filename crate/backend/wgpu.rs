//! The wgpu backend's device: burn's wgpu runtime on the adapter it is granted, and what that
//! adapter is (a software renderer counts as none for `auto`).

use burn::prelude::*;

use crate::error::{Error, Result};

/// The adapter wgpu was granted: burn's device on it, and what it is.
#[derive(Debug, Clone)]
pub struct Granted {
    pub device: Device,
    /// Its name ("NVIDIA H100", "google swiftshader").
    pub adapter: String,
    /// Driver and limits worth showing, one line.
    pub details: String,
    /// A software renderer posing as a GPU (see [`is_software`]).
    pub software: bool,
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
fn is_software(name: &str, device_type: burn::tensor::wgpu::wgpu::DeviceType) -> bool {
    let name = name.to_ascii_lowercase();
    device_type == burn::tensor::wgpu::wgpu::DeviceType::Cpu
        || SOFTWARE_ADAPTERS.iter().any(|s| name.contains(s))
}

/// burn registers its wgpu runtime once per process; later calls reuse it. The lock is held across the
/// initialization: two concurrent first calls (parallel tests) would otherwise both register, and the
/// second fails with "Service already initialized".
/// Compute tasks gathered into one queue submit. burn's default, 32, split a stories260K decode step
/// (324 dispatches) into 12 submits; every submit costs validation and a round trip in the GPU
/// process. With room for a whole step, a step is one submit, made by its readback.
const WGPU_TASKS_PER_SUBMIT: usize = 4096;

static WGPU: async_lock::Mutex<Option<Granted>> = async_lock::Mutex::new(None);

/// Initialize the GPU backend (async: in a browser this awaits the WebGPU adapter).
pub async fn init() -> Result<Granted> {
    #[cfg(target_arch = "wasm32")]
    crate::gpu::run_constructors();
    let mut ready = WGPU.lock().await;
    if let Some(granted) = ready.as_ref() {
        return Ok(granted.clone());
    }
    let (device, setup) = Device::wgpu_options()
        .tasks_max(WGPU_TASKS_PER_SUBMIT)
        .init_with_setup_async()
        .await
        .map_err(|e| Error::Device(format!("no usable GPU adapter: {e}")))?;
    let info = setup.adapter.get_info();
    let limits = setup.adapter.limits();
    let (adapter, fallback) = if !info.name.is_empty() {
        (info.name.clone(), false)
    } else {
        // Browsers leave wgpu's adapter name empty; ask WebGPU itself for vendor and architecture.
        browser_adapter()
            .await
            .unwrap_or_else(|| (format!("{:?} {:?}", info.backend, info.device_type), false))
    };
    let software = fallback || is_software(&adapter, info.device_type);
    let granted = Granted {
        device,
        adapter,
        details: format!(
            "{:?}, {:?}, driver {:?}, max buffer {} MiB, max workgroup invocations {}, shader-f16 {}",
            info.backend,
            info.device_type,
            info.driver,
            limits.max_buffer_size >> 20,
            limits.max_compute_invocations_per_workgroup,
            setup
                .adapter
                .features()
                .contains(burn::tensor::wgpu::wgpu::Features::SHADER_F16),
        ),
        software,
    };
    *ready = Some(granted.clone());
    Ok(granted)
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
