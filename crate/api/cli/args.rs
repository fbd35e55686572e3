//! The command line's arguments, as clap reads them: every command and its options, with the
//! checks a value gets before any work starts.

use std::path::PathBuf;

use crate::backend::BackendChoice;
use crate::cpu::Isa;
use crate::decode::speculate::{DEFAULT_MAX_DRAFT, DEFAULT_NGRAM};
use crate::decode::{Arrival, DEFAULT_MAX_TOKENS};
use crate::error::Error;
use crate::loading::synth::Shape;
use crate::loading::tokenizer::ChatTemplate;
use crate::meter::{DEFAULT_READING_WPM, Slo};
use crate::model::Quant;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tokenometer",
    version,
    about = "Run a small Llama model and measure what tokens per second means"
)]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(clap::Args)]
pub(super) struct ModelArgs {
    /// llama2.c .bin, a GGUF (its tokenizer inside), a .safetensors with config.json beside it, or
    /// a Hugging Face model folder.
    #[arg(long)]
    pub(super) model: Option<PathBuf>,
    /// tokenizer.json or llama2.c tokenizer.bin; found beside the model when left out. With
    /// --endpoint, the served model's tokenizer (or its GGUF), to count tokens where the server
    /// gives no counts.
    #[arg(long)]
    pub(super) tokenizer: Option<PathBuf>,
    /// stored (each tensor as the file stores it: a GGUF's blocks run exactly, f32 stays f32),
    /// or re-encode at load: f32, q8 (Q8_0) or q4 (Q4_0).
    #[arg(long, default_value = "stored", value_parser = parse::<Quant>)]
    pub(super) quant: Quant,
    /// cpu, wgpu (the GPU), or auto: where a hardware GPU is granted, the GPU checked against the
    /// CPU and both timed on a short decode, the faster kept (the verdict is remembered per
    /// adapter, model and quantization in the user's cache folder).
    #[arg(long, default_value = "cpu", value_parser = parse::<BackendChoice>)]
    pub(super) backend: BackendChoice,
    /// With --backend auto: race again, even on a software adapter, instead of using a verdict
    /// remembered from an earlier race.
    #[arg(long)]
    pub(super) race: bool,
    /// With --backend wgpu: skip the GPU's check against the CPU at load (the conditions say it
    /// was not checked).
    #[arg(long)]
    pub(super) no_check: bool,
    /// The CPU backend's instruction set, to compare them: scalar, avx2, vnni (the best this CPU
    /// runs when left out).
    #[arg(long, value_parser = Isa::by_name)]
    pub(super) cpu_kernels: Option<Isa>,
    /// The CPU backend's threads: each matrix product is split by rows, attention by heads, with
    /// the same results as one thread (this machine's physical cores when left out).
    #[arg(long)]
    pub(super) threads: Option<usize>,
    /// Wrap chat prompts in this template, in place of the model file's own (or where tokenometer
    /// does not follow the file's, or it has none): chatml, gemma or llama3. Its markers must be
    /// tokens of the model's vocabulary.
    #[arg(long, value_parser = chat_template)]
    pub(super) chat_template: Option<ChatTemplate>,
}

fn chat_template(name: &str) -> Result<ChatTemplate, String> {
    ChatTemplate::by_name(name).ok_or_else(|| {
        format!(
            "{:?} is not a chat template tokenometer follows: use {}",
            crate::error::clip(name),
            ChatTemplate::CHOICES
        )
    })
}

/// An OpenAI-compatible server to meter instead of a local model, for `generate` and `bench`.
#[derive(clap::Args)]
pub(super) struct EndpointArgs {
    /// Meter an OpenAI-compatible server (llama.cpp's, vLLM, Ollama, a hosted API, tokenometer
    /// serve) instead of a local model: the API's base URL, e.g. http://127.0.0.1:8080/v1.
    #[arg(long, conflicts_with = "model")]
    pub(super) endpoint: Option<String>,
    /// The model to ask the endpoint for (default: the first its /v1/models lists).
    #[arg(long, requires = "endpoint")]
    pub(super) endpoint_model: Option<String>,
    /// The environment variable that holds the endpoint's API key (sent as a bearer token;
    /// never printed, never in JSON).
    #[arg(long, requires = "endpoint")]
    pub(super) api_key_env: Option<String>,
    /// Seconds to wait for the endpoint's next bytes (keep-alive comments aside) before calling
    /// its stream stalled.
    #[arg(long, default_value_t = 60.0, value_parser = positive_seconds)]
    pub(super) endpoint_timeout: f64,
    /// Seconds a whole request to the endpoint may take before it counts as failed.
    #[arg(long, default_value_t = 600.0, value_parser = positive_seconds)]
    pub(super) request_timeout: f64,
}

/// Speculative decoding, for `generate` and `bench`.
#[derive(clap::Args)]
pub(super) struct SpeculateArgs {
    /// Speculative decoding: `lookup` (drafts from n-grams of the prompt and the output) or
    /// `draft:PATH[:QUANT]` (a smaller or lower-precision model with the same vocabulary drafts;
    /// QUANT as --quant, default stored). The model verifies the drafts in one pass: greedy output
    /// is plain decoding's, token for token.
    #[arg(long)]
    pub(super) speculate: Option<String>,
    /// The longest draft verified in one pass (1 to 64). Each step drafts as many as the run's
    /// measured step times and share of kept drafts favour, up to this.
    #[arg(long, default_value_t = DEFAULT_MAX_DRAFT, requires = "speculate")]
    pub(super) draft_max: usize,
    /// Draft --draft-max tokens whenever the drafter has them, instead of the length the measured
    /// costs favour (to see what drafting every step costs).
    #[arg(long, requires = "speculate")]
    pub(super) draft_fixed: bool,
    /// `lookup`: the longest n-gram matched (1 to 16; shorter ones are tried after it).
    #[arg(long, default_value_t = DEFAULT_NGRAM, requires = "speculate")]
    pub(super) ngram: usize,
}

#[derive(Subcommand)]
pub(super) enum Command {
    /// Stream generated text to stdout, then print the meter's report.
    Generate {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, required_unless_present = "prompts", conflicts_with = "prompts")]
        prompt: Option<String>,
        /// A file of prompts, one a line: every line is its own sequence, all in one batch.
        #[arg(long)]
        prompts: Option<PathBuf>,
        /// With --prompts: the most prompt tokens a step reads, over all the prompts in it (1 to
        /// 65536); a burst of short prompts is read in one pass, a prompt past the budget in parts.
        #[arg(long, default_value_t = crate::decode::STEP_TOKENS as u32, requires = "prompts",
              value_parser = clap::value_parser!(u32).range(1..=65536))]
        step_tokens: u32,
        #[arg(long, default_value_t = DEFAULT_MAX_TOKENS)]
        max_tokens: usize,
        /// 0 is greedy.
        #[arg(long, default_value_t = 0.0, value_parser = finite_f32)]
        temperature: f32,
        #[arg(long, default_value_t = 0.9, value_parser = finite_f32)]
        top_p: f32,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Reading speed for "x reading speed", words per minute.
        #[arg(long, default_value_t = DEFAULT_READING_WPM, value_parser = reading_wpm)]
        reading_wpm: f64,
        /// Print one JSON object per event instead of text.
        #[arg(long)]
        json: bool,
        /// Each generated token's log probability and its N likeliest alternatives (0 to 20):
        /// a table after the text, or `logprobs` on each token event with --json.
        #[arg(long, value_parser = clap::value_parser!(u32).range(0..=20), conflicts_with = "prompts")]
        logprobs: Option<u32>,
        /// Measure a cold start: no warm-up run before the measured one.
        #[arg(long)]
        no_warmup: bool,
        /// Give a chat model the prompt as it is, not wrapped in its chat template.
        #[arg(long)]
        raw: bool,
        #[command(flatten)]
        speculate: SpeculateArgs,
        #[command(flatten)]
        endpoint: EndpointArgs,
    },
    /// Write a checkpoint with seeded random weights and a real model's shape: llama2.c .bin, or a
    /// GGUF (when --out ends in .gguf) carrying the tokenizer of --vocab.
    Synth {
        /// stories15M, stories42M, stories110M, smollm2-135M, smollm2-360M, tinyllama-1.1B,
        /// qwen2.5-0.5B, qwen3-0.6B or llama3.2-1B.
        #[arg(long, value_parser = parse::<Shape>)]
        shape: Shape,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Fewer layers than the shape has (same width and vocabulary), for a quick try.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        layers: Option<u32>,
        /// A GGUF whose tokenizer (its tokenizer.* metadata) the written GGUF carries; its
        /// vocabulary must be the shape's size.
        #[arg(long)]
        vocab: Option<PathBuf>,
        /// Write the GGUF's matrices as Q8_0 blocks (f32 otherwise).
        #[arg(long)]
        q8: bool,
    },
    /// Re-encode a llama GGUF: every matrix widened and written as F32, Q8_0 or Q4_0 blocks, its
    /// tokenizer kept (to run llama.cpp and tokenometer on the same file).
    Convert {
        #[arg(long)]
        model: PathBuf,
        /// f32, q8 (Q8_0) or q4 (Q4_0).
        #[arg(long, value_parser = parse::<Quant>)]
        to: Quant,
        #[arg(long)]
        out: PathBuf,
    },
    /// Score a continuation teacher-forced: per position our choice and the log-probabilities of the
    /// given id and of ours, after the prompt ids as they are (no template, no BOS added).
    Score {
        #[command(flatten)]
        model: ModelArgs,
        /// The prompt's token ids, separated by spaces or commas.
        #[arg(long)]
        prompt_ids: String,
        /// The continuation's token ids to score, separated by spaces or commas.
        #[arg(long)]
        ids: String,
        /// One JSON object a position (JSON lines) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Perplexity of a text file as llama.cpp's llama-perplexity defines it: windows of --ctx
    /// tokens, each starting from BOS, the second half of each scored.
    Perplexity {
        #[command(flatten)]
        model: ModelArgs,
        /// The text file (UTF-8), at least twice --ctx tokens long.
        #[arg(long)]
        file: PathBuf,
        /// Tokens a window (llama-perplexity's -c).
        #[arg(long, default_value_t = 512)]
        ctx: usize,
        /// One JSON object instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Serve the model over OpenAI's HTTP API (chat and text completions, streamed), every user in
    /// one continuously batched decode, and the page beside it for a room's phones.
    Serve {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        serve: ServeArgs,
    },
    /// Run greedy generation several times after a warm-up and print median, min and max; with
    /// --concurrency, a load test: one row per number of simultaneous users.
    Bench {
        #[command(flatten)]
        model: ModelArgs,
        /// Timed runs, 1 to 10000.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=MAX_RUNS), conflicts_with = "concurrency")]
        runs: u32,
        #[arg(
            long,
            default_value = "Once upon a time",
            conflicts_with = "concurrency"
        )]
        prompt: String,
        #[arg(long, default_value_t = 128)]
        max_tokens: usize,
        /// Numbers of simultaneous users, e.g. 1,2,4,8,16: each level is one batch of that many
        /// users (greedy, each its own prompt).
        #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=MAX_USERS))]
        concurrency: Option<Vec<u32>>,
        /// How the users' requests arrive: burst (all at once), poisson:RATE (a second) or
        /// gamma:RATE:SHAPE (SHAPE below 1 burstier than Poisson, above 1 more even).
        #[arg(long, default_value = "burst", value_parser = parse::<Arrival>, requires = "concurrency")]
        arrival: Arrival,
        /// Service-level objectives in ms, any of ttft, tpot and e2e (ttft=500,tpot=50): each
        /// level reports goodput, the requests a second that met them all.
        #[arg(long, value_parser = parse::<Slo>, requires = "concurrency")]
        slo: Option<Slo>,
        /// With --endpoint: each user sends its next request when its last ends, for this many
        /// seconds a level (instead of one request a user).
        #[arg(long, value_parser = positive_seconds, requires_all = ["concurrency", "endpoint"])]
        duration: Option<f64>,
        /// Send the prompt as it is (to an endpoint's /v1/completions), not as a user's turn in
        /// the model's chat template.
        #[arg(long)]
        raw: bool,
        /// With --endpoint: ask the server to go on past end-of-text, so every request generates
        /// --max-tokens (vLLM, llama.cpp and tokenometer serve take it).
        #[arg(long, requires = "endpoint")]
        ignore_eos: bool,
        /// The most sequences one step decodes (default: as many as there are users); the rest wait.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_USERS), requires = "concurrency")]
        max_batch: Option<u32>,
        /// The most prompt tokens a step reads, over all the prompts in it (1 to 65536).
        #[arg(long, default_value_t = crate::decode::STEP_TOKENS as u32,
              value_parser = clap::value_parser!(u32).range(1..=65536))]
        step_tokens: u32,
        /// A file of prompts, one a line, given to the users in turn (default: built-in stories).
        #[arg(long, requires = "concurrency")]
        prompts: Option<PathBuf>,
        /// Print the results as JSON: an array of one object per level (or per run).
        #[arg(long)]
        json: bool,
        /// Time each decode step by phase with the CPU engine's own timers (projections,
        /// attention, norms, classifier, sampling) and print where a token's time goes.
        #[arg(long, conflicts_with_all = ["concurrency", "speculate", "endpoint"])]
        profile: bool,
        #[command(flatten)]
        speculate: SpeculateArgs,
        #[command(flatten)]
        endpoint: EndpointArgs,
    },
}

/// `tokenometer serve`'s own options (docs/serve.md).
#[derive(clap::Args)]
pub(super) struct ServeArgs {
    /// The address to listen on: 127.0.0.1 lets only this machine in; 0.0.0.0 opens it to the
    /// network (a room's phones).
    #[arg(long, default_value = "127.0.0.1")]
    pub(super) host: String,
    /// The port (0: any free one, printed at start).
    #[arg(long, default_value_t = 8000)]
    pub(super) port: u16,
    /// The most requests decoded together in one batch (1 to 256); the rest wait.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=MAX_USERS))]
    pub(super) parallel: u32,
    /// The most requests waiting for a place (0 to 4096); past it the answer is 429.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=4096))]
    pub(super) queue: u32,
    /// The most prompt tokens a step reads while other requests decode in it (1 to 65536): a
    /// longer prompt is read over several steps, so the others' tokens keep coming.
    #[arg(long, default_value_t = crate::decode::PREFILL_CHUNK as u32,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub(super) prefill_chunk: u32,
    /// The most prompt tokens a step reads, over all the prompts joining in it (1 to 65536): a
    /// burst of short prompts is read in one pass, the prompt that does not fit cut.
    #[arg(long, default_value_t = crate::decode::STEP_TOKENS as u32,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub(super) step_tokens: u32,
    /// The most memory the running requests' KV caches hold together, e.g. 64MB or 2GB (default:
    /// a quarter of this machine's memory, printed at start): a request waits until its prompt
    /// and max_tokens fit, and one that never could is refused.
    #[arg(long, value_parser = parse_bytes)]
    pub(super) kv_memory: Option<u64>,
    /// The context served: the most positions one request may use, prompt and answer together
    /// (8 to the model's own; default: the model's), and so the most KV cache each reserves.
    #[arg(long)]
    pub(super) ctx: Option<usize>,
    /// The most memory the request bodies being read hold together, e.g. 64MB (each body at
    /// most 4 MiB): a request whose body does not fit beside the others' gets 503 at once.
    #[arg(long, default_value = "64MB", value_parser = parse_bytes)]
    pub(super) body_memory: u64,
    /// Seconds a streaming client may leave its events unread (its connection full) before its
    /// request ends and frees its place and its cache.
    #[arg(long, default_value_t = 30.0, value_parser = positive_seconds)]
    pub(super) write_timeout: f64,
    /// `lookup`: a request that runs alone drafts from its prompt and verifies in one pass.
    #[arg(long)]
    pub(super) speculate: Option<String>,
    /// Origins allowed to call the API from pages served elsewhere: a comma-separated list, or *.
    #[arg(long)]
    pub(super) cors: Option<String>,
    /// The page: a checkout whose www/ and pkg/ are the page (default: the one this binary was
    /// built in), or the folder `make site` writes (site/).
    #[arg(long)]
    pub(super) page: Option<PathBuf>,
    /// Stop after this many seconds (for tests and timed demonstrations).
    #[arg(long, hide = true, value_parser = positive_seconds)]
    pub(super) exit_after: Option<f64>,
    /// Seconds a client may take to send its headers.
    #[arg(long, hide = true, value_parser = positive_seconds)]
    pub(super) header_timeout: Option<f64>,
    /// Seconds a client may take to send its body.
    #[arg(long, hide = true, value_parser = positive_seconds)]
    pub(super) body_timeout: Option<f64>,
}

/// The most timed runs `bench` takes (each one's report is kept until the summary).
pub(super) const MAX_RUNS: i64 = 10_000;
/// The most users a load test or batch simulates (each holds its own KV cache).
pub(super) const MAX_USERS: i64 = 256;

pub(super) fn parse<T: std::str::FromStr<Err = Error>>(s: &str) -> Result<T, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

/// An f32 that stays finite: `1e308` is a valid f64 but becomes infinity in f32.
pub(super) fn finite_f32(s: &str) -> Result<f32, String> {
    let v: f32 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !v.is_finite() {
        return Err(format!(
            "{s} is not a finite number (f32 holds up to about 3.4e38)"
        ));
    }
    Ok(v)
}

/// A duration in seconds: positive and finite.
pub(super) fn positive_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !(v.is_finite() && v > 0.0 && v < 1e9) {
        return Err(format!("{s} seconds: give a positive duration"));
    }
    Ok(v)
}

/// A reading speed in words per minute: positive and finite.
pub(super) fn reading_wpm(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!(
            "{s} words per minute: give a positive reading speed"
        ));
    }
    Ok(v)
}

/// A size in bytes: a number with KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (of 1024),
/// or B or nothing for bytes; at least 1 MB, at most 1 PB.
pub(super) fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let v: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a size; give e.g. 64MB or 2GB"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "tb" | "t" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "{other:?} is not a unit of size; use KB, MB, GB or KiB, MiB, GiB"
            ));
        }
    };
    let bytes = v * scale;
    if !(1e6..=1e15).contains(&bytes) {
        return Err(format!("{s}: give a size from 1MB to 1PB"));
    }
    Ok(bytes as u64)
}
