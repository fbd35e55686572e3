//! The page's measure of this device's memory read bandwidth, for the decode's ceiling: the CPU
//! engine's own threads (Web Workers in the threaded build) summing a buffer far larger than the
//! caches ([`crate::cpu::bandwidth`], the code `bench` runs natively). The page runs it in a worker
//! of its own, which it then ends, so the buffer's memory (wasm memory never shrinks) goes with
//! it, and keeps the figure for this device and thread count. On WebGPU, the GPU's own ceilings:
//! a read kernel's bandwidth and one dispatch's cost (`gpu::probe`), on the session's device.

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

/// The GPU's ceilings on the device the session's model runs on (`gpu::probe`): `{ read_gb_per_s,
/// dispatch_us, probe_bytes }`.
#[cfg(feature = "gpu")]
pub(crate) async fn gpu_ceilings() -> Result<JsValue, JsValue> {
    use crate::api::web::js::{engine_error, to_js};
    let granted = crate::gpu::init().await.map_err(engine_error)?;
    let c = crate::gpu::probe::measure(&granted.gpu)
        .await
        .map_err(engine_error)?;
    Ok(to_js(&serde_json::json!({
        "read_gb_per_s": c.read_gb_per_s,
        "dispatch_us": c.dispatch_us,
        "probe_bytes": c.probe_bytes,
    })))
}

#[cfg(not(feature = "gpu"))]
pub(crate) async fn gpu_ceilings() -> Result<JsValue, JsValue> {
    Err(js_error("this build of the engine has no GPU backend").into())
}

/// Dispatches the model has recorded on its GPU so far (`None` on the CPU).
#[cfg(feature = "gpu")]
pub(crate) fn dispatches(engine: &crate::decode::Engine) -> Option<u64> {
    engine.model.gpu_counts().map(|c| c.dispatches)
}

#[cfg(not(feature = "gpu"))]
pub(crate) fn dispatches(_: &crate::decode::Engine) -> Option<u64> {
    None
}
