//! Choosing the compute device at run time: burn's wgpu backend (Vulkan/Metal natively, WebGPU in the
//! browser) or the CPU, where the model runs on tokenometer's own kernels (`cpu/`, natively and in
//! wasm) and burn is not involved (so the CPU has no burn device); and the model on the chosen one
//! ([`Llama`]).

mod llama;

pub use llama::{KvCache, Llama, Segment};

use std::fmt;
use std::str::FromStr;

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use crate::cpu::{Isa, Threads};
use crate::error::{Error, Result};

/// Which backend a model runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Cpu,
    Wgpu,
}

/// What the user asks for; `Auto` takes the GPU when an adapter is granted, else the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    Auto,
    Cpu,
    Wgpu,
}

impl FromStr for BackendChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(BackendChoice::Auto),
            "cpu" => Ok(BackendChoice::Cpu),
            "wgpu" | "webgpu" | "gpu" => Ok(BackendChoice::Wgpu),
            _ => Err(Error::Unsupported(format!(
                "backend {s:?}: choose auto, cpu or wgpu"
            ))),
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Wgpu => "wgpu",
        })
    }
}

/// A ready device and what it is, for the conditions line of every figure.
#[derive(Debug, Clone)]
pub struct Backend {
    pub kind: BackendKind,
    /// burn's device for wgpu; `None` on the CPU.
    pub device: Option<Device>,
    /// The instruction set of the CPU kernels (the host's share of the work on wgpu).
    pub isa: Isa,
    /// The CPU kernels' threads (one on wgpu).
    pub threads: Threads,
    /// The adapter's name ("CPU (AVX2)", "CPU (AVX2+VNNI)" for the CPU backend: its kernels'
    /// instruction set).
    pub adapter: String,
    /// Adapter details worth showing (driver, limits), one line.
    pub details: String,
    /// True for a software renderer posing as a GPU (SwiftShader, llvmpipe, lavapipe, WARP, or any
    /// adapter that says it is a fallback or a CPU device).
    pub software: bool,
    /// How `auto` decided, when it chose the CPU ("auto: CPU, the only GPU adapter (...) is software").
    pub auto_note: Option<String>,
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

static WGPU: async_lock::Mutex<Option<Backend>> = async_lock::Mutex::new(None);

impl Backend {
    pub fn cpu() -> Backend {
        Backend::cpu_with(Isa::detect())
    }

    /// The CPU backend with its kernels in `isa` (one this machine runs: see `Isa::available`),
    /// to compare instruction sets.
    pub fn cpu_with(isa: Isa) -> Backend {
        Backend {
            kind: BackendKind::Cpu,
            device: None,
            isa,
            threads: Threads::one(),
            adapter: format!("CPU ({})", isa.name()),
            details: String::new(),
            software: false,
            auto_note: None,
        }
    }

    /// Initialize the GPU backend (async: in a browser this awaits the WebGPU adapter).
    /// This CPU backend on `threads` (its adapter's name says how many, where more than one).
    pub fn with_threads(mut self, threads: Threads) -> Backend {
        if self.kind == BackendKind::Cpu && threads.count() > 1 {
            self.adapter = format!("CPU ({}), {} threads", self.isa.name(), threads.count());
        }
        self.threads = threads;
        self
    }

    pub async fn wgpu() -> Result<Backend> {
        #[cfg(target_arch = "wasm32")]
        crate::gpu::run_constructors();
        let mut ready = WGPU.lock().await;
        if let Some(backend) = ready.as_ref() {
            return Ok(backend.clone());
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
        let backend = Backend {
            kind: BackendKind::Wgpu,
            device: Some(device),
            isa: Isa::detect(),
            threads: Threads::one(),
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
            auto_note: None,
        };
        *ready = Some(backend.clone());
        Ok(backend)
    }

    /// Resolve a choice. `Auto` takes the GPU when a hardware adapter is granted and the CPU
    /// otherwise, saying why: a software adapter counts as none. Measured in headless Chromium here,
    /// the SwiftShader adapter spent 19.6 s warming up and decoded stories260K at 0.2 tok/s, where
    /// the CPU backend does 200-300. An explicit `Wgpu` takes whatever adapter there is.
    pub async fn init(choice: BackendChoice) -> Result<Backend> {
        match choice {
            BackendChoice::Cpu => Ok(Backend::cpu()),
            BackendChoice::Wgpu => Backend::wgpu().await,
            BackendChoice::Auto => Ok(match Backend::wgpu().await {
                Ok(gpu) if !gpu.software => gpu,
                Ok(gpu) => Backend {
                    auto_note: Some(format!(
                        "auto: CPU, the only GPU adapter ({}) is software",
                        gpu.adapter
                    )),
                    ..Backend::cpu()
                },
                Err(_) => Backend {
                    auto_note: Some("auto: CPU, no GPU adapter was granted".into()),
                    ..Backend::cpu()
                },
            }),
        }
    }
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
