//! A run against an OpenAI-compatible endpoint, for the page: the worker fetches in JavaScript
//! (the browser's fetch and its streams) and hands each read's bytes here with the time they
//! arrived; the stream reader and the meter are the CLI's (crate/api/endpoint), so the page shows
//! the same figures as `generate --endpoint`.

use wasm_bindgen::prelude::*;

use crate::api::endpoint::request::{EndpointRequest, http_failure};
use crate::api::endpoint::stream::StreamReader;
use crate::api::web::js::{Pumped, js_error, now_epoch_ms, to_js};
use crate::api::web::options::RunOptions;
use crate::decode::Event;
use crate::meter::{Conditions, EndpointInfo, Meter, Source, TokenCounts, word_ends_utf16};

/// One request to an endpoint in progress: fed the stream's bytes as they arrive.
#[wasm_bindgen]
pub struct EndpointRun {
    /// The endpoint as the conditions name it (its counts' source set when the stream ends).
    info: EndpointInfo,
    request: EndpointRequest,
    reader: StreamReader<'static>,
    meter: Meter,
    done: bool,
    /// The server refused the request's `logprobs` field, so it was asked again without.
    logprobs_refused: bool,
}

#[wasm_bindgen]
impl EndpointRun {
    /// A run of `prompt` against the API at `base` (as `baseUrl` gives it), asking for `model`;
    /// `server`: the server's software if its headers said; `options`: a run's options (max
    /// tokens, temperature, top-p, seed, chat, reading speed).
    #[wasm_bindgen(constructor)]
    pub fn new(
        base: String,
        model: String,
        server: Option<String>,
        prompt: String,
        options: JsValue,
    ) -> Result<EndpointRun, JsError> {
        let options = RunOptions::from_js(options)?;
        let sampling = options.sampling()?;
        let request = EndpointRequest {
            prompt,
            chat: options.chat,
            max_tokens: options.max_tokens,
            sampling,
            ignore_eos: false,
            logprobs: options
                .logprobs
                .map(|n| n.min(crate::decode::MAX_TOP_LOGPROBS)),
        };
        let info = EndpointInfo {
            endpoint: base,
            model,
            server,
            token_counts: TokenCounts::Chunks,
        };
        let source = Source::Endpoint(info.clone());
        let mut meter = Meter::new(Conditions::of(source, sampling, 1), options.reading_wpm);
        if let Some(opened) = options.page_opened_at {
            // The request goes out as soon as it is made.
            meter.page_opened(now_epoch_ms() - opened);
        }
        Ok(EndpointRun {
            info,
            request,
            reader: StreamReader::new(None, options.max_tokens),
            meter,
            done: false,
            logprobs_refused: false,
        })
    }

    /// Where to POST.
    pub fn url(&self) -> String {
        format!("{}/{}", self.info.endpoint, self.request.path())
    }

    /// The request's JSON body; `counts`: ask for each chunk's count (a server that refuses the
    /// fields, with 400, is asked again without).
    pub fn body(&self, counts: bool) -> String {
        self.request.body(&self.info.model, counts)
    }

    /// The server refused the body (`status`, `body`): whether it named the `logprobs` field of
    /// a request that asked for them, which is then asked again without them (the worker sends
    /// [`Self::body`] once more).
    #[wasm_bindgen(js_name = refusedLogprobs)]
    pub fn refused_logprobs(&mut self, status: u16, body: &str) -> bool {
        let named = matches!(status, 400 | 422) && body.contains("logprobs");
        if !(named && self.request.logprobs.is_some()) {
            return false;
        }
        self.request.logprobs = None;
        self.logprobs_refused = true;
        true
    }

    /// The stream's bytes that arrived at `t_ms` (since the request was sent): `{ events, report,
    /// word_ends, done }`, as a local run's pump. An error mid-stream is an error here.
    pub fn feed(&mut self, bytes: &[u8], t_ms: f64) -> Result<JsValue, JsError> {
        let read = self.reader.feed(bytes, t_ms).map_err(js_error)?;
        let mut events = read.events;
        if read.ended {
            events.push(self.end(t_ms, false));
        }
        Ok(self.pumped(&events, t_ms))
    }

    /// The stream closed (or the visitor stopped it, `cancelled`) at `t_ms`: what was left, and
    /// the done event.
    pub fn finish(&mut self, t_ms: f64, cancelled: bool) -> Result<JsValue, JsError> {
        let mut events = Vec::new();
        if !self.done {
            if !cancelled {
                events = self.reader.finish(t_ms).map_err(js_error)?.events;
            }
            events.push(self.end(t_ms, cancelled));
        }
        Ok(self.pumped(&events, t_ms))
    }

    fn end(&mut self, t_ms: f64, cancelled: bool) -> Event {
        self.done = true;
        let done = self.reader.done_event(t_ms, cancelled);
        self.info.token_counts = self.reader.token_counts();
        self.meter.set_source(Source::Endpoint(self.info.clone()));
        self.meter
            .set_server_timings(self.reader.server_timings().cloned());
        done
    }

    fn pumped(&mut self, events: &[Event], t_ms: f64) -> JsValue {
        let arrivals = self.meter.arrivals();
        for event in events {
            self.meter.observe(event);
        }
        let report = if self.done {
            self.meter.final_report()
        } else {
            self.meter.report(t_ms)
        };
        to_js(&Pumped {
            events,
            points: self.meter.rate_points(arrivals),
            report,
            word_ends: word_ends_utf16(self.meter.text()),
            done: self.done,
            token_note: self.token_note(),
        })
    }

    /// What the token inspector says of the log probabilities it asked for and did not get.
    fn token_note(&self) -> Option<&'static str> {
        if self.logprobs_refused {
            Some(
                "this endpoint refused the request's logprobs field, so it was asked again \
                 without: no probabilities, and each mark is a chunk (which may hold several \
                 tokens)",
            )
        } else if self.done && self.request.logprobs.is_some() && self.reader.logprob_tokens() == 0
        {
            Some(
                "this endpoint sent no log probabilities, though the request asked for them \
                 (logprobs): each mark is a chunk (which may hold several tokens)",
            )
        } else {
            None
        }
    }
}

/// The API's base URL from what a visitor typed (`http://host:8080` is `http://host:8080/v1`), or
/// an error in one sentence.
#[wasm_bindgen(js_name = baseUrl)]
pub fn base_url(url: &str) -> Result<String, JsError> {
    crate::api::endpoint::base_url(url).map_err(js_error)
}

/// An HTTP failure of `url` (its status and body) as one sentence.
#[wasm_bindgen(js_name = httpFailure)]
pub fn http_failure_sentence(url: &str, status: u16, body: &str) -> String {
    http_failure(url, status, body)
}
