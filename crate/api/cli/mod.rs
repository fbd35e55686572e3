//! The native command line (`tokenometer generate | bench | serve | score | perplexity | synth |
//! convert`), shared by the binary.
//! Bad input ends with a one-line error on stderr and exit code 2.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

mod args;
mod auto;
mod ceilings;
mod profile;
mod quality;
mod remote;
mod runs;
mod synth;

use crate::backend::{Backend, BackendChoice, BackendKind};
use crate::cpu::Threads;
use crate::decode::{DEFAULT_PROMPTS, Engine, GenerateOptions, Sampling, Speculation};
use crate::error::Error;
use crate::loading::tokenizer::{ChatTemplate, Tokenizer};
use crate::loading::{ModelFiles, ModelFormat};
use crate::model::Quant;
use args::{Cli, Command, MAX_USERS, ModelArgs, ServeArgs, SpeculateArgs};
use clap::Parser;
use runs::{Load, Output, bench, bench_concurrency, generate, generate_batch, load_table, table};
use synth::synth;

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
    let command = match endpoint_run(command) {
        Ok(done) => return done,
        Err(local) => *local,
    };
    match command {
        Command::Generate {
            model,
            prompt,
            prompts,
            step_tokens,
            max_tokens,
            temperature,
            top_p,
            seed,
            reading_wpm,
            json,
            logprobs,
            no_warmup,
            raw,
            speculate,
            endpoint: _,
        } => {
            let sampling = Sampling::checked(temperature, top_p, seed)?;
            let engine = load(&model).await?;
            if !raw {
                warn_if_chat_template_unrecognized(&engine);
            }
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
                logprobs: logprobs.map(|n| n as usize),
            };
            if let Some(path) = prompts {
                let prompts = read_prompts(&path)?;
                let output = if json { Output::Json } else { Output::Text };
                let step_tokens = step_tokens as usize;
                let report = generate_batch(
                    &engine,
                    &prompts,
                    &options,
                    step_tokens,
                    reading_wpm,
                    warm_up_ms,
                    output,
                )
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
        Command::Score {
            model,
            prompt_ids,
            ids,
            json,
        } => quality::score(&load(&model).await?, &prompt_ids, &ids, json).await,
        Command::Perplexity {
            model,
            file,
            ctx,
            json,
        } => {
            let text = quality::read_text(&file)?;
            quality::perplexity(&load(&model).await?, &text, ctx, json).await
        }
        Command::Bench {
            model,
            max_tokens,
            concurrency: Some(levels),
            arrival,
            max_batch,
            step_tokens,
            prompts,
            json,
            speculate,
            slo,
            raw,
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
                step_tokens: step_tokens as usize,
                prompts,
                max_tokens,
                slo,
                chat: !raw,
                threads: model.threads.unwrap_or_else(Threads::physical_cores),
            };
            let engine = load(&model).await?;
            if !raw {
                warn_if_chat_template_unrecognized(&engine);
            }
            bench_concurrency(&engine, &load_spec, json).await
        }
        Command::Bench {
            model,
            runs,
            prompt,
            max_tokens,
            json,
            speculate,
            raw,
            profile,
            ..
        } => {
            let engine = load(&model).await?;
            if !raw {
                warn_if_chat_template_unrecognized(&engine);
            }
            match engine.model.phases() {
                Some(clock) => clock.set_on(profile),
                None if profile => eprintln!(
                    "tokenometer: --profile times a GPU's dispatches with timestamp queries, and \
                     this adapter has none (WebGPU's timestamp-query), so no phases follow"
                ),
                None => {}
            }
            let speculation = speculation(&speculate, &model, &engine).await?;
            let runs = runs as usize;
            // The memory's read bandwidth at the engine's threads, for the ceiling (the CPU's).
            let threads = (engine.info.backend == BackendKind::Cpu)
                .then(|| model.threads.unwrap_or_else(Threads::physical_cores));
            let options = GenerateOptions {
                max_tokens,
                chat: !raw,
                ..Default::default()
            };
            bench(
                &engine,
                runs,
                &prompt,
                options,
                speculation.as_ref(),
                json,
                threads,
            )
            .await
        }
    }
}

/// Run `command` against its endpoint, if it names one; otherwise hand it back.
fn endpoint_run(command: Command) -> Result<Result<(), Error>, Box<Command>> {
    let (endpoint, model) = match &command {
        Command::Generate {
            endpoint, model, ..
        }
        | Command::Bench {
            endpoint, model, ..
        } if endpoint.endpoint.is_some() => (endpoint, model),
        _ => return Err(Box::new(command)),
    };
    let local_only = [
        (model.quant != Quant::Stored, "--quant"),
        (model.cpu_kernels.is_some(), "--cpu-kernels"),
        (model.threads.is_some(), "--threads"),
        (model.backend != BackendChoice::Cpu, "--backend"),
    ];
    if let Some((_, flag)) = local_only.iter().find(|(given, _)| *given) {
        return Ok(Err(Error::Unsupported(format!(
            "{flag} chooses how a local model runs; an endpoint's server decides that (drop {flag} \
             or --endpoint)"
        ))));
    }
    let tokenizer = match model.tokenizer.as_deref().map(counting_tokenizer) {
        Some(Err(e)) => return Ok(Err(e)),
        Some(Ok(t)) => Some(t),
        None => None,
    };
    let target = remote::Target {
        url: endpoint.endpoint.clone().unwrap_or_default(),
        model: endpoint.endpoint_model.clone(),
        key_env: endpoint.api_key_env.clone(),
        stall: Duration::from_secs_f64(endpoint.endpoint_timeout),
        request_timeout: Duration::from_secs_f64(endpoint.request_timeout),
        tokenizer,
    };
    let speculating = |s: &SpeculateArgs| s.speculate.is_some();
    Ok(match command {
        Command::Generate { speculate, .. } | Command::Bench { speculate, .. }
            if speculating(&speculate) =>
        {
            Err(Error::Unsupported(
                "--speculate is how a local model decodes; an endpoint's server decides that"
                    .into(),
            ))
        }
        Command::Generate {
            prompts: Some(_), ..
        } => Err(Error::Unsupported(
            "--prompts runs a local batch; to send many requests to an endpoint use bench \
             --endpoint --concurrency N --prompts FILE"
                .into(),
        )),
        Command::Generate {
            prompt,
            max_tokens,
            temperature,
            top_p,
            seed,
            reading_wpm,
            json,
            no_warmup,
            raw,
            ..
        } => (|| {
            let sampling = Sampling::checked(temperature, top_p, seed)?;
            let request = remote_request(
                prompt.unwrap_or_default(),
                !raw,
                max_tokens,
                sampling,
                false,
            );
            remote::generate(&target, &request, reading_wpm, no_warmup, json)
        })(),
        Command::Bench {
            runs,
            prompt,
            max_tokens,
            concurrency,
            arrival,
            prompts,
            json,
            slo,
            duration,
            ignore_eos,
            raw,
            ..
        } => (|| {
            let request = remote_request(prompt, !raw, max_tokens, Sampling::default(), ignore_eos);
            let Some(levels) = concurrency else {
                return remote::bench(&target, &request, runs as usize, json);
            };
            let prompts = match prompts {
                Some(path) => read_prompts(&path)?,
                None => DEFAULT_PROMPTS.iter().map(|p| p.to_string()).collect(),
            };
            let load = remote::Levels {
                levels: levels.iter().map(|&n| n as usize).collect(),
                arrival,
                prompts,
                duration: duration.map(Duration::from_secs_f64),
                slo,
            };
            remote::bench_concurrency(target, &request, &load, json)
        })(),
        _ => unreachable!("only generate and bench name an endpoint"),
    })
}

fn remote_request(
    prompt: String,
    chat: bool,
    max_tokens: usize,
    sampling: Sampling,
    ignore_eos: bool,
) -> crate::api::endpoint::EndpointRequest {
    crate::api::endpoint::EndpointRequest {
        prompt,
        chat,
        max_tokens,
        sampling,
        ignore_eos,
        logprobs: None,
    }
}

/// The tokenizer `--tokenizer` names for counting an endpoint's tokens: tokenizer.json,
/// llama2.c's tokenizer.bin, or a GGUF's.
fn counting_tokenizer(path: &Path) -> Result<Tokenizer, Error> {
    let files = ModelFiles::from_path(path);
    if let Ok(files) = &files
        && matches!(files.format, ModelFormat::Gguf(_))
    {
        return files.embedded_tokenizer()?.ok_or_else(|| {
            Error::BadTokenizer(format!("{} carries no tokenizer", path.display()))
        });
    }
    let bytes = std::fs::read(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    Tokenizer::from_bytes(&bytes)
}

/// The engine `args` describe, its chat prompts in `--chat-template`'s template when given.
async fn load(args: &ModelArgs) -> Result<Engine, Error> {
    let mut engine = load_on_backend(args).await?;
    if let Some(template) = &args.chat_template {
        engine.follow_chat(template.clone())?;
    }
    Ok(engine)
}

/// Where chat prompts would be wrapped in the model's template and tokenometer does not follow
/// the file's, say so on stderr, and how to pick one: the prompts go as they are.
fn warn_if_chat_template_unrecognized(engine: &Engine) {
    if engine.info.unrecognized_chat_template.is_some() {
        eprintln!(
            "tokenometer: warning: {}, so chat prompts go to it as they are; --chat-template ({}) \
             wraps them in one of those",
            engine.info.no_chat_template(),
            ChatTemplate::CHOICES
        );
    }
}

async fn load_on_backend(args: &ModelArgs) -> Result<Engine, Error> {
    let Some(model) = &args.model else {
        return Err(Error::Unsupported(
            "give --model FILE (or --endpoint URL to meter a server)".into(),
        ));
    };
    let files = ModelFiles::from_path(model)?;
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))
    };
    // A GGUF carries its tokenizer; other formats find theirs beside the model.
    let tokenizer = match &args.tokenizer {
        Some(path) => Some(read(path)?),
        None if matches!(files.format, ModelFormat::Gguf(_)) => None,
        None => Some(read(&find_tokenizer(model)?)?),
    };
    if args.no_check && args.backend != BackendChoice::Wgpu {
        return Err(Error::Unsupported(
            "--no-check skips the check of --backend wgpu against the CPU: add --backend wgpu or \
             drop --no-check (auto always checks a GPU before it races it)"
                .into(),
        ));
    }
    if args.race && args.backend != BackendChoice::Auto {
        return Err(Error::Unsupported(
            "--race races the backends for --backend auto: add --backend auto or drop --race"
                .into(),
        ));
    }
    let backend = match (args.cpu_kernels, args.backend) {
        (None, BackendChoice::Auto) => {
            return auto::load(
                model,
                tokenizer.as_deref(),
                args.quant,
                cpu_threads(args)?,
                args.race,
            )
            .await;
        }
        (None, choice) => Backend::init(choice).await?,
        (Some(isa), BackendChoice::Cpu) => Backend::cpu_with(isa),
        (Some(_), _) => {
            return Err(Error::Unsupported(
                "--cpu-kernels chooses the CPU backend's instruction set: it needs --backend cpu"
                    .into(),
            ));
        }
    };
    match backend.kind {
        BackendKind::Cpu => {
            let backend = backend.with_threads(cpu_threads(args)?);
            Engine::load(files, tokenizer.as_deref(), args.quant, &backend)
        }
        BackendKind::Wgpu if args.no_check => {
            let mut engine = Engine::load(files, tokenizer.as_deref(), args.quant, &backend)?;
            engine.info.backend_note = Some("not checked against the CPU (--no-check)".into());
            Ok(engine)
        }
        BackendKind::Wgpu => {
            auto::checked_gpu(files, tokenizer.as_deref(), args.quant, &backend).await
        }
    }
}

/// The CPU backend's threads: `--threads`, or every physical core.
fn cpu_threads(args: &ModelArgs) -> Result<Threads, Error> {
    let count = args.threads.unwrap_or_else(Threads::physical_cores);
    Threads::new(count).map_err(Error::Unsupported)
}

/// `tokenometer serve`: the engine is loaded on its own thread, the page found beside the sources.
fn serve_model(model: ModelArgs, args: ServeArgs) -> Result<(), Error> {
    let checkout = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // A checkout (www/, pkg/, models/) or a folder `make site` wrote (index.html and all in it):
    // one asked for and not there is refused before the model loads, not served as a 404; without
    // --page, this binary's own checkout where it is one, else the API alone.
    let page = match args.page {
        Some(root) if !crate::api::serve::is_page(&root) => {
            return Err(Error::Io(format!(
                "--page {}: no page there (neither a checkout's www/index.html nor the index.html \
                 `make site` writes); give such a folder, or leave --page out",
                crate::error::clip(&root.display().to_string())
            )));
        }
        Some(root) => Some(root),
        None => Some(checkout.clone()).filter(|root| crate::api::serve::is_page(root)),
    };
    let speculation = match args.speculate.as_deref() {
        None => None,
        Some("lookup") => Some(Speculation::lookup()),
        Some(other) => {
            return Err(Error::Unsupported(format!(
                "serve --speculate {other:?}: serve speculates with lookup only"
            )));
        }
    };
    let kv_memory = match args.kv_memory {
        Some(bytes) => (bytes, "--kv-memory".to_string()),
        None => crate::api::serve::default_kv_memory(),
    };
    println!(
        "tokenometer: KV cache for the running requests: at most {} ({}); a request joins when its \
         prompt and max_tokens fit beside the others'",
        crate::api::serve::bytes_said(kv_memory.0),
        kv_memory.1
    );
    let models = match &page {
        Some(site) if crate::api::serve::is_site(site) => site.join("models"),
        page => page.clone().unwrap_or(checkout).join(
            std::env::var_os("MODELS").map_or_else(|| PathBuf::from("models"), PathBuf::from),
        ),
    };
    let options = crate::api::serve::ServeOptions {
        host: args.host,
        port: args.port,
        limits: crate::api::serve::Limits {
            parallel: args.parallel as usize,
            queue: args.queue as usize,
            prefill_chunk: args.prefill_chunk as usize,
            step_tokens: args.step_tokens as usize,
            kv_memory: kv_memory.0,
            kv_positions: None,
            write_timeout: Duration::from_secs_f64(args.write_timeout),
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
        body_memory: args.body_memory as usize,
    };
    // Its /v1/chat/completions refuses messages then, saying why; the warning says it at start.
    let ctx = args.ctx;
    let load = move || {
        let mut engine = pollster::block_on(load(&model))?;
        if let Some(positions) = ctx {
            engine.limit_context(positions)?;
        }
        warn_if_chat_template_unrecognized(&engine);
        Ok(engine)
    };
    crate::api::serve::serve(load, options)
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
            model: Some(PathBuf::from(path)),
            tokenizer: None,
            quant,
            backend: model.backend,
            cpu_kernels: model.cpu_kernels,
            threads: model.threads,
            race: false,
            no_check: model.no_check,
            chat_template: None,
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
