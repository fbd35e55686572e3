//! tokenometer: a small Llama-family model on burn (WebGPU, Vulkan or CPU), and honest measurements
//! of what "tokens per second" means.
//!
//! Modules, one job each: [`weights`] (shapes and host arrays), [`loading`] (file formats),
//! [`tokenizer`], [`quant`], [`model`] (the forward pass, over the operations of `device_ops`
//! (burn tensors) or `host_ops` (the CPU, with [`kernels`] and [`packed`])), [`sampling`], [`engine`] (prefill and
//! decode, with events), [`sequence`] and [`scheduler`] (many requests in one batch, step by step), [`meter`] (the figures), [`synth`] (synthetic checkpoints), [`backend`]
//! (device choice), and, on wasm, `web` (the JavaScript API the page's worker uses).

pub mod backend;
#[cfg(not(target_arch = "wasm32"))]
pub mod cli;
mod device_ops;
pub mod engine;
pub mod error;
mod gpu_kernels;
mod host_ops;
pub mod kernels;
pub mod loading;
pub mod meter;
pub mod model;
pub mod packed;
pub mod quant;
pub mod sampling;
pub mod scheduler;
pub mod sequence;
pub mod synth;
pub mod tokenizer;
pub mod weights;

pub use backend::{Backend, BackendChoice, BackendKind};
pub use engine::{Engine, Event, Flow, GenerateOptions, ModelInfo, StopReason};
pub use error::{Error, Result};
pub use loading::ModelFiles;
pub use quant::Quant;
pub use sampling::Sampling;
pub use scheduler::{Request, Scheduler};
pub use sequence::SeqEvent;

#[cfg(target_arch = "wasm32")]
pub mod web;
