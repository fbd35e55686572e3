//! The GPU's own ceilings for the page's WebGPU runs (`Session.measureGpu`): a read kernel's
//! bandwidth and one dispatch's cost (`gpu::probe`) on the session's device, and the dispatches a
//! run's model has recorded, for its dispatch floor.

use wasm_bindgen::prelude::*;

#[cfg(not(feature = "gpu"))]
use crate::api::web::js::js_error;
#[cfg(feature = "gpu")]
use crate::api::web::js::{engine_error, to_js};

/// The GPU's ceilings on the device the session's model runs on (`gpu::probe`): `{ read_gb_per_s,
/// dispatch_us, probe_bytes }`.
#[cfg(feature = "gpu")]
pub(crate) async fn gpu_ceilings() -> Result<JsValue, JsValue> {
    let granted = crate::gpu::init().await.map_err(engine_error)?;
    let c = crate::gpu::probe::measure(granted.gpu)
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
