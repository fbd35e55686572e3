//! Choosing the compute device at run time: the GPU (wgpu: Vulkan, Metal or DX12 natively, WebGPU
//! in the browser; `gpu/`) or the CPU (`cpu/`), both on tokenometer's own kernels; and the model on
//! the chosen one ([`Llama`]).

mod llama;

pub use llama::{Device, KvCache, Llama, Segment};

use std::fmt;
use std::str::FromStr;

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
    /// The GPU device for wgpu; `None` on the CPU.
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

    /// This CPU backend on `threads` (its adapter's name says how many, where more than one).
    pub fn with_threads(mut self, threads: Threads) -> Backend {
        if self.kind == BackendKind::Cpu && threads.count() > 1 {
            self.adapter = format!("CPU ({}), {} threads", self.isa.name(), threads.count());
        }
        self.threads = threads;
        self
    }

    /// Initialize the GPU backend (async: in a browser this awaits the WebGPU adapter).
    pub async fn wgpu() -> Result<Backend> {
        #[cfg(feature = "gpu")]
        {
            let granted = crate::gpu::init().await?;
            Ok(Backend {
                kind: BackendKind::Wgpu,
                device: Some(granted.gpu),
                isa: Isa::detect(),
                threads: Threads::one(),
                adapter: granted.adapter,
                details: granted.details,
                software: granted.software,
                auto_note: None,
            })
        }
        #[cfg(not(feature = "gpu"))]
        Err(Error::Unsupported(
            "this build of the engine has no GPU backend (the page's threaded build is the CPU engine alone): choose the CPU, or 1 thread for WebGPU".into(),
        ))
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
