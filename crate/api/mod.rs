//! The top layer: what people and pages call. The native command line (`cli`, native only), the
//! JavaScript API the page's worker uses (`web`, wasm only), and the drivers both share for a
//! metered run and a load-test level ([`drive`]).

#[cfg(not(target_arch = "wasm32"))]
pub mod cli;
pub mod drive;
pub mod endpoint;
pub mod openai;
#[cfg(not(target_arch = "wasm32"))]
pub mod serve;
#[cfg(target_arch = "wasm32")]
pub mod web;
