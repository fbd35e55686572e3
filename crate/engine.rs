//! Generation: a loaded model plus tokenizer, run as prefill (the whole prompt in one batched pass)
//! then decode (one token at a time through the KV cache), emitting timestamped events. Many
//! requests at once go through `scheduler.rs`; `generate` is its batch-1 case.
//!
//! The API is async because a browser can only read GPU results back asynchronously; natively the
//! futures are simply blocked on.

use serde::{Deserialize, Serialize};
use web_time::Instant;

use crate::backend::{Backend, BackendKind};
use crate::error::{Error, Result};
use crate::loading::ModelFiles;
use crate::model::Llama;
use crate::quant::Quant;
use crate::sampling::{Sampler, Sampling};
use crate::scheduler::{Request, Scheduler};
use crate::sequence::SeqEvent;
use crate::tokenizer::{BOS, Tokenizer};

/// What was loaded, for the conditions that travel with every figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    #[serde(rename = "model")]
    pub name: String,
    pub parameters: u64,
    pub quant: Quant,
    /// Bytes of all weights as loaded (device weights plus the host embedding table).
    pub weight_bytes: u64,
    /// Weight bytes one decode step reads: every device weight once, plus one embedding row.
    pub bytes_per_token: u64,
    pub backend: BackendKind,
    pub adapter: String,
    /// How `auto` chose the backend, when it did not take the GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_note: Option<String>,
    pub context_length: usize,
    pub vocab_size: usize,
    /// Matrices whose width did not allow blocks of 32 (quantized per tensor or kept f32).
    pub quant_exceptions: Vec<String>,
    /// The chat template a prompt is wrapped in (`ChatML`), if the model's file names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<String>,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model produced an end-of-text token: EOS, or a chat model's end of turn.
    Eos,
    /// The model produced beginning-of-sequence, which llama2.c treats as the end of a story.
    Bos,
    MaxTokens,
    ContextFull,
    Cancelled,
}

impl StopReason {
    /// The reason as it appears in JSON and reports (`max_tokens`).
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Eos => "eos",
            StopReason::Bos => "bos",
            StopReason::MaxTokens => "max_tokens",
            StopReason::ContextFull => "context_full",
            StopReason::Cancelled => "cancelled",
        }
    }
}

/// The engine's events; times are milliseconds since the request was made (queue time included).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The prompt has been tokenized and run in one forward pass; the first token is sampled.
    Prefill {
        prompt_tokens: usize,
        queued_ms: f64,
        tokenize_ms: f64,
        prefill_ms: f64,
        t_ms: f64,
    },
    /// One generated token (`text` may be empty while a multi-byte character is incomplete).
    Token {
        pos: usize,
        id: u32,
        text: String,
        t_ms: f64,
    },
    /// The end, always with a reason. `trailing_text` holds bytes that never completed a
    /// character (as U+FFFD), normally empty.
    Done {
        reason: StopReason,
        prompt_tokens: usize,
        output_tokens: usize,
        t_ms: f64,
        trailing_text: String,
    },
}

/// The most decode steps a warm-up runs...
pub const WARM_UP_STEPS: usize = 4096;
/// ...and about the longest it decodes (it always runs one step). In a browser long enough for
/// the hot code to be optimized (see [`Engine::warm_up`]); natively code is compiled ahead of time,
/// and one step compiles the GPU's shaders.
pub const WARM_UP_MS: f64 = if cfg!(target_arch = "wasm32") {
    300.0
} else {
    0.0
};

/// [`Engine::products_alone`] times at least this many passes...
pub const PRODUCTS_PASSES: usize = 5;
/// ...and goes on until this long has passed...
pub const PRODUCTS_MS: f64 = 200.0;
/// ...but times no more passes than this.
pub const PRODUCTS_MAX_PASSES: usize = 64;

/// How many tokens a run generates unless told otherwise (the CLI's and the wasm API's default too).
pub const DEFAULT_MAX_TOKENS: usize = 256;

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Time the request waited before reaching the engine (the page measures it across the worker).
    pub queued_ms: f64,
    /// Wrap the prompt as a user's turn in the model's chat template, when it has one (a model
    /// without one takes the prompt as it is either way).
    pub chat: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_tokens: DEFAULT_MAX_TOKENS,
            sampling: Sampling::default(),
            queued_ms: 0.0,
            chat: true,
        }
    }
}

/// Whether a listener wants generation to go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

pub struct Engine {
    pub model: Llama,
    pub tokenizer: Tokenizer,
    pub info: ModelInfo,
}

impl Engine {
    /// Build an engine from model files on a ready backend. The tokenizer comes from
    /// `tokenizer_bytes` (tokenizer.json or llama2.c tokenizer.bin) or, when that is `None`, from
    /// inside the model file (GGUF).
    pub fn load(
        files: ModelFiles,
        tokenizer_bytes: Option<&[u8]>,
        quant: Quant,
        backend: &Backend,
    ) -> Result<Engine> {
        let tokenizer = match tokenizer_bytes {
            Some(bytes) => Tokenizer::from_bytes(bytes)?,
            None => files.embedded_tokenizer()?.ok_or_else(|| {
                Error::BadTokenizer(format!(
                    "{} carries no tokenizer; give its tokenizer file (tokenizer.json or \
                     tokenizer.bin)",
                    files.name
                ))
            })?,
        };
        let weights = files.load()?;
        let config = weights.config.clone();
        // Every id the tokenizer can produce (and BOS and EOS, which the model's vocabulary of at
        // least 3 holds) must be a row of the embedding.
        if tokenizer.vocab_size() != config.vocab_size {
            return Err(Error::BadTokenizer(format!(
                "the tokenizer's ids run 0..{} but the model's vocabulary is 0..{}: they do not \
                 belong together",
                tokenizer.vocab_size(),
                config.vocab_size
            )));
        }
        let model = Llama::new(weights, quant, backend.device.as_ref(), backend.isa);
        let embedding_bytes = model.embedding_bytes();
        let info = ModelInfo {
            name: files.name,
            parameters: config.parameter_count(),
            quant,
            weight_bytes: model.quant.device_bytes + embedding_bytes,
            bytes_per_token: model.quant.device_bytes + embedding_bytes / config.vocab_size as u64,
            backend: backend.kind,
            adapter: backend.adapter.clone(),
            backend_note: backend.auto_note.clone(),
            context_length: config.seq_len,
            vocab_size: config.vocab_size,
            quant_exceptions: model.quant.exceptions.clone(),
            chat_template: tokenizer
                .specials
                .chat
                .as_ref()
                .map(|c| c.name().to_string()),
        };
        Ok(Engine {
            model,
            tokenizer,
            info,
        })
    }

    /// Run a tiny prefill and decode steps so that shaders compile (and kernels autotune), and, in
    /// a browser, so that the engine's hot code is optimized, before anything is measured: up to
    /// [`WARM_UP_STEPS`] steps or [`WARM_UP_MS`], whichever comes first. Chromium first runs wasm
    /// from a quick baseline compile and swaps in optimized code for hot functions as they run.
    /// With a prefill and one step of warm-up, the first run after loading stories260K in the page
    /// (CPU, f32, 256 tokens) decoded at 2185 tok/s with an inter-token p99 of 7.1 ms and the
    /// second at 4119 and 3.6 ms; with 300 ms of warm-up the first ran at 4404 and 4.7 ms (medians
    /// of 3 page loads, interleaved, this project's 2-core machine). Returns how long the warm-up
    /// took, which is reported on its own.
    pub async fn warm_up(&self) -> Result<f64> {
        let start = Instant::now();
        let mut cache = self.model.new_cache();
        let mut sampler = Sampler::new(Sampling::default());
        let context = self.model.config.seq_len;
        let prompt = [BOS, BOS, BOS];
        let n = prompt.len().min(context - 1);
        let mut next = sampler
            .sample(self.model.forward(&prompt[..n], &mut cache, false))
            .await?;
        for step in 0..WARM_UP_STEPS {
            if step > 0 && ms_since(start) > WARM_UP_MS {
                break;
            }
            if cache.len() >= context {
                cache.truncate(0);
            }
            next = sampler
                .sample(self.model.forward(&[next], &mut cache, false))
                .await?;
        }
        Ok(ms_since(start))
    }

    /// The ceiling of a decode step of `rows` users: its matrix products alone
    /// ([`Llama::products_alone`]), one untimed pass, then timed passes until there are at least
    /// [`PRODUCTS_PASSES`] and [`PRODUCTS_MS`] have gone by (at most [`PRODUCTS_MAX_PASSES`]).
    /// `None` on a GPU. The first pass, untimed, also counts the bytes and multiply-adds.
    pub fn products_alone(&self, rows: usize) -> Option<crate::meter::Products> {
        let rows = rows.max(1);
        let (bytes, macs) = self.model.products_alone(rows)?;
        let start = Instant::now();
        let mut times = Vec::new();
        while times.len() < PRODUCTS_MAX_PASSES
            && (times.len() < PRODUCTS_PASSES || ms_since(start) < PRODUCTS_MS)
        {
            let pass = Instant::now();
            self.model.products_alone(rows);
            times.push(ms_since(pass));
        }
        crate::meter::Products::new(rows, &times, bytes, macs)
    }

    /// Tokenize the prompt and check that it fits, as a separate step for callers that want to fail
    /// early.
    /// With `chat`, a chat model's prompt is first wrapped as a user's turn ([`Engine::prompt_text`]).
    pub fn encode_prompt(&self, prompt: &str, chat: bool) -> Result<Vec<u32>> {
        if prompt.trim().is_empty() {
            return Err(Error::BadPrompt("the prompt is empty".into()));
        }
        let ids = self.tokenizer.encode(&self.prompt_text(prompt, chat))?;
        let vocab = self.model.config.vocab_size;
        if let Some(id) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::BadTokenizer(format!(
                "the tokenizer produced id {id}, outside the model's vocabulary of {vocab}"
            )));
        }
        let context = self.model.config.seq_len;
        if ids.len() >= context {
            return Err(Error::BadPrompt(format!(
                "the prompt is {} tokens but the context holds {context}, leaving no room to generate",
                ids.len()
            )));
        }
        Ok(ids)
    }

    /// The text the model is given for `prompt`: with `chat` and a model whose file names a chat
    /// template, the prompt as a user's turn followed by the start of the assistant's; otherwise
    /// the prompt as it is.
    pub fn prompt_text(&self, prompt: &str, chat: bool) -> String {
        match &self.tokenizer.specials.chat {
            Some(template) if chat => template.wrap(prompt),
            _ => prompt.to_string(),
        }
    }

    /// Generate from `prompt`, calling `on_event` for each event; `on_event` returning
    /// [`Flow::Stop`] cancels the run (reported as `Cancelled`). This is the batch-1 case of the
    /// [`Scheduler`]: one request, stepped until it ends.
    pub async fn generate(
        &self,
        prompt: &str,
        options: &GenerateOptions,
        on_event: &mut dyn FnMut(&Event) -> Flow,
    ) -> Result<StopReason> {
        let mut scheduler = Scheduler::new(1);
        let request = Request {
            prompt: prompt.to_string(),
            options: *options,
        };
        let seq = scheduler.submit(self, &request, None)?;
        loop {
            for SeqEvent { event, .. } in scheduler.step(self).await? {
                let flow = on_event(&event);
                if let Event::Done { reason, .. } = event {
                    return Ok(reason);
                }
                if flow == Flow::Stop {
                    let done = scheduler.cancel(seq).expect("a running sequence");
                    on_event(&done.event);
                    return Ok(StopReason::Cancelled);
                }
            }
        }
    }

    /// Teacher-forced next-token predictions along `ids` (one batched pass): entry `i` is the argmax
    /// after seeing `ids[..=i]`. Used to compare quantized models with f32.
    pub async fn predictions(&self, ids: &[u32]) -> Result<Vec<u32>> {
        let mut cache = self.model.new_cache();
        let n = ids.len().min(self.model.config.seq_len);
        self.model
            .forward(&ids[..n], &mut cache, true)
            .argmax()
            .await
    }
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}
