//! Will it fit, asked by the page's worker before it downloads a GGUF ([`crate::api::fit`]): the
//! worker reads the file's first bytes (a range request, the browser's kept copy, or a picked
//! file's start) and asks again with more until the header is whole.

use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

use crate::api::fit::{Fit, Limits, fit};
use crate::api::web::js::{js_error, to_js};
use crate::loading::gguf::Gguf;
use crate::model::Quant;

/// What the worker asks.
#[derive(Deserialize)]
#[serde(default)]
struct FitOptions {
    /// `stored`, `f32`, `q8` or `q4`.
    quant: String,
    /// The model would run on the GPU (its bindings count).
    gpu: bool,
    /// The positions the run could reach: its prompt and its tokens.
    positions: usize,
    limits: Limits,
}

impl Default for FitOptions {
    fn default() -> Self {
        Self {
            quant: "stored".into(),
            gpu: false,
            positions: crate::decode::DEFAULT_MAX_TOKENS,
            limits: Limits::default(),
        }
    }
}

/// The answer: `more` while the header runs past `header`'s bytes, else the fit.
#[derive(Serialize)]
struct Answer {
    more: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    fit: Option<Fit>,
}

/// Whether the GGUF whose first bytes are `header` (of a file `file_len` bytes long; 0 where not
/// known) fits as `options` ask: `{ more: true }` where the header needs more bytes, else
/// `{ more: false, fit }`; an error in one sentence where the bytes are not a GGUF's header.
#[wasm_bindgen(js_name = checkFit)]
pub fn check_fit(header: &[u8], file_len: f64, options: JsValue) -> Result<JsValue, JsError> {
    let options: FitOptions = if options.is_undefined() || options.is_null() {
        FitOptions::default()
    } else {
        serde_wasm_bindgen::from_value(options).map_err(js_error)?
    };
    let quant: Quant = options.quant.parse().map_err(js_error)?;
    let len = if file_len >= 1.0 && file_len < usize::MAX as f64 {
        file_len as usize
    } else {
        usize::MAX
    };
    let answer = match Gguf::parse_start(header, len).map_err(js_error)? {
        None => Answer {
            more: true,
            fit: None,
        },
        Some(gguf) => Answer {
            more: false,
            fit: Some(
                fit(
                    &gguf,
                    quant,
                    options.positions,
                    options.gpu,
                    &options.limits,
                )
                .map_err(js_error)?,
            ),
        },
    };
    Ok(to_js(&answer))
}
