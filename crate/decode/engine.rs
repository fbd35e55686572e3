//! Generation: a loaded model plus tokenizer, run as prefill (the whole prompt in one batched pass)
//! then decode (one token at a time through the KV cache), emitting timestamped events. Many
//! requests at once go through `scheduler.rs`; `generate` is its batch-1 case.
//!
//! The API is async because a browser can only read GPU results back asynchronously; natively the
//! futures are simply blocked on.

use web_time::Instant;

use crate::backend::{Backend, Llama};
use crate::decode::events::ModelInfo;
use crate::decode::sampling::{Sampler, Sampling};
use crate::error::{Error, Result};
use crate::loading::ModelFiles;
use crate::loading::tokenizer::{BOS, ChatTemplate, Tokenizer};
use crate::model::{Logits, Quant};

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

/// The timed passes of a decode step's matrix products alone ([`Engine::products_alone`]), from
/// which the meter makes the ceiling of a load level.
#[derive(Debug, Clone)]
pub struct ProductPasses {
    pub rows: usize,
    pub times_ms: Vec<f64>,
    /// Weight bytes and multiply-adds of one pass.
    pub bytes: u64,
    pub macs: u64,
}

/// A loaded model with its tokenizer and what was loaded.
pub struct Engine {
    pub model: Llama,
    pub tokenizer: Tokenizer,
    pub info: ModelInfo,
    /// What a pass costs, learned from the passes run (every scheduler on this engine adds to
    /// it): whether prompts share a pass.
    pub pass_costs: std::sync::Mutex<crate::decode::costs::PassCosts>,
}

/// `ids`, the tokens of `prompt`, checked: a prompt with text, ids inside the vocabulary, and room
/// left in the context.
fn checked_prompt(prompt: &str, ids: Vec<u32>, vocab: usize, context: usize) -> Result<Vec<u32>> {
    if prompt.trim().is_empty() {
        return Err(Error::BadPrompt("the prompt is empty".into()));
    }
    if let Some(id) = ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(Error::BadTokenizer(format!(
            "the tokenizer produced id {id}, outside the model's vocabulary of {vocab}"
        )));
    }
    if ids.len() >= context {
        return Err(Error::BadPrompt(format!(
            "the prompt is {} but the context holds {context}, leaving no room to generate",
            crate::error::count(ids.len(), "token")
        )));
    }
    Ok(ids)
}

/// An engine's tokenizer and limits, to tokenize prompts on another thread ([`Engine::prompt_encoder`]).
#[derive(Clone)]
pub struct PromptEncoder {
    tokenizer: Tokenizer,
    vocab: usize,
    context: usize,
    /// The most bytes one token stands for.
    longest_piece: usize,
}

impl PromptEncoder {
    /// Tokenize `text` as it is (no chat template) and check it as the engine does.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let ids = self.tokenizer.encode(text)?;
        checked_prompt(text, ids, self.vocab, self.context)
    }

    /// The most bytes a prompt may have and still fit the context: every token stands for at most
    /// the longest piece's bytes, so a longer text is more tokens than the context holds, known
    /// without tokenizing it.
    pub fn max_prompt_bytes(&self) -> usize {
        self.context.saturating_mul(self.longest_piece)
    }
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
        Ok(Engine::load_twin(files, tokenizer_bytes, quant, backend, false)?.0)
    }

    /// [`load`](Self::load), and with `twin` the same model on the CPU (one thread) from the same
    /// weights, to check a GPU against (`api/auto.rs`). The host weights are copied for it, so the
    /// peak is the weights twice; drop the twin once the check is done.
    pub fn load_twin(
        files: ModelFiles,
        tokenizer_bytes: Option<&[u8]>,
        quant: Quant,
        backend: &Backend,
        twin: bool,
    ) -> Result<(Engine, Option<Engine>)> {
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
        // The file's bytes go now unless weights lie in them (F32 tensors used in place): Gemma
        // 3's 253 MB file is all blocks, copied out, and keeping it while the weights are put in
        // their kernels' form raised the peak (natively 837 MB before, measured).
        let name = files.name.clone();
        drop(files);
        let config = weights.config.clone();
        let parameters = config.parameter_count();
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
        #[cfg(feature = "gpu")]
        if backend.device.is_some() {
            crate::gpu::supports(&config)?;
        }
        let twin = twin.then(|| {
            let cpu = Backend::cpu_with(backend.isa);
            let model = Llama::new(weights.clone(), quant, None, cpu.isa, &cpu.threads);
            Engine::new(model, tokenizer.clone(), &name, quant, &cpu, parameters)
        });
        let model = Llama::new(
            weights,
            quant,
            backend.device.as_ref(),
            backend.isa,
            &backend.threads,
        );
        Ok((
            Engine::new(model, tokenizer, &name, quant, backend, parameters),
            twin,
        ))
    }

    /// `parameters`: the file's, counted before a hidden size is padded to whole blocks.
    fn new(
        model: Llama,
        tokenizer: Tokenizer,
        name: &str,
        quant: Quant,
        backend: &Backend,
        parameters: u64,
    ) -> Engine {
        let config = &model.config;
        let embedding_bytes = model.embedding_bytes();
        let info = ModelInfo {
            name: name.to_string(),
            architecture: config.recipe.name.to_string(),
            parameters,
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
            unrecognized_chat_template: tokenizer.specials.unrecognized_chat.clone(),
        };
        Engine {
            model,
            tokenizer,
            info,
            pass_costs: Default::default(),
        }
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
    pub fn products_alone(&self, rows: usize) -> Option<ProductPasses> {
        let rows = rows.max(1);
        let (bytes, macs) = self.model.products_alone(rows)?;
        let start = Instant::now();
        let mut times_ms = Vec::new();
        while times_ms.len() < PRODUCTS_MAX_PASSES
            && (times_ms.len() < PRODUCTS_PASSES || ms_since(start) < PRODUCTS_MS)
        {
            let pass = Instant::now();
            self.model.products_alone(rows);
            times_ms.push(ms_since(pass));
        }
        Some(ProductPasses {
            rows,
            times_ms,
            bytes,
            macs,
        })
    }

    /// Tokenize the prompt and check that it fits, as a separate step for callers that want to fail
    /// early.
    /// With `chat`, a chat model's prompt is first wrapped as a user's turn ([`Engine::prompt_text`]).
    pub fn encode_prompt(&self, prompt: &str, chat: bool) -> Result<Vec<u32>> {
        let ids = self.tokenizer.encode(&self.prompt_text(prompt, chat))?;
        checked_prompt(
            prompt,
            ids,
            self.model.config.vocab_size,
            self.model.config.seq_len,
        )
    }

    /// What tokenizes a prompt apart from the engine (a server's HTTP side, so that the engine's
    /// thread never waits on a long prompt): the same checks as
    /// [`encode_prompt`](Self::encode_prompt).
    pub fn prompt_encoder(&self) -> PromptEncoder {
        let tokenizer = self.tokenizer.clone();
        let longest = (0..tokenizer.vocab_size() as u32)
            .map(|id| tokenizer.piece_bytes(id).len())
            .max()
            .unwrap_or(1)
            .max(1);
        PromptEncoder {
            tokenizer,
            vocab: self.model.config.vocab_size,
            context: self.model.config.seq_len,
            longest_piece: longest,
        }
    }

    /// Serve at most `positions` of the model's context (`serve --ctx`): every request's prompt
    /// and answer together, and so the KV cache each may reserve; the conditions say it.
    pub fn limit_context(&mut self, positions: usize) -> Result<()> {
        let most = self.model.config.seq_len;
        if !(8..=most).contains(&positions) {
            return Err(Error::Unsupported(format!(
                "--ctx {positions}: the context served is 8 to this model's own, {most} positions"
            )));
        }
        self.model.config.seq_len = positions;
        self.info.context_length = positions;
        Ok(())
    }

    /// Wrap chat prompts in `template` (`--chat-template`) instead of the file's own or none; the
    /// vocabulary must hold its markers.
    pub fn follow_chat(&mut self, template: ChatTemplate) -> Result<()> {
        let name = template.name().to_string();
        self.tokenizer.follow_chat(template)?;
        self.info.chat_template = Some(name);
        self.info.unrecognized_chat_template = None;
        Ok(())
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

    /// Teacher-forced next-token predictions along `ids` (one batched pass): entry `i` is the argmax
    /// after seeing `ids[..=i]`. Used to compare quantized models with f32.
    pub async fn predictions(&self, ids: &[u32]) -> Result<Vec<u32>> {
        self.teacher_forced(ids, 0).argmax().await
    }

    /// Teacher-forced logits along `ids` from position `from` on: `[ids.len() - from, vocab]`, row
    /// `i` after seeing `ids[..=from + i]`. Used to compare with another engine's choices and see
    /// by how much they differ where they do.
    pub async fn logits_along(&self, ids: &[u32], from: usize) -> Result<Vec<f32>> {
        self.teacher_forced(ids, from).into_vec().await
    }

    /// The logits of positions `from..` along `ids` (as many as the context holds), from a fresh
    /// cache; the positions before `from` run as a prefill whose logits are not kept (a 1,000-token
    /// prompt's would be a gigabyte with Gemma's vocabulary).
    fn teacher_forced(&self, ids: &[u32], from: usize) -> Logits {
        let mut cache = self.model.new_cache();
        let n = ids.len().min(self.model.config.seq_len);
        let from = from.min(n.saturating_sub(1));
        if from > 0 {
            self.model.forward(&ids[..from], &mut cache, false);
        }
        self.model.forward(&ids[from..n], &mut cache, true)
    }
}

pub(crate) fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}
