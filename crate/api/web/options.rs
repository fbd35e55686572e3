//! The settings a run and a concurrency lab take, as the page sends them, and their defaults.

use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

use crate::api::web::js::{js_error, to_js};
use crate::cpu::Threads;
use crate::decode::{Arrival, DEFAULT_MAX_TOKENS, DEFAULT_PROMPTS, GenerateOptions, Sampling};
use crate::meter::{DEFAULT_READING_WPM, Slo};

/// Options for one run, as the page sends them.
#[derive(Deserialize, Serialize)]
#[serde(default)]
pub(crate) struct RunOptions {
    pub(crate) max_tokens: usize,
    pub(crate) temperature: f32,
    pub(crate) top_p: f32,
    pub(crate) seed: u64,
    /// `performance.timeOrigin + performance.now()` when the user asked, on the page.
    #[serde(skip_serializing)]
    pub(crate) requested_at: Option<f64>,
    /// `performance.timeOrigin`, for the page's first run: the report then says how long from
    /// opening the page to the first token (`page_open_to_first_token_ms`).
    #[serde(skip_serializing)]
    pub(crate) page_opened_at: Option<f64>,
    pub(crate) reading_wpm: f64,
    /// Wrap the prompt in the model's chat template, when it has one.
    pub(crate) chat: bool,
    /// Speculative decoding: `off`, `lookup` (prompt lookup) or `draft` (the draft model the
    /// session was given, `Session::loadDraft`).
    pub(crate) speculate: String,
    /// The longest draft verified in one pass.
    pub(crate) draft_max: usize,
    /// Draft `draft_max` tokens every step instead of the length measured costs favour.
    pub(crate) draft_fixed: bool,
    /// Each token's log probability and this many alternatives (the token inspector), and the
    /// prompt's tokens with the prefill event.
    pub(crate) logprobs: Option<usize>,
    /// The memory's read bandwidth in GB/s that the page measured at the engine's threads
    /// (`measureReadBandwidth`): CPU runs' reports then hold the bandwidth ceiling.
    #[serde(skip_serializing)]
    pub(crate) read_gb_per_s: Option<f64>,
    /// On WebGPU: what one more dispatch costs, in us (`measureGpu`): the reports hold the
    /// dispatch floor.
    #[serde(skip_serializing)]
    pub(crate) dispatch_us: Option<f64>,
    /// The page's cold start before this run (its first), each part's start and end in ms since
    /// the epoch, as the page and its worker marked them: the report holds the waterfall.
    #[serde(skip_serializing)]
    pub(crate) cold_start: Vec<crate::meter::ColdPart>,
    /// Time each step by phase with the CPU engine's timers (the page's phase bar): the token
    /// events carry the step's phases, the reports `phases`.
    pub(crate) profile: bool,
}

impl RunOptions {
    /// The options the page sent (`undefined` or `null`: the defaults).
    pub(crate) fn from_js(options: JsValue) -> Result<RunOptions, JsError> {
        if options.is_undefined() || options.is_null() {
            return Ok(RunOptions::default());
        }
        let options: RunOptions = serde_wasm_bindgen::from_value(options).map_err(js_error)?;
        measured(options.read_gb_per_s, "read_gb_per_s", "GB/s")?;
        measured(options.dispatch_us, "dispatch_us", "us")?;
        Ok(options)
    }

    /// The sampling these options ask for, checked.
    pub(crate) fn sampling(&self) -> Result<Sampling, JsError> {
        Sampling::checked(self.temperature, self.top_p, self.seed).map_err(js_error)
    }
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
            page_opened_at: None,
            reading_wpm: DEFAULT_READING_WPM,
            chat: GenerateOptions::default().chat,
            speculate: "off".into(),
            draft_max: crate::decode::speculate::DEFAULT_MAX_DRAFT,
            draft_fixed: false,
            logprobs: None,
            read_gb_per_s: None,
            dispatch_us: None,
            profile: false,
            cold_start: Vec::new(),
        }
    }
}

/// The settings a run and a lab take when the page does not say: the one place the page's form
/// gets its defaults from (`{ run: { max_tokens, temperature, top_p, seed, reading_wpm, chat }, lab:
/// { users, arrival, max_batch, max_tokens, reading_wpm }, build, feel: [[rate, title]] }`).
#[wasm_bindgen]
pub fn defaults() -> JsValue {
    #[derive(Serialize)]
    struct Defaults {
        run: RunOptions,
        lab: LabOptions,
        build: Build,
        /// The speed buttons' rates, each with how it compares with a reader (the meter's
        /// reading speed and typical tokens a word).
        feel: Vec<(f64, String)>,
        /// The GGUF architectures the engine runs, with the models of each, in one text.
        architectures: &'static str,
    }
    /// What this build of the engine can do.
    #[derive(Serialize)]
    struct Build {
        /// The CPU kernels on more than one thread (the threaded build, pkg/threads/).
        threads: bool,
        /// The wgpu backend (every build but the threaded one).
        gpu: bool,
    }
    to_js(&Defaults {
        run: RunOptions::default(),
        lab: LabOptions::default(),
        build: Build {
            threads: Threads::MANY,
            gpu: cfg!(feature = "gpu"),
        },
        feel: crate::meter::FEEL_RATES
            .iter()
            .map(|&rate| (rate, crate::meter::pace(rate, DEFAULT_READING_WPM)))
            .collect(),
        architectures: crate::loading::arch::KNOWN,
    })
}

/// A concurrency lab's settings, as the page sends them.
#[derive(Deserialize, Serialize)]
#[serde(default)]
pub(crate) struct LabOptions {
    pub(crate) users: usize,
    /// `burst` or `poisson:RATE`.
    pub(crate) arrival: String,
    /// The most sequences one step decodes; `None`: as many as there are users.
    pub(crate) max_batch: Option<usize>,
    pub(crate) max_tokens: usize,
    /// Given to the users in turn; `None`: the engine's built-in list of varied prompts.
    #[serde(skip_serializing)]
    pub(crate) prompts: Option<Vec<String>>,
    pub(crate) reading_wpm: f64,
    /// This device's read bandwidth in GB/s, measured by the page apart from the level (as for a
    /// run): the level's report holds its bandwidth ceiling.
    #[serde(skip_serializing)]
    pub(crate) read_gb_per_s: Option<f64>,
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
            read_gb_per_s: None,
        }
    }
}

/// A lab's settings as the page sends them, checked: a local lab's and an endpoint's alike.
pub(crate) struct LabSettings {
    pub(crate) options: LabOptions,
    pub(crate) arrival: Arrival,
    /// Given to the users in turn: the page's, or the engine's built-in list.
    pub(crate) prompts: Vec<String>,
    pub(crate) slo: Option<Slo>,
}

impl LabSettings {
    /// `options` (`LabOptions`; `undefined` or `null`: the defaults) and the objectives in ms
    /// (`lab_slo`), each checked, or an error in one sentence.
    pub(crate) fn from_js(
        options: JsValue,
        slo_ttft_ms: Option<f64>,
        slo_tpot_ms: Option<f64>,
    ) -> Result<LabSettings, JsError> {
        let mut options: LabOptions = if options.is_undefined() || options.is_null() {
            LabOptions::default()
        } else {
            serde_wasm_bindgen::from_value(options).map_err(js_error)?
        };
        measured(options.read_gb_per_s, "read_gb_per_s", "GB/s")?;
        if !(1..=MAX_LAB_USERS).contains(&options.users) {
            return Err(js_error(format!(
                "{} users: the lab runs 1 to {MAX_LAB_USERS}",
                options.users
            )));
        }
        Ok(LabSettings {
            arrival: options.arrival.parse().map_err(js_error)?,
            prompts: options
                .prompts
                .take()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| DEFAULT_PROMPTS.iter().map(|p| p.to_string()).collect()),
            slo: lab_slo(slo_ttft_ms, slo_tpot_ms)?,
            options,
        })
    }
}

/// A figure the page measured apart and passes in (a bandwidth, a dispatch's cost): absent, or a
/// positive number; anything else would put a ceiling of 0 or NaN in every report.
fn measured(value: Option<f64>, name: &str, unit: &str) -> Result<(), JsError> {
    match value {
        Some(v) if !(v.is_finite() && v > 0.0) => Err(js_error(format!(
            "{name} is {v}: a measured figure is a positive number of {unit} (leave it out for none)"
        ))),
        _ => Ok(()),
    }
}

/// A lab's service-level objectives in ms, TTFT and TPOT (`None`: not given), checked: each a
/// positive number. With either, the lab's report has goodput. Taken as arguments of `startLab`
/// rather than fields of its options: two fields more in the options' reader cost the page's
/// wasm more than its size budget had left.
fn lab_slo(ttft_ms: Option<f64>, tpot_ms: Option<f64>) -> Result<Option<Slo>, JsError> {
    let given = [ttft_ms, tpot_ms];
    if given
        .iter()
        .flatten()
        .any(|ms| !(ms.is_finite() && *ms > 0.0))
    {
        return Err(js_error(
            "an objective is a positive number of milliseconds (leave it empty for none)",
        ));
    }
    Ok(given.iter().any(Option::is_some).then_some(Slo {
        ttft_ms,
        tpot_ms,
        e2e_ms: None,
    }))
}

/// The most users the page's lab simulates.
pub const MAX_LAB_USERS: usize = 64;
