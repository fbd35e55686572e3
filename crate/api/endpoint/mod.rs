//! Metering an OpenAI-compatible endpoint (llama.cpp's server, vLLM, SGLang, TGI, Ollama, a
//! hosted API, or `tokenometer serve`) with the same meter as a local run: its stream read into
//! the meter's events ([`stream`], over [`sse`]; both pure, for the page too), and natively the
//! HTTP client (`Endpoint`, reqwest) and a load level of concurrent streams (`level`).
//! docs/endpoints.md says how tokens are counted and what each figure means.

pub mod request;
pub mod sse;
pub mod stream;
mod url;

#[cfg(not(target_arch = "wasm32"))]
mod client;
#[cfg(not(target_arch = "wasm32"))]
pub mod level;

#[cfg(not(target_arch = "wasm32"))]
pub use client::{Endpoint, Outcome};
pub use request::EndpointRequest;
pub use url::base_url;
