//! OpenAI's `chat.completions.create` over the in-browser engine, for people who embed it: a
//! request in the server's shape (`api/openai.rs`), answered in the server's chunks and usage
//! (`api/reply.rs`), with the meter's report under `usage.extra` (where web-llm puts its own
//! figures). The page's module wraps it (`www/engine-client.js`, `chat.completions.create`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::api::drive::{MeteredRun, pumping, slice};
use crate::api::openai::{ChatRequest, Completion, Kind};
use crate::api::reply::Reply;
use crate::api::web::js::{engine_error, js_error, to_js};
use crate::api::web::session::Session;
use crate::decode::{Engine, GenerateOptions};
use crate::meter::DEFAULT_READING_WPM;

thread_local! {
    /// The answers' numbers, for their ids (`chatcmpl-N`).
    static ANSWERS: Cell<u64> = const { Cell::new(0) };
}

#[inline(never)]
fn parse(request: &str) -> Result<ChatRequest, JsError> {
    serde_json::from_str(request)
        .map_err(|e| js_error(format!("not a chat completion request: {e}")))
}

/// One chat completion in progress, advanced by `pump`.
#[wasm_bindgen]
pub struct ChatRun {
    engine: Rc<Engine>,
    /// Taken out while a pump runs, so that a second pump meanwhile is refused.
    state: Rc<RefCell<Option<(MeteredRun, Reply)>>>,
}

#[wasm_bindgen]
impl Session {
    /// Start answering `request`, OpenAI's chat completion request as JSON text (`messages`,
    /// `stream`, `stream_options`, `max_tokens` or `max_completion_tokens`, `temperature`,
    /// `top_p`, `stop`, `seed`; other fields are ignored), in the model's chat template; then call
    /// `pump` until it reports `done`. A bad request is an error here, in one sentence.
    #[wasm_bindgen(js_name = chatCompletion)]
    pub fn chat_completion(&self, request: &str) -> Result<ChatRun, JsError> {
        let request = parse(request)?;
        let info = &self.engine.info;
        if let Some(model) = request.model.as_deref().filter(|m| !m.is_empty())
            && model != info.name
        {
            return Err(js_error(format!(
                "model {:?} is not loaded here; this engine runs {:?}",
                crate::error::clip(model),
                info.name
            )));
        }
        let Some(template) = &self.engine.tokenizer.specials.chat else {
            return Err(js_error(format!(
                "{}, so it cannot take messages",
                info.no_chat_template()
            )));
        };
        let turns = request.turns().map_err(|e| js_error(e.message))?;
        let turns: Vec<(&str, &str)> = turns.iter().map(|(r, t)| (*r, t.as_str())).collect();
        let context = info.context_length;
        let checked = request
            .params
            .check(context, js_sys::Date::now() as u64)
            .map_err(|e| js_error(e.message))?;
        let options = GenerateOptions {
            max_tokens: checked
                .max_tokens
                .unwrap_or(crate::api::openai::DEFAULT_MAX_TOKENS_SERVED.min(context)),
            sampling: checked.sampling,
            queued_ms: 0.0,
            chat: false,
            logprobs: checked.logprobs,
        };
        let mut run = MeteredRun::start(
            &self.engine,
            &template.render(&turns),
            options,
            None,
            DEFAULT_READING_WPM,
            self.warm_up_ms.get(),
        )
        .map_err(js_error)?;
        run.stop_at(checked.stops.clone());
        let number = ANSWERS.with(|n| {
            n.set(n.get() + 1);
            n.get()
        });
        let created = (js_sys::Date::now() / 1e3) as u64;
        let reply = Reply::new(Kind::Chat, &checked, number, info.name.clone(), created)
            .with_meter_in_usage();
        Ok(ChatRun {
            engine: self.engine.clone(),
            state: Rc::new(RefCell::new(Some((run, reply)))),
        })
    }
}

#[wasm_bindgen]
impl ChatRun {
    /// Run steps for about `budget_ms`, then resolve to `{ chunks, done }`: a stream's chunks so
    /// far (`chat.completion.chunk`), or, for a request that did not stream, the whole
    /// `chat.completion` once done.
    pub fn pump(&self, budget_ms: f64) -> js_sys::Promise {
        let engine = self.engine.clone();
        let state = self.state.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let busy = || JsValue::from(js_error("the answer is already being pumped"));
            pumping(
                &state,
                busy,
                async |(run, reply): &mut (MeteredRun, Reply)| {
                    let slice = slice(run, &engine, budget_ms).await.map_err(engine_error)?;
                    let mut chunks: Vec<Completion> = Vec::new();
                    for event in &slice.events {
                        chunks.extend(reply.event(event));
                    }
                    let done = run.is_done();
                    if done {
                        chunks.extend(reply.end(run.report()));
                    }
                    #[derive(Serialize)]
                    struct Pumped {
                        chunks: Vec<Completion>,
                        done: bool,
                    }
                    Ok(to_js(&Pumped { chunks, done }))
                },
            )
            .await
        })
    }

    /// End the answer now (between pumps): the next pump gives its last chunks, with no finish
    /// reason, as a server's answer to a client that left would have.
    pub fn cancel(&self) -> Result<(), JsError> {
        let mut state = self.state.borrow_mut();
        let (run, _) = state
            .as_mut()
            .ok_or_else(|| js_error("the answer is being pumped; cancel between pumps"))?;
        run.cancel();
        Ok(())
    }
}
