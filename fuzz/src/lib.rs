//! The parsers under test, compiled from the engine's own source files: they need nothing of burn,
//! and including them by path keeps a fuzz build to about a minute instead of compiling burn and
//! wgpu with coverage instrumentation. The layers they stand on (`error`, `formats`, and the
//! host-side files of `model`) come along the same way.
#![allow(dead_code)]

#[path = "../../crate/error.rs"]
pub mod error;
#[path = "../../crate/formats/mod.rs"]
pub mod formats;
#[path = "../../crate/loading/mod.rs"]
pub mod loading;
/// The Server-Sent Events parser: pure, no dependencies.
#[path = "../../crate/api/endpoint/sse.rs"]
pub mod sse;

/// `crate/model/` without the forward pass and its logits (which use burn).
pub mod model;

pub use loading::tokenizer;
