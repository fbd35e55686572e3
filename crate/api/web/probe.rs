//! The page's measure of this device's memory read bandwidth, for the decode's ceiling: the CPU
//! engine's own threads (Web Workers in the threaded build) summing a buffer far larger than the
//! caches ([`crate::cpu::bandwidth`], the code `bench` runs natively). The page runs it in a worker
//! of its own, which it then ends, so the buffer's memory (wasm memory never shrinks) goes with
//! it, and keeps the figure for this device and thread count. The GPU's own ceilings are
//! `gpu_ceilings.rs`'s.

use wasm_bindgen::prelude::*;

use crate::api::web::js::{js_error, now_epoch_ms};
use crate::api::web::session::start_threads;

/// The buffer the page reads: 128 MiB, several times the last-level cache of a laptop or phone
/// (and a wasm memory a phone can grant).
const PAGE_PROBE_BYTES: usize = 128 << 20;

/// The memory's read bandwidth at `threads` threads, in GB/s.
#[wasm_bindgen(js_name = measureReadBandwidth)]
pub async fn measure_read_bandwidth(threads: usize) -> Result<f64, JsError> {
    if threads == 0 {
        return Err(js_error("threads must be at least 1"));
    }
    let threads = start_threads(threads).await?;
    Ok(crate::cpu::bandwidth::read_with(
        &threads,
        PAGE_PROBE_BYTES,
        now_epoch_ms,
    ))
}
