//! The native command line (`tokenometer generate | synth | bench`), shared by the binary.
//! Bad input ends with a one-line error on stderr and exit code 2.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

mod runs;
mod synth;

use crate::backend::{Backend, BackendChoice, BackendKind};
use crate::cpu::{Isa, Threads};
use crate::decode::speculate::{DEFAULT_MAX_DRAFT, DEFAULT_NGRAM};
use crate::decode::{
    Arrival, DEFAULT_MAX_TOKENS, DEFAULT_PROMPTS, Engine, GenerateOptions, Sampling, Speculation,
};
use crate::error::Error;
use crate::loading::synth::Shape;
use crate::loading::{ModelFiles, ModelFormat};
use crate::meter::DEFAULT_READING_WPM;
use crate::model::Quant;
use clap::{Parser, Subcommand};
use runs::{Load, Output, bench, bench_concurrency, generate, generate_batch, load_table, table};
use synth::synth;

#[derive(Parser)]
#[command(
    name = "tokenometer",
    version,
    about = "Run a small Llama model and measure what tokens per second means"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct ModelArgs {
    /// llama2.c .bin, a GGUF (its tokenizer inside), a .safetensors with config.json beside it, or
    /// a Hugging Face model folder.
    #[arg(long)]
    model: PathBuf,
    /// tokenizer.json or llama2.c tokenizer.bin; found beside the model when left out.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// stored (each tensor as the file stores it: a GGUF's blocks run exactly, f32 stays f32),
    /// or re-encode at load: f32, q8 (Q8_0) or q4 (Q4_0).
    #[arg(long, default_value = "stored", value_parser = parse::<Quant>)]
    quant: Quant,
    #[arg(long, default_value = "cpu", value_parser = parse::<BackendChoice>)]
    backend: BackendChoice,
    /// The CPU backend's instruction set, to compare them: scalar, avx2, vnni (the best this CPU
    /// runs when left out).
    #[arg(long, value_parser = Isa::by_name)]
    cpu_kernels: Option<Isa>,
    /// The CPU backend's threads: each matrix product is split by rows, attention by heads, with
    /// the same results as one thread (this machine's physical cores when left out).
    #[arg(long)]
    threads: Option<usize>,
}

/// Speculative decoding, for `generate` and `bench`.
#[derive(clap::Args)]
struct SpeculateArgs {
    /// Speculative decoding: `lookup` (drafts from n-grams of the prompt and the output) or
    /// `draft:PATH[:QUANT]` (a smaller or lower-precision model with the same vocabulary drafts;
    /// QUANT as --quant, default stored). The model verifies the drafts in one pass: greedy output
    /// is plain decoding's, token for token.
    #[arg(long)]
    speculate: Option<String>,
    /// The longest draft verified in one pass (1 to 64). Each step drafts as many as the run's
    /// measured step times and share of kept drafts favour, up to this.
    #[arg(long, default_value_t = DEFAULT_MAX_DRAFT, requires = "speculate")]
    draft_max: usize,
    /// Draft --draft-max tokens whenever the drafter has them, instead of the length the measured
    /// costs favour (to see what drafting every step costs).
    #[arg(long, requires = "speculate")]
    draft_fixed: bool,
    /// `lookup`: the longest n-gram matched (1 to 16; shorter ones are tried after it).
    #[arg(long, default_value_t = DEFAULT_NGRAM, requires = "speculate")]
    ngram: usize,
}

#[derive(Subcommand)]
enum Command {
    /// Stream generated text to stdout, then print the meter's report.
    Generate {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, required_unless_present = "prompts", conflicts_with = "prompts")]
        prompt: Option<String>,
        /// A file of prompts, one a line: every line is its own sequence, all in one batch.
        #[arg(long)]
        prompts: Option<PathBuf>,
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
        /// Measure a cold start: no warm-up run before the measured one.
        #[arg(long)]
        no_warmup: bool,
        /// Give a chat model the prompt as it is, not wrapped in its chat template.
        #[arg(long)]
        raw: bool,
        #[command(flatten)]
        speculate: SpeculateArgs,
    },
    /// Write a checkpoint with seeded random weights and a real model's shape: llama2.c .bin, or a
    /// GGUF (when --out ends in .gguf) carrying the tokenizer of --vocab.
    Synth {
        /// stories15M, stories42M, stories110M, smollm2-135M, smollm2-360M or tinyllama-1.1B.
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
        /// How the users' requests arrive: burst (all at once) or poisson:RATE (a second).
        #[arg(long, default_value = "burst", value_parser = parse::<Arrival>, requires = "concurrency")]
        arrival: Arrival,
        /// The most sequences one step decodes (default: as many as there are users); the rest wait.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_USERS), requires = "concurrency")]
        max_batch: Option<u32>,
        /// A file of prompts, one a line, given to the users in turn (default: built-in stories).
        #[arg(long, requires = "concurrency")]
        prompts: Option<PathBuf>,
        /// Print the results as JSON: an array of one object per level (or per run).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        speculate: SpeculateArgs,
    },
}

/// `tokenometer serve`'s own options (docs/serve.md).
#[derive(clap::Args)]
struct ServeArgs {
    /// The address to listen on: 127.0.0.1 lets only this machine in; 0.0.0.0 opens it to the
    /// network (a room's phones).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The port (0: any free one, printed at start).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// The most requests decoded together in one batch (1 to 256); the rest wait.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=MAX_USERS))]
    parallel: u32,
    /// The most requests waiting for a place (0 to 4096); past it the answer is 429.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=4096))]
    queue: u32,
    /// `lookup`: a request that runs alone drafts from its prompt and verifies in one pass.
    #[arg(long)]
    speculate: Option<String>,
    /// Origins allowed to call the API from pages served elsewhere: a comma-separated list, or *.
    #[arg(long)]
    cors: Option<String>,
    /// The checkout whose www/ and pkg/ are the page (default: the one this binary was built in).
    #[arg(long)]
    page: Option<PathBuf>,
    /// Stop after this many seconds (for tests and timed demonstrations).
    #[arg(long, hide = true, value_parser = positive_seconds)]
    exit_after: Option<f64>,
    /// Seconds a client may take to send its headers.
    #[arg(long, hide = true, value_parser = positive_seconds)]
    header_timeout: Option<f64>,
    /// Seconds a client may take to send its body.
    #[arg(long, hide = true, value_parser = positive_seconds)]
    body_timeout: Option<f64>,
}

/// The most timed runs `bench` takes (each one's report is kept until the summary).
const MAX_RUNS: i64 = 10_000;
/// The most users a load test or batch simulates (each holds its own KV cache).
const MAX_USERS: i64 = 256;

fn parse<T: std::str::FromStr<Err = Error>>(s: &str) -> Result<T, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

/// An f32 that stays finite: `1e308` is a valid f64 but becomes infinity in f32.
fn finite_f32(s: &str) -> Result<f32, String> {
    let v: f32 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !v.is_finite() {
        return Err(format!(
            "{s} is not a finite number (f32 holds up to about 3.4e38)"
        ));
    }
    Ok(v)
}

/// A duration in seconds: positive and finite.
fn positive_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !(v.is_finite() && v > 0.0 && v < 1e9) {
        return Err(format!("{s} seconds: give a positive duration"));
    }
    Ok(v)
}

/// A reading speed in words per minute: positive and finite.
fn reading_wpm(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!(
            "{s} words per minute: give a positive reading speed"
        ));
    }
    Ok(v)
}

/// Parse the arguments, run, and turn any error into one line and exit code 2.
pub fn main() -> ExitCode {
    crate::error::quiet_contained_panics();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // clap answers a bare `tokenometer` with the description; that is a usage error.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprintln!(
                "tokenometer: no command given; use generate, bench, serve or synth (--help explains them)"
            );
            return ExitCode::from(2);
        }
        Err(e) if e.use_stderr() => {
            // clap's usage block is helpful but long; bad input gets one line: the error's first
            // paragraph (which names a missing argument on its second line), joined.
            let message = e.to_string();
            let first: Vec<&str> = message
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!(
                "tokenometer: {}",
                first.join(" ").trim_start_matches("error: ")
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    match pollster::block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tokenometer: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(command: Command) -> Result<(), Error> {
    match command {
        Command::Generate {
            model,
            prompt,
            prompts,
            max_tokens,
            temperature,
            top_p,
            seed,
            reading_wpm,
            json,
            no_warmup,
            raw,
            speculate,
        } => {
            let sampling = Sampling {
                temperature,
                top_p,
                seed,
            };
            sampling.validate()?;
            let engine = load(&model).await?;
            let speculation = speculation(&speculate, &model, &engine).await?;
            if speculation.is_some() && prompts.is_some() {
                return Err(Error::Unsupported(
                    "--speculate runs one prompt at a time: give --prompt, not --prompts".into(),
                ));
            }
            let warm_up_ms = if no_warmup {
                None
            } else {
                Some(engine.warm_up().await?)
            };
            let options = GenerateOptions {
                max_tokens,
                sampling,
                queued_ms: 0.0,
                chat: !raw,
            };
            if let Some(path) = prompts {
                let prompts = read_prompts(&path)?;
                let output = if json { Output::Json } else { Output::Text };
                let report =
                    generate_batch(&engine, &prompts, &options, reading_wpm, warm_up_ms, output)
                        .await?;
                if !json {
                    eprintln!("\n{}", load_table(&report));
                }
                return Ok(());
            }
            let prompt = prompt.expect("clap requires --prompt or --prompts");
            let report = generate(
                &engine,
                &prompt,
                &options,
                speculation.as_ref(),
                reading_wpm,
                warm_up_ms,
                if json { Output::Json } else { Output::Text },
            )
            .await?;
            if !json {
                eprintln!("\n{}", table(&report));
            }
            Ok(())
        }
        Command::Synth {
            shape,
            out,
            seed,
            layers,
            vocab,
            q8,
        } => synth(shape, &out, seed, layers, vocab.as_deref(), q8),
        Command::Convert { model, to, out } => synth::convert(&model, to, &out),
        Command::Serve { model, serve } => serve_model(model, serve),
        Command::Bench {
            model,
            max_tokens,
            concurrency: Some(levels),
            arrival,
            max_batch,
            prompts,
            json,
            speculate,
            ..
        } => {
            if speculate.speculate.is_some() {
                return Err(Error::Unsupported(
                    "--speculate measures one user; drop --concurrency (the lab's batches decode \
                     one token a step)"
                        .into(),
                ));
            }
            let prompts = match prompts {
                Some(path) => read_prompts(&path)?,
                None => DEFAULT_PROMPTS.iter().map(|p| p.to_string()).collect(),
            };
            let load_spec = Load {
                levels: levels.iter().map(|&n| n as usize).collect(),
                arrival,
                max_batch: max_batch.map(|n| n as usize),
                prompts,
                max_tokens,
                slo: None,
            };
            bench_concurrency(&load(&model).await?, &load_spec, json).await
        }
        Command::Bench {
            model,
            runs,
            prompt,
            max_tokens,
            json,
            speculate,
            ..
        } => {
            let engine = load(&model).await?;
            let speculation = speculation(&speculate, &model, &engine).await?;
            let runs = runs as usize;
            bench(
                &engine,
                runs,
                &prompt,
                max_tokens,
                speculation.as_ref(),
                json,
            )
            .await
        }
    }
}

async fn load(args: &ModelArgs) -> Result<Engine, Error> {
    let files = ModelFiles::from_path(&args.model)?;
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))
    };
    // A GGUF carries its tokenizer; other formats find theirs beside the model.
    let tokenizer = match &args.tokenizer {
        Some(path) => Some(read(path)?),
        None if matches!(files.format, ModelFormat::Gguf(_)) => None,
        None => Some(read(&find_tokenizer(&args.model)?)?),
    };
    let backend = match (args.cpu_kernels, args.backend) {
        (None, choice) => Backend::init(choice).await?,
        (Some(isa), BackendChoice::Cpu) => Backend::cpu_with(isa),
        (Some(_), _) => {
            return Err(Error::Unsupported(
                "--cpu-kernels chooses the CPU backend's instruction set: it needs --backend cpu"
                    .into(),
            ));
        }
    };
    let backend = match backend.kind {
        BackendKind::Cpu => {
            let count = args.threads.unwrap_or_else(Threads::physical_cores);
            backend.with_threads(Threads::new(count).map_err(Error::Unsupported)?)
        }
        BackendKind::Wgpu => backend,
    };
    Engine::load(files, tokenizer.as_deref(), args.quant, &backend)
}

/// `tokenometer serve`: the engine is loaded on its own thread, the page found beside the sources.
fn serve_model(model: ModelArgs, args: ServeArgs) -> Result<(), Error> {
    let speculation = match args.speculate.as_deref() {
        None => None,
        Some("lookup") => Some(Speculation::lookup()),
        Some(other) => {
            return Err(Error::Unsupported(format!(
                "serve --speculate {other:?}: serve speculates with lookup only"
            )));
        }
    };
    let checkout = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let page = args
        .page
        .or_else(|| Some(checkout.clone()))
        .filter(|root| root.join("www").join("index.html").is_file());
    let models = page
        .clone()
        .unwrap_or(checkout)
        .join(std::env::var_os("MODELS").map_or_else(|| PathBuf::from("models"), PathBuf::from));
    let options = crate::api::serve::ServeOptions {
        host: args.host,
        port: args.port,
        limits: crate::api::serve::Limits {
            parallel: args.parallel as usize,
            queue: args.queue as usize,
            speculation,
        },
        cors: args.cors,
        page,
        models,
        exit_after: args.exit_after.map(Duration::from_secs_f64),
        header_timeout: args
            .header_timeout
            .map_or(crate::api::serve::HEADER_TIMEOUT, Duration::from_secs_f64),
        body_timeout: args
            .body_timeout
            .map_or(crate::api::serve::BODY_TIMEOUT, Duration::from_secs_f64),
    };
    crate::api::serve::serve(move || pollster::block_on(load(&model)), options)
}

/// What `--speculate` asks for: `lookup`, or `draft:PATH[:QUANT]` loaded on the model's backend.
async fn speculation(
    args: &SpeculateArgs,
    model: &ModelArgs,
    engine: &Engine,
) -> Result<Option<Speculation>, Error> {
    let Some(spec) = &args.speculate else {
        return Ok(None);
    };
    let mut speculation = if spec == "lookup" {
        Speculation::lookup()
    } else if let Some(draft) = spec.strip_prefix("draft:") {
        // A trailing `:QUANT` when it names one (a path may hold colons too).
        let (path, quant) = match draft.rsplit_once(':') {
            Some((path, quant)) if quant.parse::<Quant>().is_ok() => (path, quant.parse()?),
            _ => (draft, Quant::Stored),
        };
        if path.is_empty() {
            return Err(Error::Unsupported(
                "--speculate draft: needs the draft model's path, e.g. draft:small.gguf:q4".into(),
            ));
        }
        let args = ModelArgs {
            model: PathBuf::from(path),
            tokenizer: None,
            quant,
            backend: model.backend,
            cpu_kernels: model.cpu_kernels,
            threads: model.threads,
        };
        let draft = load(&args).await?;
        let name = format!("{} {quant}", draft.info.name);
        Speculation::draft_model(engine, draft, name)?
    } else {
        return Err(Error::Unsupported(format!(
            "--speculate {spec:?}: use lookup or draft:PATH[:QUANT]"
        )));
    };
    speculation.max_draft = args.draft_max;
    speculation.fixed = args.draft_fixed;
    speculation.ngram = args.ngram;
    speculation.validate()?;
    Ok(Some(speculation))
}

/// `tokenizer.json`, `tokenizer.bin` or `tok*.bin` in the model's folder.
fn find_tokenizer(model: &Path) -> Result<PathBuf, Error> {
    let folder = if model.is_dir() {
        model
    } else {
        model.parent().unwrap_or(Path::new("."))
    };
    let folder = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    for name in ["tokenizer.json", "tokenizer.bin"] {
        if folder.join(name).is_file() {
            return Ok(folder.join(name));
        }
    }
    let entries =
        std::fs::read_dir(folder).map_err(|e| Error::Io(format!("{}: {e}", folder.display())))?;
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name().is_some_and(|n| {
                n.to_string_lossy().starts_with("tok") && n.to_string_lossy().ends_with(".bin")
            })
        })
        .ok_or_else(|| {
            Error::BadTokenizer(format!(
                "no tokenizer beside {}; pass --tokenizer FILE",
                model.display()
            ))
        })
}

/// The non-blank lines of a prompts file, in order.
fn read_prompts(path: &Path) -> Result<Vec<String>, Error> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    let prompts: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    if prompts.is_empty() {
        return Err(Error::BadPrompt(format!(
            "{} has no prompts; write one prompt a line",
            path.display()
        )));
    }
    if prompts.len() > MAX_USERS as usize {
        return Err(Error::BadPrompt(format!(
            "{} has {} prompts; one batch takes at most {MAX_USERS}",
            path.display(),
            prompts.len()
        )));
    }
    Ok(prompts)
}
