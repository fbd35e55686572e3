//! The runs behind `generate` and `bench`: each a driver from `api/drive.rs`, its events written
//! as the user asked, and the meter's figures as tables for a person or as JSON.

use std::io::Write;

use crate::api::drive::{Level, LoadLevel, MeteredRun};
use crate::decode::{Arrival, Engine, Event, Flow, GenerateOptions, Speculation, TokenLogprobs};
use crate::error::Error;
use crate::meter::{DEFAULT_READING_WPM, LoadReport, Report, Slo, Source, human_bytes};

/// Where a run's events go.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Output {
    /// The prompt and the text as it streams.
    Text,
    /// One JSON object per event; the done line carries the report.
    Json,
    /// Nothing (benchmark runs).
    Quiet,
}

/// Run one generation through the meter, writing its events as `output` says.
pub(super) async fn generate(
    engine: &Engine,
    prompt: &str,
    options: &GenerateOptions,
    speculation: Option<&Speculation>,
    reading_wpm: f64,
    warm_up_ms: Option<f64>,
    output: Output,
) -> Result<Report, Error> {
    let mut run = MeteredRun::start(
        engine,
        prompt,
        *options,
        speculation,
        reading_wpm,
        warm_up_ms,
    )?;
    let mut out = std::io::stdout().lock();
    if output == Output::Text {
        let _ = write!(out, "{prompt}");
    }
    let mut done = None;
    let mut picks = Vec::new();
    let report = run
        .run_to_end(engine, &mut |event| {
            match (event, output) {
                // The done line waits for the report it carries.
                (Event::Done { .. }, _) => done = Some(event.clone()),
                (_, Output::Json) => {
                    let _ = writeln!(out, "{}", serde_json::to_string(event).unwrap());
                }
                (Event::Token { text, logprobs, .. }, Output::Text) => {
                    let _ = write!(out, "{text}");
                    let _ = out.flush();
                    if let Some(l) = logprobs {
                        picks.push(l.clone());
                    }
                }
                _ => {}
            }
            Flow::Continue
        })
        .await?;
    let Some(done) = done else {
        unreachable!("a run always ends with a done event")
    };
    match output {
        Output::Json => {
            let mut line = serde_json::to_value(&done).unwrap();
            line["report"] = serde_json::to_value(&report).unwrap();
            let _ = writeln!(out, "{line}");
        }
        Output::Text => {
            let _ = writeln!(out);
            if options.logprobs.is_some() {
                eprintln!("\n{}", logprobs_table(&picks, options.sampling.temperature));
            }
        }
        Output::Quiet => {}
    }
    Ok(report)
}

/// Each generated token with its probability, its rank and the likeliest alternatives, a line
/// each (`generate --logprobs N`).
fn logprobs_table(picks: &[Box<TokenLogprobs>], temperature: f32) -> String {
    let at = if temperature > 0.0 {
        format!("at temperature {temperature}")
    } else {
        "greedy, read at temperature 1".to_string()
    };
    let shown = |bytes: &[u8]| format!("{:?}", String::from_utf8_lossy(bytes));
    let mut lines = vec![format!(
        "log probabilities ({at}): token, its probability and rank, then the likeliest"
    )];
    for (i, p) in picks.iter().enumerate() {
        let top: Vec<String> = p
            .top
            .iter()
            .map(|a| format!("{} {:.1}%", shown(&a.bytes), 100.0 * a.logprob.exp()))
            .collect();
        lines.push(format!(
            "{:>4} {:<16} {:>6.1}% #{:<5} {}",
            i + 1,
            shown(&p.bytes),
            100.0 * p.logprob.exp(),
            p.rank,
            top.join("  ")
        ));
    }
    lines.join("\n")
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

/// The compact human table that ends `generate`.
pub(super) fn table(r: &Report) -> String {
    let c = &r.conditions;
    let p = r.inter_token_ms;
    let mut lines = vec![
        format!("conditions: {}", c.summary()),
        format!(
            "stop: {}",
            c.stop_reason.map_or("-", |r| r.name()).replace('_', " ")
        ),
        format!("warm-up (apart): {} ms", fmt(c.warm_up_ms, 1)),
        match c.source {
            Source::Engine(_) => format!(
                "TTFT {} ms = queue {} + tokenize {} + prefill {} (prefill {} tok/s)",
                fmt(r.ttft_ms, 1),
                fmt(r.queued_ms, 2),
                fmt(r.tokenize_ms, 2),
                fmt(r.prefill_ms, 1),
                fmt(r.prefill_tps, 1)
            ),
            Source::Endpoint(_) => format!(
                "TTFT {} ms from sending the request to the answer's first text (the server's \
                 queue, tokenizing and prefill inside, and the network)",
                fmt(r.ttft_ms, 1)
            ),
        },
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
    ];
    if let Some(bytes) = c.source.bytes_per_token() {
        lines.push(format!(
            "effective bandwidth {} GB/s ({} of weights per token)",
            fmt(r.effective_gb_per_s, 3),
            human_bytes(bytes)
        ));
    }
    if let Some(p) = r.inter_chunk_ms {
        lines.push(format!(
            "inter-chunk p50 {:.2} p99 {:.2} max {:.2} ms ({} tokens in chunks as they arrived)",
            p.p50, p.p99, p.max, c.output_tokens
        ));
    }
    if r.reasoning_tokens > 0 {
        lines.push(format!(
            "reasoning {} tokens; its first at {} ms, the answer's at {} ms (TTFT)",
            r.reasoning_tokens,
            fmt(r.first_output_ms, 1),
            fmt(r.ttft_ms, 1)
        ));
    }
    if let Some(t) = &r.server_timings {
        lines.push(format!(
            "the server's own timings: prompt {} tok in {:.1} ms ({} tok/s), {} tok predicted in \
             {:.1} ms ({} tok/s, the first token counted)",
            t.prompt_n,
            t.prompt_ms,
            fmt(t.prompt_per_second, 1),
            t.predicted_n,
            t.predicted_ms,
            fmt(t.predicted_per_second, 1)
        ));
    }
    if c.batch_size > 1 {
        lines.push(format!(
            "aggregate {} tok/s, per request {} tok/s",
            fmt(r.aggregate_tps, 1),
            fmt(r.per_request_tps, 1)
        ));
    }
    if let Some(s) = &r.speculation {
        lines.push(format!(
            "speculation: {} of {} drafts kept ({}), {} kept per verification, {} passes per token \
             ({} verifications{})",
            s.accepted,
            s.drafted,
            fmt(s.acceptance_rate.map(|a| a * 100.0), 1) + "%",
            fmt(s.accepted_per_verification, 2),
            fmt(s.passes_per_token, 2),
            s.verifications,
            if s.draft_passes > 0 {
                format!(", {} draft-model passes", s.draft_passes)
            } else {
                String::new()
            }
        ));
        lines.push(s.steps_summary.clone());
    }
    lines.join("\n")
}

pub(super) async fn bench(
    engine: &Engine,
    runs: usize,
    prompt: &str,
    options: GenerateOptions,
    speculation: Option<&Speculation>,
    json: bool,
    threads: Option<usize>,
) -> Result<(), Error> {
    let warm_up_ms = engine.warm_up().await?;
    let mut reports = Vec::with_capacity(runs + 1);
    let mut before = None;
    for run in 0..=runs {
        if run == 1 {
            before = super::ceilings::gpu_work(engine);
        }
        let quiet = Output::Quiet;
        let wpm = DEFAULT_READING_WPM;
        reports.push(generate(engine, prompt, &options, speculation, wpm, None, quiet).await?);
    }
    // The first run is not counted: it compiles every kernel shape the timed runs meet.
    reports.remove(0);
    // This machine's ceilings, measured after the runs (apart from them).
    let measured = super::ceilings::measure(engine, &mut reports, threads, before).await;
    let untimed = "one untimed run";
    print_runs(&reports, warm_up_ms, untimed, speculation.is_some(), json);
    if !json {
        super::ceilings::print(&reports, measured, before, engine);
        super::profile::print_phases(&reports, engine.info.backend != crate::BackendKind::Cpu);
    }
    Ok(())
}

/// `bench`'s runs: as JSON, or their conditions and each figure's median, min and max.
pub(super) fn print_runs(
    reports: &[Report],
    warm_up_ms: f64,
    untimed: &str,
    speculation: bool,
    json: bool,
) {
    if json {
        println!("{}", serde_json::to_string_pretty(&reports).unwrap());
        return;
    }
    let Some(first) = reports.first() else {
        return;
    };
    println!("conditions: {}", first.conditions.summary());
    println!(
        "runs: {} after a warm-up ({warm_up_ms:.1} ms, reported apart) and {untimed}",
        reports.len()
    );
    println!(
        "{:<16} {:>12} {:>12} {:>12}",
        "figure", "median", "min", "max"
    );
    type Pick = fn(&Report) -> Option<f64>;
    let mut rows: Vec<(&str, Pick)> = vec![
        ("TTFT ms", |r| r.ttft_ms),
        ("prefill tok/s", |r| r.prefill_tps),
        ("decode tok/s", |r| r.decode_tps),
        ("words/s", |r| r.words_per_s),
        ("GB/s", |r| r.effective_gb_per_s),
        ("total ms", |r| r.total_ms),
    ];
    if first.inter_chunk_ms.is_some() {
        rows.push(("chunk gap p50 ms", |r| r.inter_chunk_ms.map(|p| p.p50)));
    }
    if first.server_timings.is_some() {
        rows.push(("server tok/s", |r| {
            r.server_timings.as_ref()?.predicted_per_second
        }));
    }
    if speculation {
        rows.extend([
            (
                "acceptance %",
                (|r| Some(r.speculation.as_ref()?.acceptance_rate? * 100.0)) as Pick,
            ),
            ("kept/verify", |r| {
                r.speculation.as_ref()?.accepted_per_verification
            }),
            ("passes/token", |r| r.speculation.as_ref()?.passes_per_token),
        ]);
    }
    for (name, pick) in rows {
        let values: Vec<f64> = reports.iter().filter_map(pick).collect();
        // An endpoint has no prefill or bandwidth of its own to show: those rows are left out.
        let remote = matches!(first.conditions.source, Source::Endpoint(_));
        // The meter's median (nearest rank), as every other spread it reports.
        match crate::meter::spread(&values) {
            None if remote => continue,
            None => println!("{name:<16} {:>12} {:>12} {:>12}", "-", "-", "-"),
            Some(s) => println!(
                "{name:<16} {:>12.2} {:>12.2} {:>12.2}",
                s.median, s.min, s.max
            ),
        }
    }
}

/// Run every prompt as its own sequence in one batch, writing events as `output` says.
pub(super) async fn generate_batch(
    engine: &Engine,
    prompts: &[String],
    options: &GenerateOptions,
    step_tokens: usize,
    reading_wpm: f64,
    warm_up_ms: Option<f64>,
    output: Output,
) -> Result<LoadReport, Error> {
    let users = prompts.len();
    let mut level = LoadLevel::start(
        engine,
        &Level {
            users,
            arrival: Arrival::Burst,
            max_batch: users,
            step_tokens,
            prompts: prompts.to_vec(),
            options: *options,
            reading_wpm,
            warm_up_ms,
            slo: None,
        },
    )?;
    let mut out = std::io::stdout().lock();
    let mut texts = vec![String::new(); users];
    let report = level
        .run_to_end(engine, &mut |e, level| match (&e.event, output) {
            (Event::Done { .. }, Output::Json) => {
                let mut line = serde_json::to_value(e).unwrap();
                let report = level.user(e.seq).map(|m| m.final_report());
                line["report"] = serde_json::to_value(report).unwrap();
                let _ = writeln!(out, "{line}");
            }
            (_, Output::Json) => {
                let _ = writeln!(out, "{}", serde_json::to_string(e).unwrap());
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
        })
        .await?;
    if output == Output::Json {
        let line = serde_json::json!({"event": "batch_done", "report": report});
        let _ = writeln!(out, "{line}");
    }
    Ok(report)
}

/// A batch's or load level's figures, as lines for a person.
pub(super) fn load_table(r: &LoadReport) -> String {
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
            "TTFT p50 {} ms, p99 {} ms{}; inter-token p50 {} ms, p99 {} ms",
            fmt(r.ttft_ms_p50, 1),
            fmt(r.ttft_ms_p99, 1),
            if r.requests_failed > 0 {
                format!(
                    " (of {} requests, {} failed: counted as never)",
                    r.requests, r.requests_failed
                )
            } else {
                String::new()
            },
            fmt(r.itl_ms_p50, 2),
            fmt(r.itl_ms_p99, 2)
        ),
    ]
    .join("\n")
}

/// The lines above a load test's table: its conditions (`batch` says who batches), the warm-up,
/// the objectives, and the columns.
pub(super) fn print_level_header(report: &LoadReport, batch: &str, warm_up_ms: f64) {
    let c = &report.conditions;
    println!(
        "conditions: {}, {} arrival, up to {} tokens a user, {}, {batch}",
        c.source.describe(),
        c.arrival,
        c.max_tokens,
        c.sampling.describe(false),
    );
    if let Source::Endpoint(e) = &c.source {
        println!(
            "{}; inter-token latency shares a chunk's gap among its tokens",
            e.token_counts.describe()
        );
    }
    println!("warm-up (apart): {warm_up_ms:.1} ms; each level after an untimed run");
    if let Some(slo) = c.slo {
        println!(
            "goodput: requests a second meeting {slo} (TPOT as vLLM's: after the first token)"
        );
    }
    let mut columns = format!(
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
    if c.slo.is_some() {
        columns.push_str(&format!(" {:>9} {:>7}", "goodput/s", "good %"));
    }
    if matches!(c.source, Source::Endpoint(_)) {
        columns.push_str(&format!(" {:>8} {:>12}", "failed", "server tok/s"));
    }
    println!("{columns}");
}

/// One level's row of the load test's table.
pub(super) fn print_level_row(report: &LoadReport) {
    let reading = report
        .per_user_words_per_s_p50
        .map(|w| w / (report.reading_wpm / 60.0));
    let mut row = format!(
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
    if let Some(g) = &report.goodput {
        row.push_str(&format!(
            " {:>9} {:>7}",
            fmt(g.requests_per_s, 2),
            format!("{:.0}", g.share * 100.0)
        ));
    }
    if matches!(report.conditions.source, Source::Endpoint(_)) {
        let failed = report.requests - report.requests_completed;
        row.push_str(&format!(
            " {:>8} {:>12}",
            format!("{failed}/{}", report.requests),
            fmt(report.server_tps_p50, 1)
        ));
    }
    println!("{row}");
    for (why, n) in &report.failures {
        println!("      {n} failed: {why}");
    }
    if report.requests_failed > 0 {
        println!(
            "      TTFT's percentiles count the {} failed as never (inf)",
            report.requests_failed
        );
    }
}

/// A load test's settings.
pub(super) struct Load {
    pub levels: Vec<usize>,
    pub arrival: Arrival,
    pub max_batch: Option<usize>,
    pub step_tokens: usize,
    pub prompts: Vec<String>,
    pub max_tokens: usize,
    pub slo: Option<Slo>,
    /// Prompts in the model's chat template (false: as they are).
    pub chat: bool,
    /// The CPU engine's threads, at which the memory's read bandwidth is measured.
    pub threads: usize,
}

/// One load test level: `users` users, greedy, arriving as `load.arrival` says.
async fn load_level(
    engine: &Engine,
    load: &Load,
    users: usize,
    max_tokens: usize,
    warm_up_ms: Option<f64>,
) -> Result<LoadLevel, Error> {
    let mut level = LoadLevel::start(
        engine,
        &Level {
            users,
            arrival: load.arrival,
            max_batch: load.max_batch.unwrap_or(users),
            step_tokens: load.step_tokens,
            prompts: load.prompts.clone(),
            options: GenerateOptions {
                max_tokens,
                chat: load.chat,
                ..Default::default()
            },
            reading_wpm: DEFAULT_READING_WPM,
            warm_up_ms,
            slo: load.slo,
        },
    )?;
    level.run_to_end(engine, &mut |_, _| {}).await?;
    Ok(level)
}

/// `bench --concurrency`: one row per level, each after an untimed short run of the same batch
/// sizes (on wgpu, every new shape compiles its kernels the first time).
pub(super) async fn bench_concurrency(
    engine: &Engine,
    load: &Load,
    json: bool,
) -> Result<(), Error> {
    let warm_up_ms = engine.warm_up().await?;
    // The memory's read bandwidth at the engine's threads (CPU), measured once before the levels:
    // each level's bandwidth ceiling at its batch.
    let read = match engine.info.backend {
        crate::BackendKind::Cpu => super::ceilings::cpu_read_gb_per_s(load.threads),
        _ => None,
    };
    let mut reports = Vec::with_capacity(load.levels.len());
    for (i, &users) in load.levels.iter().enumerate() {
        load_level(engine, load, users, 2, None).await?;
        let mut level = load_level(engine, load, users, load.max_tokens, Some(warm_up_ms)).await?;
        level.measure_ceiling(engine);
        if let Some(gb_per_s) = read {
            level.read_bandwidth(gb_per_s, engine);
        }
        let report = level.report();
        if !json {
            if i == 0 {
                let limit = load
                    .max_batch
                    .map_or_else(|| "= users".to_string(), |n| n.to_string());
                let budget = format!(
                    "batch limit {limit}, at most {} prompt tokens a step",
                    load.step_tokens
                );
                print_level_header(&report, &budget, warm_up_ms);
            }
            print_level_row(&report);
        }
        reports.push(report);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&reports).unwrap());
        return Ok(());
    }
    if let Some(gb_per_s) = read {
        println!(
            "bandwidth ceiling at each level's batch (the memory read at {gb_per_s:.1} GB/s, {} \
             threads, before the levels; a step reads the weights once for its batch):",
            load.threads
        );
        for r in &reports {
            if let Some(c) = &r.bandwidth_ceiling {
                println!("{:>5} users: {}", r.users, c.sentence);
            }
        }
    }
    if reports.iter().any(|r| r.products_alone.is_some()) {
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
