//! The parsers under test, compiled from the engine's own source files: they need nothing of burn,
//! and including them by path keeps a fuzz build to about a minute instead of compiling burn and
//! wgpu with coverage instrumentation.
#![allow(dead_code)]

#[path = "../../crate/error.rs"]
pub mod error;
#[path = "../../crate/loading/mod.rs"]
pub mod loading;
#[path = "../../crate/tokenizer.rs"]
pub mod tokenizer;
#[path = "../../crate/weights.rs"]
pub mod weights;
