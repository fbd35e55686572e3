//! A loaded model ([`Session`]) and one metered run on it ([`Run`]), pumped by the worker.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::api::auto::{self, Check, Entrant, Verdict};
use crate::api::drive::{MeteredRun, pumping, slice};
use crate::api::web::js::{Pumped, engine_error, js_error, now_epoch_ms, to_js};
use crate::api::web::options::RunOptions;
use crate::backend::{Backend, BackendChoice, BackendKind};
use crate::cpu::Threads;
use crate::decode::{Engine, GenerateOptions, ModelInfo, Speculation};
use crate::loading::ModelFiles;
use crate::loading::gguf_stream::GgufStream;
use crate::model::{FileBytes, FileSource, Quant};

/// A loaded model on its backend.
#[wasm_bindgen]
pub struct Session {
    pub(super) engine: Rc<Engine>,
    backend: Backend,
    details: String,
    pub(super) warm_up_ms: Rc<Cell<Option<f64>>>,
    /// A draft model for speculative decoding (`loadDraft`), and its name.
    draft: RefCell<Option<(Arc<Engine>, String)>>,
    /// What the GPU's check against the CPU found, where it ran (`check_gpu` at load).
    gpu_check: Option<Check>,
}

/// Load a model. `model` is a GGUF or a llama2.c `.bin`, or `model.safetensors` when `hf_config`
/// (the bytes of `config.json`) is given. `tokenizer` may be left out for a GGUF that carries one.
/// `backend` is `auto`, `wgpu` or `cpu`; `quant` is `f32`, `q8` or `q4`. `threads` (default 1)
/// runs the CPU kernels on that many threads: Web Workers that this build (the threaded one,
/// `threadedBuild()`) starts beside the caller, which must itself be a worker. With `check_gpu`
/// and a GPU backend, the model is also loaded on the CPU for a moment and the GPU's logits are
/// checked against it (`api/auto.rs`); `info().gpu_check` says what was found.
#[allow(clippy::too_many_arguments)]
#[wasm_bindgen(js_name = loadSession)]
pub async fn load_session(
    name: String,
    model: js_sys::Uint8Array,
    tokenizer: Option<Vec<u8>>,
    backend: String,
    quant: String,
    hf_config: Option<Vec<u8>>,
    threads: Option<u32>,
    check_gpu: Option<bool>,
) -> Result<Session, JsError> {
    let files = match hf_config {
        Some(config) => ModelFiles::hugging_face(name, config, in_memory(model)),
        None => model_files(name, model),
    };
    Session::load(
        files,
        tokenizer,
        backend,
        quant,
        threads,
        check_gpu.unwrap_or(false),
    )
    .await
}

/// A GGUF read as it downloads: `push` each piece as it arrives (each tensor is made into the
/// weights as its bytes pass, and the bytes are let go), then give it to `loadStreamed` or
/// `Session.loadDraftStreamed`. `total` is the file's length in bytes where it is known.
#[wasm_bindgen]
pub struct ModelStream(GgufStream);

#[wasm_bindgen]
impl ModelStream {
    #[wasm_bindgen(constructor)]
    pub fn new(total: Option<f64>) -> ModelStream {
        ModelStream(GgufStream::new(total.map(|t| t as usize)))
    }

    /// The file's next bytes; a file that cannot be a GGUF is an error at its first bytes.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), JsError> {
        self.0.push(bytes).map_err(js_error)
    }
}

/// `loadSession` for a GGUF pushed into a [`ModelStream`] as it downloaded.
#[wasm_bindgen(js_name = loadStreamed)]
pub async fn load_streamed(
    name: String,
    model: ModelStream,
    tokenizer: Option<Vec<u8>>,
    backend: String,
    quant: String,
    threads: Option<u32>,
    check_gpu: Option<bool>,
) -> Result<Session, JsError> {
    let files = ModelFiles::streamed(name, model.0.finish().map_err(js_error)?);
    Session::load(
        files,
        tokenizer,
        backend,
        quant,
        threads,
        check_gpu.unwrap_or(false),
    )
    .await
}

/// The race's verdict from each backend's timed decode (`{ label, decode_tps }`) and the GPU's
/// check (or null): the faster, never a GPU that failed, and the conditions line that says so.
#[wasm_bindgen(js_name = raceVerdict)]
pub fn race_verdict(cpu: JsValue, gpu: JsValue, check: JsValue) -> Result<JsValue, JsError> {
    let entrant = |v: JsValue| serde_wasm_bindgen::from_value::<Entrant>(v).map_err(js_error);
    let check: Option<Check> = serde_wasm_bindgen::from_value(check).map_err(js_error)?;
    Ok(to_js(&Verdict::new(entrant(cpu)?, entrant(gpu)?, check)))
}

impl Session {
    async fn load(
        files: ModelFiles,
        tokenizer: Option<Vec<u8>>,
        backend: String,
        quant: String,
        threads: Option<u32>,
        check_gpu: bool,
    ) -> Result<Session, JsError> {
        let choice: BackendChoice = backend.parse().map_err(js_error)?;
        let quant: Quant = quant.parse().map_err(js_error)?;
        let mut backend = Backend::init(choice).await.map_err(js_error)?;
        let threads = threads.unwrap_or(1) as usize;
        if backend.kind == BackendKind::Cpu && threads > 1 {
            backend = backend.with_threads(start_threads(threads).await?);
        }
        let check_gpu = check_gpu && backend.kind == BackendKind::Wgpu;
        let (engine, twin) =
            Engine::load_twin(files, tokenizer.as_deref(), quant, &backend, check_gpu)
                .map_err(js_error)?;
        let mut engine = engine;
        let gpu_check = match twin {
            Some(cpu) => Some(auto::check(&engine, &cpu).await.map_err(js_error)?),
            None => None,
        };
        if let Some(check) = &gpu_check {
            engine.info.backend_note = Some(check.sentence());
        }
        Ok(Session {
            engine: Rc::new(engine),
            details: backend.details.clone(),
            backend,
            warm_up_ms: Rc::new(Cell::new(None)),
            draft: RefCell::new(None),
            gpu_check,
        })
    }

    /// Load `files` as the draft model, named `name` in the conditions.
    fn load_draft_files(
        &self,
        name: String,
        files: ModelFiles,
        tokenizer: Option<Vec<u8>>,
        quant: String,
    ) -> Result<(), JsError> {
        let quant: Quant = quant.parse().map_err(js_error)?;
        let draft =
            Engine::load(files, tokenizer.as_deref(), quant, &self.backend).map_err(js_error)?;
        let draft = Arc::new(draft);
        let label = format!("{name} {quant}");
        // Refused here, not at the first run, when the vocabularies differ.
        Speculation::shared_draft(&self.engine, draft.clone(), label.clone()).map_err(js_error)?;
        *self.draft.borrow_mut() = Some((draft, label));
        Ok(())
    }
}

/// `count` threads, once every worker has started (a Web Worker takes tens of milliseconds to
/// load the module; a figure measured before would be one thread's).
pub(super) async fn start_threads(count: usize) -> Result<Threads, JsError> {
    const START_MS: f64 = 20_000.0;
    let threads = Threads::new(count).map_err(js_error)?;
    let since = now_epoch_ms();
    while threads.started().map_err(js_error)? < count - 1 {
        if now_epoch_ms() - since > START_MS {
            return Err(js_error(format!(
                "{} of {} CPU threads started in {} s; try fewer threads",
                threads.started().unwrap_or(0) + 1,
                count,
                START_MS / 1000.0
            )));
        }
        sleep_ms(10).await;
    }
    Ok(threads)
}

/// Let the event loop run for `ms` milliseconds.
async fn sleep_ms(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        let global: web_sys::WorkerGlobalScope = js_sys::global().unchecked_into();
        let _ = global.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

#[wasm_bindgen]
impl Session {
    /// What was loaded: name, parameters, quantization, bytes, backend, adapter and its details.
    pub fn info(&self) -> JsValue {
        #[derive(Serialize)]
        struct Info<'a> {
            #[serde(flatten)]
            model: &'a ModelInfo,
            adapter_details: &'a str,
            gpu_check: Option<&'a Check>,
            /// The check in one sentence ("GPU check passed: ..." or "this GPU disagrees ...").
            gpu_check_sentence: Option<String>,
        }
        to_js(&Info {
            model: &self.engine.info,
            adapter_details: &self.details,
            gpu_check: self.gpu_check.as_ref(),
            gpu_check_sentence: self.gpu_check.as_ref().map(Check::sentence),
        })
    }

    /// Say how the backend was chosen in every report's conditions (`auto`'s verdict, which the
    /// page's race decides across two workers). Before any run holds the engine.
    #[wasm_bindgen(js_name = setBackendNote)]
    pub fn set_backend_note(&mut self, note: String) -> Result<(), JsError> {
        let engine = Rc::get_mut(&mut self.engine)
            .ok_or_else(|| js_error("the backend's note is set before any run"))?;
        engine.info.backend_note = Some(note);
        Ok(())
    }

    /// The race's timed decode on this (warm) session: a few greedy tokens, resolving to the
    /// meter's decode tok/s (`api/auto.rs`).
    #[wasm_bindgen(js_name = raceDecode)]
    pub fn race_decode(&self) -> js_sys::Promise {
        let engine = self.engine.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let tps = auto::timed_decode(&engine).await.map_err(engine_error)?;
            Ok(JsValue::from_f64(tps))
        })
    }

    /// This GPU's ceilings (`{ read_gb_per_s, dispatch_us, probe_bytes }`: a read kernel's
    /// bandwidth and what one more dispatch costs), measured on the device the model runs on; an
    /// error where it runs on the CPU (whose ceiling `measureReadBandwidth` measures).
    #[wasm_bindgen(js_name = measureGpu)]
    pub fn measure_gpu(&self) -> js_sys::Promise {
        let on_gpu = self.engine.info.backend == BackendKind::Wgpu;
        wasm_bindgen_futures::future_to_promise(async move {
            if !on_gpu {
                return Err(js_error(
                    "the model runs on the CPU: measureReadBandwidth measures its ceiling",
                )
                .into());
            }
            crate::api::web::gpu_ceilings::gpu_ceilings().await
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

    /// Load a draft model for speculative decoding (`speculate: "draft"` in a run's options) on
    /// this session's backend: a GGUF or llama2.c `.bin` (`tokenizer` as `loadSession` takes it)
    /// in `quant`, named `name` in the conditions. It must share the model's vocabulary.
    #[wasm_bindgen(js_name = loadDraft)]
    pub fn load_draft(
        &self,
        name: String,
        model: js_sys::Uint8Array,
        tokenizer: Option<Vec<u8>>,
        quant: String,
    ) -> Result<(), JsError> {
        self.load_draft_files(name.clone(), model_files(name, model), tokenizer, quant)
    }

    /// `loadDraft` for a GGUF pushed into a `ModelStream` as it downloaded.
    #[wasm_bindgen(js_name = loadDraftStreamed)]
    pub fn load_draft_streamed(
        &self,
        name: String,
        model: ModelStream,
        tokenizer: Option<Vec<u8>>,
        quant: String,
    ) -> Result<(), JsError> {
        let files = ModelFiles::streamed(name.clone(), model.0.finish().map_err(js_error)?);
        self.load_draft_files(name, files, tokenizer, quant)
    }

    /// Warm the draft model up as `warmUp` does the model (its kernels may be another
    /// quantization's, not yet optimized by the browser); resolves to ms.
    #[wasm_bindgen(js_name = warmUpDraft)]
    pub fn warm_up_draft(&self) -> Result<js_sys::Promise, JsError> {
        let draft = self.draft.borrow();
        let (engine, _) = draft
            .as_ref()
            .ok_or_else(|| js_error("no draft model is loaded"))?;
        let engine = engine.clone();
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            let ms = engine.warm_up().await.map_err(engine_error)?;
            Ok(JsValue::from_f64(ms))
        }))
    }

    /// Whether a draft model is loaded (`loadDraft`).
    #[wasm_bindgen(js_name = hasDraft)]
    pub fn has_draft(&self) -> bool {
        self.draft.borrow().is_some()
    }

    /// Start generating from `prompt` (see `RunOptions`); then call `pump` on the returned run
    /// until it reports `done`, and `cancel` between pumps to stop it. A bad prompt or setting is
    /// an error here.
    pub fn start(&self, prompt: String, options: JsValue) -> Result<Run, JsError> {
        let options = RunOptions::from_js(options)?;
        let sampling = options.sampling()?;
        let queued_ms = options
            .requested_at
            .map_or(0.0, |at| (now_epoch_ms() - at).max(0.0));
        let generate = GenerateOptions {
            max_tokens: options.max_tokens,
            sampling,
            queued_ms,
            chat: options.chat,
            logprobs: options
                .logprobs
                .map(|n| n.min(crate::decode::MAX_TOP_LOGPROBS)),
        };
        let speculation = match options.speculate.as_str() {
            "off" | "" => None,
            "lookup" => Some(Speculation::lookup()),
            "draft" => {
                let draft = self.draft.borrow();
                let (engine, name) = draft.as_ref().ok_or_else(|| {
                    js_error("speculate: draft needs a draft model: call loadDraft first")
                })?;
                Some(
                    Speculation::shared_draft(&self.engine, engine.clone(), name.clone())
                        .map_err(js_error)?,
                )
            }
            other => {
                return Err(js_error(format!(
                    "speculate: {other:?} is not a choice (off, lookup, draft)"
                )));
            }
        };
        let speculation = match speculation {
            Some(mut s) => {
                s.max_draft = options.draft_max;
                s.fixed = options.draft_fixed;
                s.validate().map_err(js_error)?;
                Some(s)
            }
            None => None,
        };
        // The phase clock is the engine's: on for this run or off, as it asks; in the page the
        // CPU's times one decode step in PAGE_TIMED_EVERY (a GPU's in its own number).
        if let Some(clock) = self.engine.model.phases() {
            if self.engine.info.backend == crate::BackendKind::Cpu {
                clock.set_every(crate::model::phases::PAGE_TIMED_EVERY);
            }
            clock.set_on(options.profile);
        }
        let mut run = MeteredRun::start(
            &self.engine,
            &prompt,
            generate,
            speculation.as_ref(),
            options.reading_wpm,
            self.warm_up_ms.get(),
        )
        .map_err(js_error)?;
        if let Some(opened) = options.page_opened_at {
            // From opening the page to the request; the report adds this run's TTFT.
            let request = options.requested_at.unwrap_or_else(now_epoch_ms);
            run.page_opened(request - opened);
            // The cold start's parts, from the epoch to the page's own clock.
            let parts = options.cold_start.iter().map(|p| crate::meter::ColdPart {
                start_ms: p.start_ms - opened,
                end_ms: p.end_ms - opened,
                ..p.clone()
            });
            run.cold_start(parts.collect());
        }
        // This device's read bandwidth, measured by the page apart from the run (the CPU's by
        // `measureReadBandwidth` in a worker of its own, the GPU's by `measureGpu`): the reports
        // hold the decode's ceiling; on a GPU, with one dispatch's cost, its dispatch floor.
        if let Some(gb_per_s) = options.read_gb_per_s {
            run.read_bandwidth(gb_per_s, self.engine.model.kv_bytes_per_position() as u64);
        }
        let dispatch = options
            .dispatch_us
            .zip(crate::api::web::gpu_ceilings::dispatches(&self.engine));
        Ok(Run {
            engine: self.engine.clone(),
            state: Rc::new(RefCell::new(Some(run))),
            dispatch: dispatch.map(|(us, start)| (start, us)),
        })
    }
}

/// One generation in progress, advanced by `pump`.
#[wasm_bindgen]
pub struct Run {
    engine: Rc<Engine>,
    /// Taken out while a pump runs, so that a second pump or a cancel meanwhile is refused.
    state: Rc<RefCell<Option<MeteredRun>>>,
    /// On a GPU: the model's dispatches when the run began, and one dispatch's cost in us (the
    /// reports' dispatch floor counts the run's dispatches a token).
    dispatch: Option<(u64, f64)>,
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
        let dispatch = self.dispatch;
        wasm_bindgen_futures::future_to_promise(async move {
            let busy = || JsValue::from(js_error("the run is already being pumped"));
            pumping(&state, busy, async |run: &mut MeteredRun| {
                let arrivals = run.meter().arrivals();
                let slice = slice(run, &engine, budget_ms).await.map_err(engine_error)?;
                if let Some((start, us)) = dispatch
                    && let Some(now) = crate::api::web::gpu_ceilings::dispatches(&engine)
                {
                    let tokens = run.meter().token_times().len().max(1);
                    run.dispatch_cost(now.saturating_sub(start) as f64 / tokens as f64, us);
                }
                Ok(to_js(&Pumped {
                    events: &slice.events,
                    points: run.meter().rate_points(arrivals),
                    report: run.report(),
                    word_ends: crate::meter::word_ends_utf16(run.text()),
                    done: run.is_done(),
                    token_note: None,
                }))
            })
            .await
        })
    }

    /// Stop the run now (between pumps); returns its done event, or `null` when it had ended.
    pub fn cancel(&self) -> Result<JsValue, JsError> {
        let mut state = self.state.borrow_mut();
        let run = state
            .as_mut()
            .ok_or_else(|| js_error("the run is being pumped; cancel between pumps"))?;
        Ok(match run.cancel() {
            Some(done) => to_js(&done),
            None => JsValue::NULL,
        })
    }

    /// The meter's report as of now (the final one once the run is done).
    pub fn report(&self) -> Result<JsValue, JsError> {
        let state = self.state.borrow();
        let run = state
            .as_ref()
            .ok_or_else(|| js_error("the run is being pumped"))?;
        Ok(to_js(&run.report()))
    }
}

/// A model file the worker holds (`model`, outside wasm memory) as the engine loads it: a GGUF is
/// read a tensor at a time from where it is, so that wasm memory, which never shrinks, holds the
/// weights and not the file beside them; a llama2.c `.bin` is copied in whole (its f32 weights
/// are then used in place).
fn model_files(name: String, model: js_sys::Uint8Array) -> ModelFiles {
    ModelFiles::single_from(name, FileSource::Outside(Arc::new(JsFile(model))))
}

/// One copy into wasm memory, 4-byte aligned.
fn in_memory(model: js_sys::Uint8Array) -> FileBytes {
    let mut bytes = FileBytes::zeroed(model.length() as usize);
    model.copy_to(bytes.bytes_mut());
    bytes
}

/// A file in the worker's JavaScript memory.
struct JsFile(js_sys::Uint8Array);

// SAFETY: a `JsFile` is made, read and dropped by the loader on the worker's own thread; it lives
// in a `ModelFiles`, which the engine lets go once loaded, and no CPU thread (a Web Worker of
// the threaded build) ever holds it: the weights are copied out of it.
unsafe impl Send for JsFile {}
unsafe impl Sync for JsFile {}

impl crate::model::ReadAt for JsFile {
    fn len(&self) -> usize {
        self.0.length() as usize
    }

    fn read_at(&self, start: usize, out: &mut [u8]) {
        self.0
            .subarray(start as u32, (start + out.len()) as u32)
            .copy_to(out);
    }
}
