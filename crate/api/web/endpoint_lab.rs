//! The concurrency lab against an OpenAI-compatible endpoint, for the page: `users` real streams
//! at once. The worker fetches each in JavaScript (the browser's fetch and its streams) and hands
//! each read's bytes here with the time they arrived; every stream is read by the CLI's reader
//! (crate/api/endpoint) into its user's meter, and the level's figures are the batch meter's, as
//! `bench --endpoint --concurrency N` computes them natively.

use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::api::endpoint::request::EndpointRequest;
use crate::api::endpoint::stream::StreamReader;
use crate::api::web::js::{js_error, to_js};
use crate::api::web::lab::{UserFigures, figures};
use crate::api::web::options::LabSettings;
use crate::decode::{GenerateOptions, SeqEvent};
use crate::meter::{BatchMeter, EndpointInfo, LoadConditions, LoadReport, Source, TokenCounts};

/// A lab level against an endpoint in progress: one stream reader a user, one batch meter.
#[wasm_bindgen]
pub struct EndpointLab {
    /// The endpoint as the conditions name it (its counts' source: the least trusted of its
    /// requests', set as each ends).
    info: EndpointInfo,
    request: EndpointRequest,
    prompts: Vec<String>,
    arrivals: Vec<f64>,
    readers: Vec<Option<StreamReader<'static>>>,
    /// Per user, whether its done event has been made.
    ended: Vec<bool>,
    meter: BatchMeter,
}

#[wasm_bindgen]
impl EndpointLab {
    /// A level of `options` (`LabOptions`: users, arrival, tokens each, prompts, reading speed)
    /// against the API at `base` (as `baseUrl` gives it) asking for `model`; `server`: the
    /// server's software if its headers said; with objectives (TTFT and time per output token, in
    /// ms), its reports have goodput.
    #[wasm_bindgen(constructor)]
    pub fn new(
        base: String,
        model: String,
        server: Option<String>,
        options: JsValue,
        slo_ttft_ms: Option<f64>,
        slo_tpot_ms: Option<f64>,
    ) -> Result<EndpointLab, JsError> {
        let LabSettings {
            options,
            arrival,
            prompts,
            slo,
        } = LabSettings::from_js(options, slo_ttft_ms, slo_tpot_ms)?;
        let generate = GenerateOptions::default();
        let request = EndpointRequest {
            prompt: String::new(),
            chat: generate.chat,
            max_tokens: options.max_tokens,
            sampling: generate.sampling,
            ignore_eos: false,
            logprobs: None,
        };
        let info = EndpointInfo {
            endpoint: base,
            model,
            server,
            token_counts: TokenCounts::ChunkUsage,
        };
        let conditions = LoadConditions {
            source: Source::Endpoint(info.clone()),
            users: options.users,
            max_batch: None,
            arrival: arrival.to_string(),
            max_tokens: request.max_tokens,
            sampling: request.sampling,
            warm_up_ms: None,
            slo,
        };
        Ok(EndpointLab {
            info,
            request,
            prompts,
            arrivals: arrival.times(options.users),
            readers: (0..options.users).map(|_| None).collect(),
            ended: vec![false; options.users],
            meter: BatchMeter::new(conditions, options.reading_wpm),
        })
    }

    /// When each user sends its request, in ms from the level's start.
    pub fn arrivals(&self) -> Vec<f64> {
        self.arrivals.clone()
    }

    /// Where every user POSTs.
    pub fn url(&self) -> String {
        format!("{}/{}", self.info.endpoint, self.request.path())
    }

    /// User `seq`'s request body (its prompt: the lab's prompts in turn); `counts`: ask for each
    /// chunk's count (a server that refuses the fields, with 400, is asked again without).
    pub fn body(&self, seq: usize, counts: bool) -> String {
        let mut request = self.request.clone();
        request.prompt = self.prompts[seq % self.prompts.len()].clone();
        request.body(&self.info.model, counts)
    }

    /// User `seq` sent its request at `t_ms` on the level's clock (its stream's times count from
    /// then).
    pub fn arrive(&mut self, seq: usize, t_ms: f64) -> Result<(), JsError> {
        let reader = self
            .readers
            .get_mut(seq)
            .ok_or_else(|| js_error(format!("no user {seq} in this lab")))?;
        *reader = Some(StreamReader::new(None, self.request.max_tokens));
        self.meter.arrive(seq, t_ms);
        Ok(())
    }

    /// User `seq`'s stream bytes that arrived `t_ms` after its request: `{ events, done }` (the
    /// events each with its `seq`; `done`: this user's stream has ended). An error mid-stream is
    /// an error here (then call `fail`).
    pub fn feed(&mut self, seq: usize, bytes: &[u8], t_ms: f64) -> Result<JsValue, JsError> {
        let read = self.reader(seq)?.feed(bytes, t_ms).map_err(js_error)?;
        let mut events = read.events;
        if read.ended {
            events.push(self.end(seq, t_ms, false)?);
        }
        Ok(self.observed(seq, events))
    }

    /// User `seq`'s stream closed (or the visitor stopped the lab, `cancelled`) `t_ms` after its
    /// request: what was left, and its done event (nothing if it had ended).
    pub fn finish(&mut self, seq: usize, t_ms: f64, cancelled: bool) -> Result<JsValue, JsError> {
        let ended = self.ended.get(seq).copied().unwrap_or(true);
        let reader = self.reader(seq)?;
        let mut events = Vec::new();
        if !ended {
            if !cancelled {
                events = reader.finish(t_ms).map_err(js_error)?.events;
            }
            events.push(self.end(seq, t_ms, cancelled)?);
        }
        Ok(self.observed(seq, events))
    }

    /// User `seq`'s request failed, as `why` says (an HTTP failure, a broken stream): it counts as
    /// a request, never as a good one, and the report lists why.
    pub fn fail(&mut self, seq: usize, why: String) {
        self.meter.fail(seq, why);
    }

    /// `{ users, report }`: every user's figures so far (for their lanes) and the level's report.
    pub fn snapshot(&self) -> JsValue {
        #[derive(Serialize)]
        struct Snapshot {
            users: Vec<UserFigures>,
            report: LoadReport,
        }
        to_js(&Snapshot {
            users: figures(self.arrivals.len(), |seq| self.meter.user(seq)),
            report: self.meter.report(),
        })
    }

    /// The level's load report as of now (its final report once every user has ended).
    pub fn report(&self) -> JsValue {
        to_js(&self.meter.report())
    }
}

impl EndpointLab {
    fn reader(&mut self, seq: usize) -> Result<&mut StreamReader<'static>, JsError> {
        self.readers
            .get_mut(seq)
            .and_then(Option::as_mut)
            .ok_or_else(|| js_error(format!("user {seq} has sent no request")))
    }

    /// User `seq`'s done event at `t_ms`; the level's counts are now at most as trusted as its.
    fn end(
        &mut self,
        seq: usize,
        t_ms: f64,
        cancelled: bool,
    ) -> Result<crate::decode::Event, JsError> {
        let reader = self.reader(seq)?;
        let done = reader.done_event(t_ms, cancelled);
        let (counts, timings) = (reader.token_counts(), reader.server_timings().cloned());
        self.ended[seq] = true;
        if let Some(meter) = self.meter.user_mut(seq) {
            meter.set_server_timings(timings);
        }
        self.info.token_counts = self.info.token_counts.max(counts);
        self.meter.set_source(Source::Endpoint(self.info.clone()));
        Ok(done)
    }

    fn observed(&mut self, seq: usize, events: Vec<crate::decode::Event>) -> JsValue {
        let done = self.ended[seq];
        let events: Vec<SeqEvent> = events
            .into_iter()
            .map(|event| {
                self.meter.observe(seq, &event);
                SeqEvent { seq, event }
            })
            .collect();
        #[derive(Serialize)]
        struct Observed {
            events: Vec<SeqEvent>,
            done: bool,
        }
        to_js(&Observed { events, done })
    }
}
