//! Crossing into JavaScript: values as plain JS objects, errors as JS errors, and the page's clock.

use js_sys::Function;
use serde::Serialize;
use wasm_bindgen::prelude::*;

pub(crate) fn js_error(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// An engine error as a JS `Error`. A lost GPU device is named `DeviceLostError`: nothing more runs
/// on it in this wasm instance, so the worker tells the page to start a fresh one.
pub(crate) fn engine_error(e: crate::Error) -> JsValue {
    let error = js_sys::Error::new(&e.to_string());
    if matches!(e, crate::Error::DeviceLost(_)) {
        error.set_name("DeviceLostError");
    }
    error.into()
}

/// Plain JS objects for the page. Through JSON text rather than serde-wasm-bindgen's serializer:
/// measured in a Chromium worker, serializing one report took ~40 ms that way (setting properties
/// one JS call at a time) and well under a millisecond through `JSON.parse`; at one report per token
/// the slow way capped decode at ~20 tok/s.
pub(crate) fn to_js(value: &impl Serialize) -> JsValue {
    serde_json::to_string(value)
        .ok()
        .and_then(|json| js_sys::JSON::parse(&json).ok())
        .unwrap_or(JsValue::NULL)
}

/// Milliseconds since the Unix epoch with sub-millisecond precision, comparable between the page
/// and its worker (`performance.timeOrigin + performance.now()`).
pub(crate) fn now_epoch_ms() -> f64 {
    let global = js_sys::global();
    let performance =
        js_sys::Reflect::get(&global, &"performance".into()).unwrap_or(JsValue::UNDEFINED);
    let origin = js_sys::Reflect::get(&performance, &"timeOrigin".into())
        .ok()
        .and_then(|v| v.as_f64());
    let now = js_sys::Reflect::get(&performance, &"now".into())
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok())
        .and_then(|f| f.call0(&performance).ok())
        .and_then(|v| v.as_f64());
    match (origin, now) {
        (Some(origin), Some(now)) => origin + now,
        _ => js_sys::Date::now(),
    }
}

/// What a run's pump gives the page, a local run's or an endpoint's: its events in order, the
/// rate chart's points they add (the meter's), the meter's report as of the last, where each word
/// of the output so far ends (UTF-16 offsets, the meter's word rule, so the page needs none of its
/// own), and whether the run has ended.
#[derive(Serialize)]
pub(crate) struct Pumped<'a> {
    pub(crate) events: &'a [crate::decode::Event],
    pub(crate) points: Vec<crate::meter::RatePoint>,
    pub(crate) report: crate::meter::Report,
    pub(crate) word_ends: Vec<usize>,
    pub(crate) done: bool,
    /// An endpoint's run: why the token inspector has no probabilities, where it asked for them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) token_note: Option<&'static str>,
}
