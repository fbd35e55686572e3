//! The top layer: what people and pages call. The native command line (`cli`, native only), the
//! JavaScript API the page's worker uses (`web`, wasm only), and the drivers both share for a
//! metered run and a load-test level ([`drive`]), and OpenAI's protocol both serve: its types
//! ([`openai`]) and an answer built from a run's events ([`reply`]), the
//! server's and the page's `chat.completions.create`; `auto` decided by a race, and the GPU's
//! check against the CPU ([`auto`]).

pub mod auto;
#[cfg(not(target_arch = "wasm32"))]
pub mod cli;
pub mod drive;
pub mod endpoint;
pub mod fit;
pub mod logprobs;
pub mod openai;
pub mod reply;
#[cfg(not(target_arch = "wasm32"))]
pub mod serve;
#[cfg(target_arch = "wasm32")]
pub mod web;
