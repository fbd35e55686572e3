//! tokenometer: a small Llama-family model on the GPU (WebGPU, Vulkan, Metal; its own WGSL kernels) or its own CPU kernels, and
//! honest measurements of what "tokens per second" means.
//!
//! # Layers
//!
//! The crate is a stack of layers; a module uses only the layers below its own (its own
//! layer's siblings neither). This list is the rule, and `tests/layers.rs` reads every file's
//! imports and checks them against it. From the bottom:
//!
//! 1. `error`: the one error type.
//! 2. `formats`: GGUF block types, one file each, with a scalar reference.
//! 3. `model`: config, host weights, precision, the `Ops` trait and the one forward pass.
//! 4. `cpu` | `gpu`: the backends' operations and kernels (per instruction set, per format).
//! 5. `backend` | `loading`: the model on a chosen device; model files and tokenizers.
//! 6. `decode`: the engine, sampling, sequences and the scheduler.
//! 7. `meter`: the figures, computed once from events.
//! 8. `api`: the command line, the wasm API, and the drivers they share.
//!
//! `docs/architecture.md` draws it, with how one token travels through them.

// LAYERS: error; formats; model; cpu gpu; backend loading; decode; meter; api

pub mod api;
pub mod backend;
pub mod cpu;
pub mod decode;
pub mod error;
pub mod formats;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod loading;
pub mod meter;
pub mod model;

pub use backend::{Backend, BackendChoice, BackendKind};
pub use decode::{
    Engine, Event, Flow, GenerateOptions, ModelInfo, Request, Sampling, Scheduler, SeqEvent,
    Speculation, StopReason,
};
pub use error::{Error, Result};
pub use loading::ModelFiles;
pub use model::Quant;
