//! The JavaScript API that the page's Web Worker uses (wasm only): load a model from bytes, pick the
//! backend and quantization, warm up; then a run (or a concurrency lab of many simulated users in
//! one batch) is started and advanced by `pump`, a slice of time at a time, so that the worker
//! hears a cancel between pumps on every backend.
//!
//! Every pump's events reach JavaScript with the meter's report as of that moment, so the page
//! shows figures computed by the same Rust code as the CLI.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::Function;
use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

use crate::engine::DEFAULT_MAX_TOKENS;
use crate::meter::{BatchMeter, Conditions, DEFAULT_READING_WPM, LoadConditions, Meter};
use crate::scheduler::{Arrival, DEFAULT_PROMPTS, Request, Scheduler};
use crate::weights::FileBytes;
use crate::{Backend, BackendChoice, Engine, Event, GenerateOptions, ModelFiles, Quant, Sampling};

/// Leave the cause of a fatal failure where the worker's JavaScript can read it after the wasm
/// instance traps: `globalThis.tokenometerFatalKind` (`"panic"` or `"oom"`) and
/// `globalThis.tokenometerFatal` (the message). A trap unwinds past every Rust frame, so the
/// message has to be out of wasm memory before it happens. Writing a JS string allocates nothing
/// in wasm memory, which matters when the cause is that memory ran out.
fn record_fatal(kind: &str, message: &str) {
    let global = js_sys::global();
    let _ = js_sys::Reflect::set(&global, &"tokenometerFatal".into(), &message.into());
    let _ = js_sys::Reflect::set(&global, &"tokenometerFatalKind".into(), &kind.into());
}

/// What the engine recorded before its last trap, `(kind, message)`, as the worker reads it.
pub fn recorded_fatal() -> (Option<String>, Option<String>) {
    let global = js_sys::global();
    let get = |key: &str| {
        js_sys::Reflect::get(&global, &key.into())
            .ok()
            .and_then(|v| v.as_string())
    };
    (get("tokenometerFatalKind"), get("tokenometerFatal"))
}

unsafe extern "C" {
    /// Runs the module's static constructors; synthesized by the linker (wasm-ld).
    fn __wasm_call_ctors();
}

/// Run the module's static constructors, once per instance.
///
/// They are `inventory` registrations: cubecl's IR registers its operations that way. A module
/// that never calls `__wasm_call_ctors` itself is linked "command-style": wasm-ld makes every
/// export, down to the helpers wasm-bindgen's JS calls for each object passed, run all constructors
/// first. Profiled in the page's worker on WebGPU (stories260K, SwiftShader), that was more than
/// half of the worker's time (4.1 of 7.5 s), and decode went from 2.4 to 46 tok/s without it.
/// Called from [`start`] and from the wgpu backend's initialization (wasm-bindgen-test binaries have
/// no start).
pub(crate) fn run_constructors() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: the linker's constructors, run once, before anything uses what they register.
    ONCE.call_once(|| unsafe { __wasm_call_ctors() });
}

/// Run the static constructors (`run_constructors`), then install a panic hook that logs to the
/// console and records the message for the worker (see `record_fatal`): a panic in wasm traps,
/// and the page shows this message instead of "unreachable".
#[wasm_bindgen(start)]
pub fn start() {
    run_constructors();
    std::panic::set_hook(Box::new(|info| {
        let message = match info.payload_as_str() {
            Some(text) => text.to_string(),
            None => info.to_string(),
        };
        let place = info
            .location()
            .map(|l| format!(" (at {}:{})", l.file(), l.line()))
            .unwrap_or_default();
        record_fatal("panic", &format!("{message}{place}"));
        console_error_panic_hook::hook(info);
    }));
}

/// The global allocator in wasm: the system one (dlmalloc), recording an allocation that fails
/// before Rust aborts on it. Without this, running out of wasm memory shows nothing at all.
struct RecordingAllocator;

#[global_allocator]
static ALLOCATOR: RecordingAllocator = RecordingAllocator;

// SAFETY: every call is passed to `System` unchanged; only a null result is observed.
unsafe impl std::alloc::GlobalAlloc for RecordingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        let p = unsafe { std::alloc::System.realloc(ptr, layout, size) };
        if p.is_null() {
            out_of_memory(size);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

/// Record "could not allocate N MB (...)" without allocating: the text is formatted into a buffer
/// on the stack.
fn out_of_memory(size: usize) {
    use std::fmt::Write;
    struct Buffer {
        bytes: [u8; 256],
        len: usize,
    }
    impl Write for Buffer {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let n = s.len().min(self.bytes.len() - self.len);
            self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
            self.len += n;
            Ok(())
        }
    }
    let mut buffer = Buffer {
        bytes: [0; 256],
        len: 0,
    };
    let memory = core::arch::wasm32::memory_size(0) as f64 * 65536.0;
    let _ = write!(
        buffer,
        "could not allocate {:.1} MB more; this tab's WebAssembly memory already holds {:.1} MB and \
         cannot grow past 4096 MB",
        size as f64 / 1e6,
        memory / 1e6
    );
    // Cut at a character boundary in case the buffer filled up.
    let text = match std::str::from_utf8(&buffer.bytes[..buffer.len]) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&buffer.bytes[..e.valid_up_to()]).unwrap_or_default(),
    };
    record_fatal("oom", text);
}

/// Panic inside an async call, as a bug in the engine would. The end-to-end tests use it to check
/// that the page names the cause of a crash and restarts the engine: no input is known to make the
/// engine panic, so nothing else can trigger that path.
#[wasm_bindgen(js_name = panicForTests)]
pub async fn panic_for_tests(message: String) {
    futures_lite::future::yield_now().await;
    panic!("{message}");
}

/// This build's CPU kernels against the scalar ones (`kernels::check_against_scalar`): the
/// end-to-end tests run it in both of the page's builds, since only this way do the relaxed SIMD
/// kernels of `pkg/relaxed/` get checked in a browser.
#[wasm_bindgen(js_name = kernelCheckForTests)]
pub fn kernel_check_for_tests() -> Result<JsValue, JsError> {
    serde_wasm_bindgen::to_value(&crate::kernels::check_against_scalar()).map_err(js_error)
}

fn js_error(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// An engine error as a JS `Error`. A lost GPU device is named `DeviceLostError`: nothing more runs
/// on it in this wasm instance, so the worker tells the page to start a fresh one.
fn engine_error(e: crate::Error) -> JsValue {
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
fn to_js(value: &impl Serialize) -> JsValue {
    serde_json::to_string(value)
        .ok()
        .and_then(|json| js_sys::JSON::parse(&json).ok())
        .unwrap_or(JsValue::NULL)
}

/// Options for one run, as the page sends them.
#[derive(Deserialize, Serialize)]
#[serde(default)]
struct RunOptions {
    max_tokens: usize,
    temperature: f32,
    top_p: f32,
    seed: u64,
    /// `performance.timeOrigin + performance.now()` when the user asked, on the page.
    #[serde(skip_serializing)]
    requested_at: Option<f64>,
    reading_wpm: f64,
    /// Wrap the prompt in the model's chat template, when it has one.
    chat: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        let sampling = Sampling::default();
        Self {
            max_tokens: DEFAULT_MAX_TOKENS,
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            seed: sampling.seed,
            requested_at: None,
            reading_wpm: DEFAULT_READING_WPM,
            chat: GenerateOptions::default().chat,
        }
    }
}

/// The settings a run and a lab take when the page does not say: the one place the page's form
/// gets its defaults from (`{ run: { max_tokens, temperature, top_p, seed, reading_wpm, chat }, lab:
/// { users, arrival, max_batch, max_tokens, reading_wpm } }`).
#[wasm_bindgen]
pub fn defaults() -> JsValue {
    #[derive(Serialize)]
    struct Defaults {
        run: RunOptions,
        lab: LabOptions,
    }
    to_js(&Defaults {
        run: RunOptions::default(),
        lab: LabOptions::default(),
    })
}

/// The spread of repeated measurements of one figure (`{ n, median, min, max }`, or `null` when
/// no value is finite), computed by the meter's own rule so that the page computes no figure.
#[wasm_bindgen]
pub fn spread(values: Vec<f64>) -> JsValue {
    to_js(&crate::meter::spread(&values))
}

/// A loaded model on its backend.
#[wasm_bindgen]
pub struct Session {
    engine: Rc<Engine>,
    details: String,
    warm_up_ms: Rc<Cell<Option<f64>>>,
}

/// Load a model. `model` is a GGUF or a llama2.c `.bin`, or `model.safetensors` when `hf_config`
/// (the bytes of `config.json`) is given. `tokenizer` may be left out for a GGUF that carries one.
/// `backend` is `auto`, `wgpu` or `cpu`; `quant` is `f32`, `q8` or `q4`.
#[wasm_bindgen(js_name = loadSession)]
pub async fn load_session(
    name: String,
    model: js_sys::Uint8Array,
    tokenizer: Option<Vec<u8>>,
    backend: String,
    quant: String,
    hf_config: Option<Vec<u8>>,
) -> Result<Session, JsError> {
    let choice: BackendChoice = backend.parse().map_err(js_error)?;
    let quant: Quant = quant.parse().map_err(js_error)?;
    let backend = Backend::init(choice).await.map_err(js_error)?;
    // One copy into wasm memory, 4-byte aligned, whose f32 weights the engine then uses in place.
    let mut bytes = FileBytes::zeroed(model.length() as usize);
    model.copy_to(bytes.bytes_mut());
    drop(model);
    let model = bytes;
    let files = match hf_config {
        Some(config) => ModelFiles::hugging_face(name, config, model),
        None => ModelFiles::single(name, model),
    };
    let engine = Engine::load(files, tokenizer.as_deref(), quant, &backend).map_err(js_error)?;
    Ok(Session {
        engine: Rc::new(engine),
        details: backend.details,
        warm_up_ms: Rc::new(Cell::new(None)),
    })
}

#[wasm_bindgen]
impl Session {
    /// What was loaded: name, parameters, quantization, bytes, backend, adapter and its details.
    pub fn info(&self) -> JsValue {
        #[derive(Serialize)]
        struct Info<'a> {
            #[serde(flatten)]
            model: &'a crate::ModelInfo,
            adapter_details: &'a str,
        }
        to_js(&Info {
            model: &self.engine.info,
            adapter_details: &self.details,
        })
    }

    /// Compile shaders and run one step so that later runs measure steady state; resolves to ms.
    #[wasm_bindgen(js_name = warmUp)]
    pub fn warm_up(&self) -> js_sys::Promise {
        let engine = self.engine.clone();
        let warm = self.warm_up_ms.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let ms = engine.warm_up().await.map_err(engine_error)?;
            warm.set(Some(ms));
            Ok(JsValue::from_f64(ms))
        })
    }

    /// Start generating from `prompt` (see `RunOptions`); then call `pump` on the returned run
    /// until it reports `done`, and `cancel` between pumps to stop it. A bad prompt or setting is
    /// an error here.
    pub fn start(&self, prompt: String, options: JsValue) -> Result<Run, JsError> {
        let options: RunOptions = if options.is_undefined() || options.is_null() {
            RunOptions::default()
        } else {
            serde_wasm_bindgen::from_value(options).map_err(js_error)?
        };
        let sampling = Sampling {
            temperature: options.temperature,
            top_p: options.top_p,
            seed: options.seed,
        };
        let queued_ms = options
            .requested_at
            .map_or(0.0, |at| (now_epoch_ms() - at).max(0.0));
        let request = Request {
            prompt,
            options: GenerateOptions {
                max_tokens: options.max_tokens,
                sampling,
                queued_ms,
                chat: options.chat,
            },
        };
        let mut scheduler = Scheduler::new(1);
        let seq = scheduler
            .submit(&self.engine, &request, None)
            .map_err(js_error)?;
        let meter = Meter::new(
            Conditions::new(&self.engine.info, sampling, 1, self.warm_up_ms.get())
                .raw_prompt(!options.chat),
            options.reading_wpm,
        );
        Ok(Run {
            engine: self.engine.clone(),
            state: Rc::new(RefCell::new(Some(RunState {
                scheduler,
                meter,
                seq,
                queued_ms,
            }))),
        })
    }
}

/// One generation in progress, advanced by `pump`.
#[wasm_bindgen]
pub struct Run {
    engine: Rc<Engine>,
    /// Taken out while a pump runs, so that a second pump or a cancel meanwhile is refused.
    state: Rc<RefCell<Option<RunState>>>,
}

struct RunState {
    scheduler: Scheduler,
    meter: Meter,
    seq: usize,
    /// The wait before the engine, which every event time includes.
    queued_ms: f64,
}

impl RunState {
    /// Milliseconds since the request, as the events count them.
    fn now_ms(&self) -> f64 {
        self.queued_ms + self.scheduler.now_ms()
    }
}

#[wasm_bindgen]
impl Run {
    /// Run decode steps for about `budget_ms` (at least one; the prefill's step and the first
    /// token's return at once, so that TTFT shows without delay), then resolve to `{ events,
    /// report, done }`: the events in order, the meter's report as of now, and whether the run
    /// has ended. A pump's events reach JavaScript together: every crossing from wasm into
    /// JavaScript costs a fraction of a millisecond in a worker, and crossing per token would slow
    /// the very decode being measured.
    pub fn pump(&self, budget_ms: f64) -> js_sys::Promise {
        let engine = self.engine.clone();
        let state = self.state.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let busy = || JsValue::from(js_error("the run is already being pumped"));
            let mut run = state.borrow_mut().take().ok_or_else(busy)?;
            let start = run.scheduler.now_ms();
            let mut events = Vec::new();
            while !run.scheduler.is_idle() {
                let step = run.scheduler.step(&engine).await;
                let step = match step {
                    Ok(step) => step,
                    Err(e) => {
                        *state.borrow_mut() = Some(run);
                        return Err(engine_error(e));
                    }
                };
                let first = step
                    .iter()
                    .any(|e| matches!(e.event, Event::Prefill { .. }));
                for e in &step {
                    run.meter.observe(&e.event);
                }
                events.extend(step.into_iter().map(|e| e.event));
                if first || run.scheduler.now_ms() - start >= budget_ms {
                    break;
                }
            }
            #[derive(Serialize)]
            struct Pumped<'a> {
                events: &'a [Event],
                report: crate::meter::Report,
                /// Where each word of the output so far ends (UTF-16 offsets), for the page's
                /// reading cursor: the meter's word rule, so the page needs none of its own.
                word_ends: Vec<usize>,
                done: bool,
            }
            let done = run.scheduler.is_idle();
            let report = if done {
                run.meter.final_report()
            } else {
                run.meter.report(run.now_ms())
            };
            let pumped = to_js(&Pumped {
                events: &events,
                report,
                word_ends: crate::meter::word_ends_utf16(run.meter.text()),
                done,
            });
            *state.borrow_mut() = Some(run);
            Ok(pumped)
        })
    }

    /// Stop the run now (between pumps); returns its done event, or `null` when it had ended.
    pub fn cancel(&self) -> Result<JsValue, JsError> {
        let mut state = self.state.borrow_mut();
        let run = state
            .as_mut()
            .ok_or_else(|| js_error("the run is being pumped; cancel between pumps"))?;
        let seq = run.seq;
        Ok(match run.scheduler.cancel(seq) {
            Some(done) => {
                run.meter.observe(&done.event);
                to_js(&done.event)
            }
            None => JsValue::NULL,
        })
    }

    /// The meter's report as of now (the final one once the run is done).
    pub fn report(&self) -> Result<JsValue, JsError> {
        let state = self.state.borrow();
        let run = state
            .as_ref()
            .ok_or_else(|| js_error("the run is being pumped"))?;
        Ok(to_js(&if run.scheduler.is_idle() {
            run.meter.final_report()
        } else {
            run.meter.report(run.now_ms())
        }))
    }
}

/// A concurrency lab's settings, as the page sends them.
#[derive(Deserialize, Serialize)]
#[serde(default)]
struct LabOptions {
    users: usize,
    /// `burst` or `poisson:RATE`.
    arrival: String,
    /// The most sequences one step decodes; `None`: as many as there are users.
    max_batch: Option<usize>,
    max_tokens: usize,
    /// Given to the users in turn; `None`: the engine's built-in list of varied prompts.
    #[serde(skip_serializing)]
    prompts: Option<Vec<String>>,
    reading_wpm: f64,
}

impl Default for LabOptions {
    fn default() -> Self {
        Self {
            users: 4,
            arrival: "burst".into(),
            max_batch: None,
            max_tokens: 128,
            prompts: None,
            reading_wpm: DEFAULT_READING_WPM,
        }
    }
}

/// The most users the page's lab simulates.
pub const MAX_LAB_USERS: usize = 64;

/// A concurrency lab in progress: users' requests in one scheduler, advanced by `pump` so that the
/// worker hears a cancel between pumps.
#[wasm_bindgen]
pub struct Lab {
    engine: Rc<Engine>,
    /// Taken out while a pump runs, so that a second pump or a cancel meanwhile is refused.
    state: Rc<RefCell<Option<LabState>>>,
}

struct LabState {
    scheduler: Scheduler,
    meter: BatchMeter,
    users: usize,
    /// The step's ceiling at the lab's batch size, measured once every user has ended
    /// ([`Engine::products_alone`]); `None` before then, on a GPU, and after a cancel.
    products_alone: Option<crate::meter::Products>,
    /// Whether `cancel_all` ended the lab: then Stop ends it at once, with no ceiling to time.
    cancelled: bool,
}

/// One user's figures so far, for its lane.
#[derive(Serialize)]
struct UserFigures {
    seq: usize,
    tokens: usize,
    ttft_ms: Option<f64>,
    decode_tps: Option<f64>,
    reason: Option<crate::StopReason>,
}

#[wasm_bindgen]
impl Session {
    /// Start a concurrency lab (see `LabOptions`): every user's request is submitted now, to arrive
    /// as `arrival` says. Then call `pump` until it reports `done`.
    #[wasm_bindgen(js_name = startLab)]
    pub fn start_lab(&self, options: JsValue) -> Result<Lab, JsError> {
        let options: LabOptions = if options.is_undefined() || options.is_null() {
            LabOptions::default()
        } else {
            serde_wasm_bindgen::from_value(options).map_err(js_error)?
        };
        if !(1..=MAX_LAB_USERS).contains(&options.users) {
            return Err(js_error(format!(
                "{} users: the lab simulates 1 to {MAX_LAB_USERS}",
                options.users
            )));
        }
        let arrival: Arrival = options.arrival.parse().map_err(js_error)?;
        let prompts = options
            .prompts
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| DEFAULT_PROMPTS.iter().map(|p| p.to_string()).collect());
        let max_batch = options.max_batch.unwrap_or(options.users).max(1);
        let run = GenerateOptions {
            max_tokens: options.max_tokens,
            ..Default::default()
        };
        let conditions = LoadConditions {
            model: self.engine.info.clone(),
            users: options.users,
            max_batch,
            arrival: arrival.to_string(),
            max_tokens: options.max_tokens,
            sampling: run.sampling,
            warm_up_ms: self.warm_up_ms.get(),
        };
        let mut meter = BatchMeter::new(conditions, options.reading_wpm);
        let mut scheduler = Scheduler::new(max_batch);
        for (i, at) in arrival.times(options.users).into_iter().enumerate() {
            let request = Request {
                prompt: prompts[i % prompts.len()].clone(),
                options: run,
            };
            let seq = scheduler
                .submit(&self.engine, &request, Some(at))
                .map_err(js_error)?;
            meter.arrive(seq, at);
        }
        Ok(Lab {
            engine: self.engine.clone(),
            state: Rc::new(RefCell::new(Some(LabState {
                scheduler,
                meter,
                users: options.users,
                products_alone: None,
                cancelled: false,
            }))),
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
            let mut lab = state.borrow_mut().take().ok_or_else(busy)?;
            let start = lab.scheduler.now_ms();
            let mut events = Vec::new();
            let mut wait_ms = None;
            while !lab.scheduler.is_idle() {
                let step = lab.scheduler.step(&engine).await.map_err(engine_error)?;
                if step.is_empty() && lab.scheduler.running() == 0 {
                    wait_ms = lab
                        .scheduler
                        .next_arrival_ms()
                        .map(|at| (at - lab.scheduler.now_ms()).max(0.0));
                    break;
                }
                for e in &step {
                    lab.meter.observe(e.seq, &e.event);
                }
                events.extend(step);
                if lab.scheduler.now_ms() - start >= budget_ms {
                    break;
                }
            }
            let done = lab.scheduler.is_idle();
            if done && lab.products_alone.is_none() && !lab.cancelled {
                // About 0.2 s of the products alone, after the last user's end: the level's own
                // figures are already fixed.
                lab.products_alone = engine.products_alone(lab.meter.conditions().batch_rows());
            }
            #[derive(Serialize)]
            struct Pumped<'a> {
                events: &'a [crate::SeqEvent],
                users: Vec<UserFigures>,
                report: crate::meter::LoadReport,
                done: bool,
                wait_ms: Option<f64>,
            }
            let pumped = to_js(&Pumped {
                events: &events,
                users: lab.figures(),
                report: lab.report(),
                done,
                wait_ms,
            });
            *state.borrow_mut() = Some(lab);
            Ok(pumped)
        })
    }

    /// End every user's request now (between pumps); returns their done events.
    #[wasm_bindgen(js_name = cancelAll)]
    pub fn cancel_all(&self) -> Result<JsValue, JsError> {
        let mut state = self.state.borrow_mut();
        let lab = state
            .as_mut()
            .ok_or_else(|| js_error("the lab is being pumped; cancel between pumps"))?;
        lab.cancelled = true;
        let mut events = Vec::new();
        for seq in 0..lab.users {
            if let Some(done) = lab.scheduler.cancel(seq) {
                lab.meter.observe(seq, &done.event);
                events.push(done);
            }
        }
        Ok(to_js(&events))
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

impl LabState {
    fn report(&self) -> crate::meter::LoadReport {
        crate::meter::LoadReport {
            products_alone: self.products_alone,
            ..self.meter.report()
        }
    }

    fn figures(&self) -> Vec<UserFigures> {
        (0..self.users)
            .filter_map(|seq| {
                let r = self.meter.user(seq)?.final_report();
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
}

/// Milliseconds since the Unix epoch with sub-millisecond precision, comparable between the page
/// and its worker (`performance.timeOrigin + performance.now()`).
fn now_epoch_ms() -> f64 {
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
