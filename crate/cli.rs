//! The native command line (`tokenometer generate | synth | bench`), shared by the binary.
//! Bad input ends with a one-line error on stderr and exit code 2.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::engine::DEFAULT_MAX_TOKENS;
use crate::kernels::Isa;
use crate::loading::ModelFormat;
use crate::meter::{
    BatchMeter, Conditions, DEFAULT_READING_WPM, LoadConditions, LoadReport, Meter, Report,
    human_bytes,
};
use crate::scheduler::{Arrival, DEFAULT_PROMPTS, Request, Scheduler};
use crate::sequence::SeqEvent;
use crate::synth::Shape;
use crate::{
    Backend, BackendChoice, Engine, Error, Event, Flow, GenerateOptions, ModelFiles, Quant,
    Sampling,
};
use clap::{Parser, Subcommand};

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
    #[arg(long, default_value = "f32", value_parser = parse::<Quant>)]
    quant: Quant,
    #[arg(long, default_value = "cpu", value_parser = parse::<BackendChoice>)]
    backend: BackendChoice,
    /// The CPU backend's instruction set, to compare them: scalar, avx2, vnni (the best this CPU
    /// runs when left out).
    #[arg(long, value_parser = Isa::by_name)]
    cpu_kernels: Option<Isa>,
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
    },
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
                "tokenometer: no command given; use generate, bench or synth (--help explains them)"
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
        } => {
            let sampling = Sampling {
                temperature,
                top_p,
                seed,
            };
            sampling.validate()?;
            let engine = load(&model).await?;
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
        Command::Bench {
            model,
            max_tokens,
            concurrency: Some(levels),
            arrival,
            max_batch,
            prompts,
            json,
            ..
        } => {
            let prompts = match prompts {
                Some(path) => read_prompts(&path)?,
                None => DEFAULT_PROMPTS.iter().map(|p| p.to_string()).collect(),
            };
            let load = Load {
                levels: levels.iter().map(|&n| n as usize).collect(),
                arrival,
                max_batch: max_batch.map(|n| n as usize),
                prompts,
                max_tokens,
            };
            bench_concurrency(&model, &load, json).await
        }
        Command::Bench {
            model,
            runs,
            prompt,
            max_tokens,
            json,
            ..
        } => bench(&model, runs as usize, &prompt, max_tokens, json).await,
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
    Engine::load(files, tokenizer.as_deref(), args.quant, &backend)
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

/// Where a run's events go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    /// The prompt and the text as it streams.
    Text,
    /// One JSON object per event; the done line carries the report.
    Json,
    /// Nothing (benchmark runs).
    Quiet,
}

/// Run one generation through the meter, writing its events as `output` says.
async fn generate(
    engine: &Engine,
    prompt: &str,
    options: &GenerateOptions,
    reading_wpm: f64,
    warm_up_ms: Option<f64>,
    output: Output,
) -> Result<Report, Error> {
    let conditions =
        Conditions::new(&engine.info, options.sampling, 1, warm_up_ms).raw_prompt(!options.chat);
    let mut meter = Meter::new(conditions, reading_wpm);
    let mut out = std::io::stdout().lock();
    if output == Output::Text {
        let _ = write!(out, "{prompt}");
    }
    let mut done = None;
    engine
        .generate(prompt, options, &mut |event| {
            meter.observe(event);
            match (event, output) {
                // The done line waits for the report it carries.
                (Event::Done { .. }, _) => done = Some(event.clone()),
                (_, Output::Json) => {
                    let _ = writeln!(out, "{}", serde_json::to_string(event).unwrap());
                }
                (Event::Token { text, .. }, Output::Text) => {
                    let _ = write!(out, "{text}");
                    let _ = out.flush();
                }
                _ => {}
            }
            Flow::Continue
        })
        .await?;
    let Some(done) = done else {
        unreachable!("generate always ends with a done event")
    };
    let report = meter.final_report();
    match output {
        Output::Json => {
            let mut line = serde_json::to_value(&done).unwrap();
            line["report"] = serde_json::to_value(&report).unwrap();
            let _ = writeln!(out, "{line}");
        }
        Output::Text => {
            let _ = writeln!(out);
        }
        Output::Quiet => {}
    }
    Ok(report)
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

/// The compact human table that ends `generate`.
fn table(r: &Report) -> String {
    let c = &r.conditions;
    let p = r.inter_token_ms;
    let mut lines = vec![
        format!("conditions: {}", c.summary()),
        format!(
            "stop: {}",
            c.stop_reason.map_or("-", |r| r.name()).replace('_', " ")
        ),
        format!("warm-up (apart): {} ms", fmt(c.warm_up_ms, 1)),
        format!(
            "TTFT {} ms = queue {} + tokenize {} + prefill {} (prefill {} tok/s)",
            fmt(r.ttft_ms, 1),
            fmt(r.queued_ms, 2),
            fmt(r.tokenize_ms, 2),
            fmt(r.prefill_ms, 1),
            fmt(r.prefill_tps, 1)
        ),
        format!(
            "decode {} tok/s over {} ms; inter-token p50 {} p90 {} p99 {} max {} ms",
            fmt(r.decode_tps, 1),
            fmt(r.decode_ms, 1),
            fmt(p.map(|p| p.p50), 2),
            fmt(p.map(|p| p.p90), 2),
            fmt(p.map(|p| p.p99), 2),
            fmt(p.map(|p| p.max), 2)
        ),
        format!(
            "words {} ({} tok/word), {} words/s = {} x reading speed ({} wpm; a reader needs {:.1} s)",
            r.words,
            fmt(r.tokens_per_word, 2),
            fmt(r.words_per_s, 1),
            fmt(r.reading_speed_x, 1),
            r.reading_wpm,
            r.reading_time_s
        ),
        format!(
            "total {} ms (predicted TTFT + tokens / decode tok/s: {} ms)",
            fmt(r.total_ms, 1),
            fmt(r.predicted_total_ms, 1)
        ),
        format!(
            "effective bandwidth {} GB/s ({} of weights per token)",
            fmt(r.effective_gb_per_s, 3),
            human_bytes(c.model.bytes_per_token)
        ),
    ];
    if c.batch_size > 1 {
        lines.push(format!(
            "aggregate {} tok/s, per request {} tok/s",
            fmt(r.aggregate_tps, 1),
            fmt(r.per_request_tps, 1)
        ));
    }
    lines.join("\n")
}

/// `synth`: seeded random weights of `shape` (with `layers` instead of its own, if given) as a
/// llama2.c `.bin`, or as a GGUF with the tokenizer of the GGUF `vocab`.
fn synth(
    shape: Shape,
    out: &Path,
    seed: u64,
    layers: Option<u32>,
    vocab: Option<&Path>,
    q8: bool,
) -> Result<(), Error> {
    let mut config = shape.config();
    if let Some(layers) = layers {
        config.n_layers = layers as usize;
    }
    let gguf = out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    let tokenizer = match (gguf, vocab) {
        (true, Some(path)) => {
            let bytes =
                std::fs::read(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
            let header = crate::loading::gguf::Gguf::parse(&bytes)?;
            let size = header
                .get("tokenizer.ggml.tokens")
                .and_then(crate::loading::gguf::Value::as_array)
                .map_or(0, <[_]>::len);
            if size != config.vocab_size {
                return Err(Error::BadTokenizer(format!(
                    "{} holds {size} tokens but {} has a vocabulary of {}; give a vocabulary of \
                     that size",
                    path.display(),
                    shape.name(),
                    config.vocab_size
                )));
            }
            header.into_tokenizer_metadata()
        }
        (true, None) => {
            return Err(Error::Unsupported(
                "a GGUF carries its tokenizer: give --vocab with a GGUF whose tokenizer to copy"
                    .into(),
            ));
        }
        (false, _) if q8 || vocab.is_some() => {
            return Err(Error::Unsupported(
                "--vocab and --q8 write a GGUF: name the output file *.gguf".into(),
            ));
        }
        (false, _) => Vec::new(),
    };
    let weights = crate::synth::weights(&config, seed);
    let file =
        std::fs::File::create(out).map_err(|e| Error::Write(format!("{}: {e}", out.display())))?;
    let mut writer = std::io::BufWriter::new(file);
    let written = if gguf {
        let mut metadata = crate::loading::gguf_writer::llama_metadata(shape.name(), &config, q8);
        metadata.extend(tokenizer);
        crate::loading::gguf_writer::write_model(&weights, &metadata, q8, &mut writer)
    } else {
        crate::loading::llama2c::write(&weights, &mut writer)
    };
    written
        .and_then(|()| writer.flush())
        .map_err(|e| Error::Write(format!("{}: {e}", out.display())))?;
    eprintln!(
        "wrote {} ({} parameters, {}{}, seed {seed})",
        out.display(),
        config.parameter_count(),
        shape.name(),
        layers.map_or(String::new(), |n| format!(" with {n} layers")),
    );
    Ok(())
}

async fn bench(
    args: &ModelArgs,
    runs: usize,
    prompt: &str,
    max_tokens: usize,
    json: bool,
) -> Result<(), Error> {
    let engine = load(args).await?;
    let warm_up_ms = engine.warm_up().await?;
    let options = GenerateOptions {
        max_tokens,
        ..Default::default()
    };
    let mut reports = Vec::with_capacity(runs + 1);
    for _ in 0..=runs {
        let quiet = Output::Quiet;
        reports.push(generate(&engine, prompt, &options, DEFAULT_READING_WPM, None, quiet).await?);
    }
    // The first run is not counted: it compiles every kernel shape the timed runs meet.
    reports.remove(0);
    if json {
        println!("{}", serde_json::to_string_pretty(&reports).unwrap());
        return Ok(());
    }
    let first = &reports[0].conditions;
    println!("conditions: {}", first.summary());
    println!(
        "runs: {runs} after a warm-up ({warm_up_ms:.1} ms, reported apart) and one untimed run"
    );
    println!(
        "{:<16} {:>12} {:>12} {:>12}",
        "figure", "median", "min", "max"
    );
    type Pick = fn(&Report) -> Option<f64>;
    let rows: [(&str, Pick); 6] = [
        ("TTFT ms", |r| r.ttft_ms),
        ("prefill tok/s", |r| r.prefill_tps),
        ("decode tok/s", |r| r.decode_tps),
        ("words/s", |r| r.words_per_s),
        ("GB/s", |r| r.effective_gb_per_s),
        ("total ms", |r| r.total_ms),
    ];
    for (name, pick) in rows {
        let mut values: Vec<f64> = reports.iter().filter_map(pick).collect();
        values.sort_by(f64::total_cmp);
        if values.is_empty() {
            println!("{name:<16} {:>12} {:>12} {:>12}", "-", "-", "-");
            continue;
        }
        let median = if values.len() % 2 == 1 {
            values[values.len() / 2]
        } else {
            (values[values.len() / 2 - 1] + values[values.len() / 2]) / 2.0
        };
        println!(
            "{name:<16} {median:>12.2} {:>12.2} {:>12.2}",
            values[0],
            values[values.len() - 1]
        );
    }
    Ok(())
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

/// Submit `prompts[i]` for user `i`, made at `arrivals[i]`, naming the prompt a bad one came from.
fn submit_all(
    engine: &Engine,
    scheduler: &mut Scheduler,
    meter: &mut BatchMeter,
    prompts: &[String],
    arrivals: &[f64],
    options: &GenerateOptions,
) -> Result<(), Error> {
    for (i, &at) in arrivals.iter().enumerate() {
        let prompt = &prompts[i % prompts.len()];
        let request = Request {
            prompt: prompt.clone(),
            options: *options,
        };
        let seq = scheduler
            .submit(engine, &request, Some(at))
            .map_err(|e| Error::BadPrompt(format!("prompt {} ({prompt:?}): {e}", i + 1)))?;
        meter.arrive(seq, at);
    }
    Ok(())
}

/// Step `scheduler` until every sequence has ended, passing each event to `on_event`; while
/// nothing runs and the next user has not arrived yet, wait for them.
async fn drive(
    engine: &Engine,
    scheduler: &mut Scheduler,
    on_event: &mut dyn FnMut(SeqEvent),
) -> Result<(), Error> {
    while !scheduler.is_idle() {
        let events = scheduler.step(engine).await?;
        if let (true, 0, Some(at)) = (
            events.is_empty(),
            scheduler.running(),
            scheduler.next_arrival_ms(),
        ) {
            let wait = (at - scheduler.now_ms()).max(0.0);
            std::thread::sleep(std::time::Duration::from_secs_f64(wait / 1e3));
        }
        events.into_iter().for_each(&mut *on_event);
    }
    Ok(())
}

/// Run every prompt as its own sequence in one batch, writing events as `output` says.
async fn generate_batch(
    engine: &Engine,
    prompts: &[String],
    options: &GenerateOptions,
    reading_wpm: f64,
    warm_up_ms: Option<f64>,
    output: Output,
) -> Result<LoadReport, Error> {
    let users = prompts.len();
    let conditions = LoadConditions {
        model: engine.info.clone(),
        users,
        max_batch: users,
        arrival: Arrival::Burst.to_string(),
        max_tokens: options.max_tokens,
        sampling: options.sampling,
        warm_up_ms,
    };
    let mut meter = BatchMeter::new(conditions, reading_wpm);
    let mut scheduler = Scheduler::new(users);
    let arrivals = Arrival::Burst.times(users);
    submit_all(
        engine,
        &mut scheduler,
        &mut meter,
        prompts,
        &arrivals,
        options,
    )?;
    let mut out = std::io::stdout().lock();
    let mut texts = vec![String::new(); users];
    drive(engine, &mut scheduler, &mut |e: SeqEvent| {
        meter.observe(e.seq, &e.event);
        match (&e.event, output) {
            (Event::Done { .. }, Output::Json) => {
                let mut line = serde_json::to_value(&e).unwrap();
                let report = meter.user(e.seq).map(Meter::final_report);
                line["report"] = serde_json::to_value(report).unwrap();
                let _ = writeln!(out, "{line}");
            }
            (_, Output::Json) => {
                let _ = writeln!(out, "{}", serde_json::to_string(&e).unwrap());
            }
            (Event::Token { text, .. }, _) => texts[e.seq].push_str(text),
            (
                Event::Done {
                    reason,
                    trailing_text,
                    ..
                },
                Output::Text,
            ) => {
                let _ = writeln!(
                    out,
                    "--- sequence {} ({}) ---\n{}{}{}\n",
                    e.seq,
                    reason.name().replace('_', " "),
                    prompts[e.seq],
                    texts[e.seq],
                    trailing_text
                );
            }
            _ => {}
        }
    })
    .await?;
    let report = meter.report();
    if output == Output::Json {
        let line = serde_json::json!({"event": "batch_done", "report": report});
        let _ = writeln!(out, "{line}");
    }
    Ok(report)
}

/// A batch's or load level's figures, as lines for a person.
fn load_table(r: &LoadReport) -> String {
    [
        format!("conditions: {}", r.summary),
        format!(
            "{} users, {} completed, {} prompt + {} output tokens in {} ms",
            r.users,
            r.requests_completed,
            r.prompt_tokens,
            r.output_tokens,
            fmt(r.wall_ms, 1)
        ),
        format!(
            "aggregate {} tok/s; per user {} tok/s p50, {} min; {} words/s p50 ({} wpm is {:.1} words/s)",
            fmt(r.aggregate_tps, 1),
            fmt(r.per_user_tps_p50, 1),
            fmt(r.per_user_tps_min, 1),
            fmt(r.per_user_words_per_s_p50, 1),
            r.reading_wpm,
            r.reading_wpm / 60.0
        ),
        format!(
            "TTFT p50 {} ms, p99 {} ms; inter-token p50 {} ms, p99 {} ms",
            fmt(r.ttft_ms_p50, 1),
            fmt(r.ttft_ms_p99, 1),
            fmt(r.itl_ms_p50, 2),
            fmt(r.itl_ms_p99, 2)
        ),
    ]
    .join("\n")
}

/// A load test's settings.
struct Load {
    levels: Vec<usize>,
    arrival: Arrival,
    max_batch: Option<usize>,
    prompts: Vec<String>,
    max_tokens: usize,
}

/// One load test level: `users` users, greedy, arriving as `load.arrival` says.
async fn load_level(
    engine: &Engine,
    load: &Load,
    users: usize,
    max_tokens: usize,
    warm_up_ms: Option<f64>,
) -> Result<LoadReport, Error> {
    let options = GenerateOptions {
        max_tokens,
        ..Default::default()
    };
    let max_batch = load.max_batch.unwrap_or(users);
    let conditions = LoadConditions {
        model: engine.info.clone(),
        users,
        max_batch,
        arrival: load.arrival.to_string(),
        max_tokens,
        sampling: options.sampling,
        warm_up_ms,
    };
    let mut meter = BatchMeter::new(conditions, DEFAULT_READING_WPM);
    let mut scheduler = Scheduler::new(max_batch);
    let arrivals = load.arrival.times(users);
    submit_all(
        engine,
        &mut scheduler,
        &mut meter,
        &load.prompts,
        &arrivals,
        &options,
    )?;
    drive(engine, &mut scheduler, &mut |e| {
        meter.observe(e.seq, &e.event)
    })
    .await?;
    Ok(meter.report())
}

/// `bench --concurrency`: one row per level, each after an untimed short run of the same batch
/// sizes (on wgpu, every new shape compiles its kernels the first time).
async fn bench_concurrency(args: &ModelArgs, load: &Load, json: bool) -> Result<(), Error> {
    let engine = self::load(args).await?;
    let warm_up_ms = engine.warm_up().await?;
    let mut reports = Vec::with_capacity(load.levels.len());
    for (i, &users) in load.levels.iter().enumerate() {
        load_level(&engine, load, users, 2, None).await?;
        let mut report =
            load_level(&engine, load, users, load.max_tokens, Some(warm_up_ms)).await?;
        report.products_alone = engine.products_alone(report.conditions.batch_rows());
        if !json {
            if i == 0 {
                let c = &report.conditions;
                println!(
                    "conditions: {} ({} params, {}) on {} [{}], {} arrival, up to {} tokens a user, greedy, batch limit {}",
                    c.model.name,
                    crate::meter::human_count(c.model.parameters as f64),
                    c.model.quant,
                    c.model.backend,
                    c.model.adapter,
                    c.arrival,
                    c.max_tokens,
                    load.max_batch
                        .map_or_else(|| "= users".to_string(), |n| n.to_string())
                );
                println!("warm-up (apart): {warm_up_ms:.1} ms; each level after an untimed run");
                println!(
                    "{:>5} {:>11} {:>13} {:>13} {:>10} {:>10} {:>9} {:>9} {:>10} {:>13}",
                    "users",
                    "aggr tok/s",
                    "user tok/s p50",
                    "user min",
                    "TTFT p50",
                    "TTFT p99",
                    "ITL p99",
                    "x reading",
                    "wall ms",
                    "ceiling tok/s"
                );
            }
            let reading = report
                .per_user_words_per_s_p50
                .map(|w| w / (report.reading_wpm / 60.0));
            println!(
                "{:>5} {:>11} {:>13} {:>13} {:>10} {:>10} {:>9} {:>9} {:>10} {:>13}",
                report.users,
                fmt(report.aggregate_tps, 1),
                fmt(report.per_user_tps_p50, 1),
                fmt(report.per_user_tps_min, 1),
                fmt(report.ttft_ms_p50, 1),
                fmt(report.ttft_ms_p99, 1),
                fmt(report.itl_ms_p99, 2),
                fmt(reading, 1),
                fmt(report.wall_ms, 0),
                fmt(report.products_alone.map(|p| p.tps), 1)
            );
        }
        reports.push(report);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&reports).unwrap());
    } else if reports.iter().any(|r| r.products_alone.is_some()) {
        println!(
            "ceiling: a step's matrix products alone (every projection and the classifier, once, \
             for the batch's rows; nothing else), median of the passes timed after each level:"
        );
        for p in reports.iter().filter_map(|r| r.products_alone) {
            println!(
                "{:>5} rows: {:.2} ms a step, {:.1} GB/s of weights, {:.2} billion multiply-adds/s ({} passes)",
                p.rows, p.ms_p50, p.gb_per_s, p.gmac_per_s, p.passes
            );
        }
    }
    Ok(())
}
