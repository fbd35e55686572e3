//! The concurrency lab: many simulated users in one batch ([`Lab`]), a load-test level pumped by
//! the worker.

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::api::drive::{Level, LoadLevel, pumping, slice};
use crate::api::web::js::{engine_error, js_error, to_js};
use crate::api::web::options::LabSettings;
use crate::api::web::session::Session;
use crate::decode::{Engine, GenerateOptions, SeqEvent, StopReason};

/// A concurrency lab in progress: users' requests in one scheduler, advanced by `pump` so that the
/// worker hears a cancel between pumps.
#[wasm_bindgen]
pub struct Lab {
    engine: Rc<Engine>,
    /// Taken out while a pump runs, so that a second pump or a cancel meanwhile is refused.
    state: Rc<RefCell<Option<LoadLevel>>>,
}

/// One user's figures so far, for its lane.
#[derive(Serialize)]
pub(crate) struct UserFigures {
    seq: usize,
    tokens: usize,
    ttft_ms: Option<f64>,
    decode_tps: Option<f64>,
    reason: Option<StopReason>,
}

#[wasm_bindgen]
impl Session {
    /// Start a concurrency lab (see `LabOptions`): every user's request is submitted now, to arrive
    /// as `arrival` says; with objectives (TTFT and time per output token, in ms), its reports
    /// have goodput. Then call `pump` until it reports `done`.
    #[wasm_bindgen(js_name = startLab)]
    pub fn start_lab(
        &self,
        options: JsValue,
        slo_ttft_ms: Option<f64>,
        slo_tpot_ms: Option<f64>,
    ) -> Result<Lab, JsError> {
        let LabSettings {
            options,
            arrival,
            prompts,
            slo,
        } = LabSettings::from_js(options, slo_ttft_ms, slo_tpot_ms)?;
        let level = Level {
            users: options.users,
            arrival,
            max_batch: options.max_batch.unwrap_or(options.users).max(1),
            step_tokens: crate::decode::STEP_TOKENS,
            prompts,
            options: GenerateOptions {
                max_tokens: options.max_tokens,
                ..Default::default()
            },
            reading_wpm: options.reading_wpm,
            warm_up_ms: self.warm_up_ms.get(),
            slo,
        };
        let mut level = LoadLevel::start(&self.engine, &level).map_err(js_error)?;
        if let Some(gb_per_s) = options.read_gb_per_s {
            level.read_bandwidth(gb_per_s, &self.engine);
        }
        Ok(Lab {
            engine: self.engine.clone(),
            state: Rc::new(RefCell::new(Some(level))),
        })
    }
}

#[wasm_bindgen]
impl Lab {
    /// Run steps for about `budget_ms` (at least one), then resolve to `{ events, users, report,
    /// done, wait_ms }`: the steps' events (each with its `seq`), every user's figures so far, the
    /// load report so far, whether every user has ended, and, when nothing can run until the next
    /// user arrives, how long until then.
    pub fn pump(&self, budget_ms: f64) -> js_sys::Promise {
        let engine = self.engine.clone();
        let state = self.state.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let busy = || JsValue::from(js_error("the lab is already being pumped"));
            pumping(&state, busy, async |lab: &mut LoadLevel| {
                let slice = slice(lab, &engine, budget_ms).await.map_err(engine_error)?;
                // About 0.2 s of the products alone, after the last user's end: the level's own
                // figures are already fixed.
                lab.measure_ceiling(&engine);
                #[derive(Serialize)]
                struct Pumped<'a> {
                    events: &'a [SeqEvent],
                    users: Vec<UserFigures>,
                    report: crate::meter::LoadReport,
                    done: bool,
                    wait_ms: Option<f64>,
                }
                Ok(to_js(&Pumped {
                    events: &slice.events,
                    users: figures(lab.users(), |seq| lab.user(seq)),
                    report: lab.report(),
                    done: lab.is_done(),
                    wait_ms: slice.wait_ms,
                }))
            })
            .await
        })
    }

    /// End every user's request now (between pumps); returns their done events.
    #[wasm_bindgen(js_name = cancelAll)]
    pub fn cancel_all(&self) -> Result<JsValue, JsError> {
        let mut state = self.state.borrow_mut();
        let lab = state
            .as_mut()
            .ok_or_else(|| js_error("the lab is being pumped; cancel between pumps"))?;
        Ok(to_js(&lab.cancel_all()))
    }

    /// The load report as of now.
    pub fn report(&self) -> Result<JsValue, JsError> {
        let state = self.state.borrow();
        let lab = state
            .as_ref()
            .ok_or_else(|| js_error("the lab is being pumped"))?;
        Ok(to_js(&lab.report()))
    }
}

/// Every arrived user's figures so far, of `users` users whose meters `meter` gives.
pub(crate) fn figures<'a>(
    users: usize,
    meter: impl Fn(usize) -> Option<&'a crate::meter::Meter>,
) -> Vec<UserFigures> {
    (0..users)
        .filter_map(|seq| {
            let r = meter(seq)?.final_report();
            Some(UserFigures {
                seq,
                tokens: r.conditions.output_tokens,
                ttft_ms: r.ttft_ms,
                decode_tps: r.decode_tps,
                reason: r.conditions.stop_reason,
            })
        })
        .collect()
}
