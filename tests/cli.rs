//! The command line, run as a user would: bad input gives one line and exit code 2, and a real run's
//! JSON report agrees with its own token timestamps.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::process::{Command, Output};

use common::*;

fn tokenometer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tokenometer"))
        .args(args)
        .output()
        .expect("runs")
}

fn model() -> String {
    stories260k("stories260K.bin").display().to_string()
}

fn tok512() -> String {
    stories260k("tok512.bin").display().to_string()
}

/// Exit code 2, one line on stderr containing `expected`, and no panic.
fn assert_refused(output: Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains(expected), "{expected:?} not in {stderr}");
}

fn scratch(name: &str, bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("tokenometer-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

/// A successful run's stdout (else the test fails with its stderr).
fn succeeded(output: Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// One JSON value per line.
fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn generate(model: &str, tokenizer: &str, prompt: &str, extra: &[&str]) -> Output {
    let args = generate_args(model, tokenizer, prompt, extra);
    tokenometer(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn missing_file() {
    assert_refused(
        generate("/nonexistent/model.bin", &tok512(), "Hi", &[]),
        "cannot read file",
    );
}

#[test]
fn truncated_model() {
    let bytes = read(stories260k("stories260K.bin"));
    let truncated = scratch("truncated.bin", &bytes[..bytes.len() / 2]);
    assert_refused(generate(&truncated, &tok512(), "Hi", &[]), "truncated");
}

#[test]
fn foreign_file_as_model() {
    let foreign = llama2_tokenizer("tokenizer.json").display().to_string();
    assert_refused(generate(&foreign, &tok512(), "Hi", &[]), "bad model file");
}

#[test]
fn absurd_header() {
    let mut bytes = read(stories260k("stories260K.bin"));
    bytes[0..4].copy_from_slice(&(1i32 << 30).to_le_bytes());
    let absurd = scratch("absurd.bin", &bytes);
    assert_refused(generate(&absurd, &tok512(), "Hi", &[]), "dim = 1073741824");
}

#[test]
fn tokenizer_of_another_model() {
    let other = llama2_tokenizer("tokenizer.bin").display().to_string();
    assert_refused(
        generate(&model(), &other, "Hi", &[]),
        "do not belong together",
    );
}

#[test]
fn empty_prompt() {
    assert_refused(
        generate(&model(), &tok512(), "  ", &[]),
        "the prompt is empty",
    );
}

#[test]
fn prompt_longer_than_the_context() {
    let long = "the cat sat on the mat ".repeat(200);
    assert_refused(
        generate(&model(), &tok512(), &long, &[]),
        "the context holds 512",
    );
}

#[test]
fn a_gguf_needs_no_tokenizer_file() {
    let model = stories260k("stories260K-q8_0.gguf").display().to_string();
    let output = tokenometer(&[
        "generate",
        "--model",
        &model,
        "--prompt",
        "Once upon a time",
        "--quant",
        "q8",
        "--backend",
        "cpu",
        "--max-tokens",
        "12",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.starts_with("Once upon a time, there was a little girl"),
        "{stdout}"
    );
    assert!(
        stderr.contains("GGUF tensors at q8: 32 Q8_0 (used as they are), 16 F32"),
        "{stderr}"
    );
}

#[test]
fn q4_runs_on_the_cpu_backend() {
    let output = generate(
        &model(),
        &tok512(),
        "Once upon a time",
        &["--quant", "q4", "--backend", "cpu", "--max-tokens", "20"],
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.starts_with("Once upon a time, "), "{stdout}");
    assert!(
        stderr.contains("q4") && stderr.contains("on cpu [CPU ("),
        "{stderr}"
    );
}

/// `--cpu-kernels` runs the CPU backend with the instruction set asked for, says so in the
/// conditions, and every set this machine runs writes the same greedy text (q8's block sums are
/// exact integers whatever the set).
#[test]
fn cpu_kernels_choose_the_instruction_set() {
    let mut texts = Vec::new();
    for isa in tokenometer::cpu::Isa::available() {
        let key = isa.key();
        let output = generate(
            &model(),
            &tok512(),
            "Once upon a time",
            &["--quant", "q8", "--max-tokens", "40", "--cpu-kernels", key],
        );
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        let text = succeeded(output);
        assert!(
            stderr.contains(&format!("on cpu [CPU ({})", isa.name())),
            "{key}: {stderr}"
        );
        texts.push((key, text));
    }
    assert!(texts[0].0 == "scalar", "the scalar kernels always run");
    for (key, text) in &texts[1..] {
        assert_eq!(text, &texts[0].1, "{key} against scalar");
    }
    assert_refused(
        generate(&model(), &tok512(), "Hi", &["--cpu-kernels", "neon"]),
        "this CPU's kernels come in scalar",
    );
    assert_refused(
        generate(
            &model(),
            &tok512(),
            "Hi",
            &["--backend", "wgpu", "--cpu-kernels", "scalar"],
        ),
        "it needs --backend cpu",
    );
}

/// `--threads N` splits the CPU's work over N threads, says so in the conditions, and writes the
/// text one thread writes; 0 is refused in a sentence.
#[test]
fn threads_split_the_work_and_keep_the_text() {
    let run = |threads: &str| {
        let output = generate(
            &model(),
            &tok512(),
            "Once upon a time",
            &["--quant", "q4", "--max-tokens", "40", "--threads", threads],
        );
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        (succeeded(output), stderr)
    };
    let (one, one_stderr) = run("1");
    let (three, three_stderr) = run("3");
    assert_eq!(three, one);
    assert!(!one_stderr.contains("threads]"), "{one_stderr}");
    assert!(three_stderr.contains("), 3 threads]"), "{three_stderr}");
    assert_refused(
        generate(&model(), &tok512(), "Hi", &["--threads", "0"]),
        "--threads must be at least 1",
    );
    // Thousands of spinning threads took a minute to fail; now a bound is said at once.
    let start = std::time::Instant::now();
    assert_refused(
        generate(&model(), &tok512(), "Hi", &["--threads", "100000"]),
        "logical cores; use at most",
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn bad_options() {
    assert_refused(
        generate(&model(), &tok512(), "Hi", &["--temperature=-1"]),
        "temperature",
    );
    assert_refused(
        generate(&model(), &tok512(), "Hi", &["--quant", "q3"]),
        "choose stored, f32, q8 or q4",
    );
}

#[test]
fn generate_streams_the_reference_text() {
    let output = generate(
        &model(),
        &tok512(),
        "Once upon a time",
        &["--max-tokens", "252"],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8(output.stdout).unwrap().trim_end(),
        reference_text()
    );
    let stderr = String::from_utf8(output.stderr).unwrap();
    for figure in [
        "conditions: stories260K",
        "TTFT",
        "decode",
        "x reading speed",
        "GB/s",
    ] {
        assert!(stderr.contains(figure), "{figure} missing: {stderr}");
    }
}

#[test]
fn json_report_is_consistent_with_its_events() {
    let output = generate(
        &model(),
        &tok512(),
        "Once upon a time",
        &["--max-tokens", "40", "--json"],
    );
    let lines = json_lines(&succeeded(output));
    assert_eq!(lines[0]["event"], "prefill");
    let tokens: Vec<&serde_json::Value> = lines.iter().filter(|l| l["event"] == "token").collect();
    assert_eq!(tokens.len(), 40);
    let done = lines.last().unwrap();
    assert_eq!(done["event"], "done");
    assert_eq!(done["reason"], "max_tokens");
    let report = &done["report"];
    let times: Vec<f64> = tokens.iter().map(|t| t["t_ms"].as_f64().unwrap()).collect();
    let recomputed = 39.0 / (times[39] - times[0]) * 1e3;
    let reported = report["decode_tps"].as_f64().unwrap();
    assert!(
        (recomputed - reported).abs() / reported < 1e-9,
        "{recomputed} vs {reported}"
    );
    assert_eq!(report["ttft_ms"].as_f64().unwrap(), times[0]);
    assert_eq!(report["conditions"]["output_tokens"], 40);
    assert_eq!(report["conditions"]["prompt_tokens"], 5);
    assert_eq!(report["conditions"]["model"], "stories260K");
    // A llama2.c file as stored: f32, the default.
    assert_eq!(report["conditions"]["quant"], "stored");
    assert_eq!(report["conditions"]["backend"], "cpu");
    assert_eq!(report["conditions"]["stop_reason"], "max_tokens");
    assert!(report["conditions"]["warm_up_ms"].as_f64().unwrap() > 0.0);
    let text: String = tokens.iter().map(|t| t["text"].as_str().unwrap()).collect();
    let words = tokenometer::meter::count_words(&text);
    assert_eq!(report["words"], words);
    let gbps = report["conditions"]["bytes_per_token"].as_f64().unwrap() * reported / 1e9;
    assert!((report["effective_gb_per_s"].as_f64().unwrap() - gbps).abs() < 1e-9);
    let prefill = &lines[0];
    let ttft = prefill["queued_ms"].as_f64().unwrap()
        + prefill["tokenize_ms"].as_f64().unwrap()
        + prefill["prefill_ms"].as_f64().unwrap();
    assert!(
        (report["ttft_ms"].as_f64().unwrap() - ttft).abs() < 0.01,
        "TTFT is queue + tokenize + prefill"
    );
}

#[test]
fn synth_writes_a_loadable_checkpoint_and_bench_prints_a_table() {
    // stories15M's shape at full size is 61 MB; the bench runs a few tokens of it.
    let dir = std::env::temp_dir().join(format!("tokenometer-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("s15.bin");
    let output = tokenometer(&[
        "synth",
        "--shape",
        "stories15M",
        "--out",
        out.to_str().unwrap(),
        "--seed",
        "3",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        std::fs::metadata(&out).unwrap().len(),
        60_816_028,
        "run.c's stories15M.bin size"
    );
    let tokenizer = llama2_tokenizer("tokenizer.bin").display().to_string();
    let output = tokenometer(&[
        "bench",
        "--model",
        out.to_str().unwrap(),
        "--tokenizer",
        &tokenizer,
        "--runs",
        "2",
        "--max-tokens",
        "8",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for row in [
        "conditions: s15 (llama 15.2M params, stored",
        "TTFT ms",
        "prefill tok/s",
        "decode tok/s",
        "words/s",
        "GB/s",
        "median",
        "bandwidth ceiling (memory read by",
        "MB a token (weights 60.8 MB, keys and values",
    ] {
        assert!(stdout.contains(row), "{row:?} missing:\n{stdout}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bench` on the CPU measures the memory's read bandwidth and puts each run against the ceiling
/// it allows (the meter's figure): a token's bytes are the weights as held plus the keys and
/// values at the run's mean depth, and the ceiling moves the right way with the quantization
/// (q4 reads fewer bytes a token than f32, so its ceiling is higher, on one file).
#[test]
fn bench_puts_decode_against_the_bandwidth_ceiling() {
    let ceiling = |quant: &str| {
        let output = tokenometer(&[
            "bench",
            "--model",
            &model(),
            "--tokenizer",
            &tok512(),
            "--quant",
            quant,
            "--runs",
            "1",
            "--max-tokens",
            "16",
            "--threads",
            "1",
            "--json",
        ]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let runs: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        runs[0]["bandwidth_ceiling"].clone()
    };
    let (f32, q4) = (ceiling("f32"), ceiling("q4"));
    for c in [&f32, &q4] {
        let gbps = c["read_gb_per_s"].as_f64().unwrap();
        let bytes = c["weight_bytes"].as_f64().unwrap() + c["kv_bytes"].as_f64().unwrap();
        let tps = c["tps"].as_f64().unwrap();
        assert!(gbps > 0.1 && c["kv_bytes"].as_u64().unwrap() > 0, "{c}");
        assert!((tps - gbps * 1e9 / bytes).abs() < 1e-6 * tps, "{c}");
        assert!(c["share"].as_f64().unwrap() > 0.0, "{c}");
    }
    assert!(q4["weight_bytes"].as_u64() < f32["weight_bytes"].as_u64());
    // f32 reads over 5 times q4's bytes: no noise in the two bandwidths bridges that.
    assert!(
        q4["tps"].as_f64() > f32["tps"].as_f64(),
        "{q4} against {f32}"
    );
}

#[test]
fn generate_with_a_prompts_file_runs_one_batch_with_events_per_sequence() {
    let prompts = scratch(
        "prompts.txt",
        b"Once upon a time\nLily and Ben went to the park\n\nThe little red car\n",
    );
    let output = tokenometer(&[
        "generate",
        "--model",
        &model(),
        "--tokenizer",
        &tok512(),
        "--prompts",
        &prompts,
        "--max-tokens",
        "30",
        "--json",
    ]);
    let lines = json_lines(&succeeded(output));
    let last = lines.last().unwrap();
    assert_eq!(last["event"], "batch_done");
    for seq in 0..3 {
        let mine: Vec<_> = lines.iter().filter(|l| l["seq"] == seq).collect();
        assert_eq!(mine[0]["event"], "prefill", "sequence {seq}");
        assert_eq!(mine.iter().filter(|l| l["event"] == "token").count(), 30);
        let done = mine.last().unwrap();
        assert_eq!(done["event"], "done");
        assert_eq!(done["report"]["conditions"]["batch_size"], 3);
        assert!(done["report"]["decode_tps"].as_f64().unwrap() > 0.0);
    }
    // Sequence 0 is the reference prompt: its greedy text is run.c's, batched or not.
    let text: String = lines
        .iter()
        .filter(|l| l["seq"] == 0 && l["event"] == "token")
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert!(reference_text().starts_with(&format!("Once upon a time{text}")));
    let report = &last["report"];
    assert_eq!(report["users"], 3);
    assert_eq!(report["requests_completed"], 3);
    assert_eq!(report["output_tokens"], 90);
    let aggregate = report["aggregate_tps"].as_f64().unwrap();
    assert!(aggregate >= report["per_user_tps_p50"].as_f64().unwrap());
    assert_eq!(report["conditions"]["model"], "stories260K");
}

/// `bench` on a GPU (lavapipe here: Vulkan on the CPU) ends with the GPU's ceilings, measured
/// after its runs: a read kernel's bandwidth against the bytes a token reads, and the dispatch
/// floor, the dispatches a token took at what one costs. With `--profile`, each decode step's
/// phases from the device's timestamps (lavapipe has `timestamp-query`): every kind of dispatch
/// timed, inside the step, and sampling the pick's dispatch, not the host's wait for the step;
/// one decode step in 8 timed.
#[test]
fn bench_on_a_gpu_puts_decode_against_its_bandwidth_and_its_dispatches() {
    let model = stories260k("stories260K-q8_0.gguf").display().to_string();
    let bench = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--model",
            &model,
            "--backend",
            "wgpu",
            "--runs",
            "1",
        ];
        args.extend_from_slice(&["--max-tokens", "16"]);
        args.extend_from_slice(extra);
        succeeded(tokenometer(&args))
    };
    let runs: serde_json::Value = serde_json::from_str(&bench(&["--json", "--profile"])).unwrap();
    let phases = &runs[0]["phases"];
    // A GPU times one decode step in 8 (timing its dispatches slows the step): 2 of 15.
    assert_eq!(phases["steps"].as_u64(), Some(2), "{phases}");
    let ms = |w: &serde_json::Value, k: &str| w[k].as_f64().unwrap_or_else(|| panic!("{k}: {w}"));
    for w in phases["windows"].as_array().unwrap() {
        let step = ms(w, "step_ms");
        for kind in [
            "projections_ms",
            "attention_ms",
            "classifier_ms",
            "sampling_ms",
        ] {
            assert!(ms(w, kind) > 0.0, "every kind of dispatch timed: {w}");
        }
        assert_eq!(ms(w, "norms_ms"), 0.0, "inside the others on a GPU: {w}");
        let parts: f64 = [
            "projections_ms",
            "attention_ms",
            "classifier_ms",
            "sampling_ms",
        ]
        .iter()
        .map(|k| ms(w, k))
        .sum();
        assert!(parts <= step, "the device's parts inside the step: {w}");
        assert!(
            ms(w, "sampling_ms") < 0.25 * step,
            "sampling is the pick, not the wait for the step: {w}"
        );
    }
    let (ceiling, floor) = (&runs[0]["bandwidth_ceiling"], &runs[0]["dispatch_floor"]);
    assert!(
        ceiling["read_gb_per_s"].as_f64().unwrap() > 0.01,
        "{ceiling}"
    );
    let per_token = floor["dispatches_per_token"].as_f64().unwrap();
    let us = floor["dispatch_us"].as_f64().unwrap();
    // stories260K's decode step: 4 dispatches a layer and 2 more (gpu/ops.rs), 5 layers.
    assert!((22.0..24.0).contains(&per_token), "{floor}");
    assert!(us > 0.0, "{floor}");
    let tps = floor["tps"].as_f64().unwrap();
    assert!((tps - 1e6 / (per_token * us)).abs() < 1e-6 * tps, "{floor}");
    let text = bench(&["--profile"]);
    assert!(
        text.contains("GPU bandwidth ceiling (a read kernel over 128 MiB, best of 3): reading"),
        "{text}"
    );
    assert!(text.contains("GPU dispatch floor ("), "{text}");
    assert!(
        text.contains("where a decode step's time goes (the device's timestamps"),
        "{text}"
    );
}

/// `bench --profile`: each decode step timed by phase by the engine's own timers, the timed
/// parts inside each step, a step for every token after the first, and the table's parts coming
/// to the gap between tokens.
#[test]
fn bench_profile_says_where_a_decode_step_goes() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--model",
            &model(),
            "--tokenizer",
            &tok512(),
            "--runs",
            "2",
            "--max-tokens",
            "40",
            "--threads",
            "1",
            "--profile",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        succeeded(tokenometer(&args))
    };
    let runs: serde_json::Value = serde_json::from_str(&run(&["--json"])).unwrap();
    for r in runs.as_array().unwrap() {
        let p = &r["phases"];
        let output = r["conditions"]["output_tokens"].as_u64().unwrap();
        assert_eq!(p["steps"].as_u64(), Some(output - 1), "{p}");
        for w in p["windows"].as_array().unwrap() {
            let parts: f64 = [
                "projections_ms",
                "attention_ms",
                "norms_ms",
                "classifier_ms",
                "sampling_ms",
            ]
            .iter()
            .map(|k| w[k].as_f64().unwrap())
            .sum();
            let step = w["step_ms"].as_f64().unwrap();
            assert!(parts > 0.0 && parts <= step * 1.000_001, "{w}");
        }
        assert!(
            p["prefill"]["projections_ms"].as_f64().unwrap() > 0.0,
            "{p}"
        );
    }
    let table = run(&[]);
    let ms = |name: &str| -> f64 {
        let line = table
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row in:\n{table}"));
        line[name.len() + 2..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let parts = [
        "projections",
        "attention",
        "norms and activations",
        "classifier",
        "sampling",
    ]
    .iter()
    .map(|n| ms(n))
    .sum::<f64>()
        + ms("the engine's other work")
        + ms("between steps");
    let gap = ms("the gap between tokens");
    assert!(
        (parts - gap).abs() <= 0.1 * gap,
        "{parts} against {gap}:\n{table}"
    );
    assert_refused(
        tokenometer(&[
            "bench",
            "--model",
            &model(),
            "--tokenizer",
            &tok512(),
            "--profile",
            "--concurrency",
            "2",
        ]),
        "cannot be used with",
    );
}

#[test]
fn bench_with_concurrency_prints_one_json_object_per_level() {
    let output = tokenometer(&[
        "bench",
        "--model",
        &model(),
        "--tokenizer",
        &tok512(),
        "--concurrency",
        "1,2,4",
        "--max-tokens",
        "12",
        "--json",
    ]);
    let levels: Vec<serde_json::Value> = serde_json::from_str(&succeeded(output)).unwrap();
    assert_eq!(levels.len(), 3);
    for (level, users) in levels.iter().zip([1, 2, 4]) {
        assert_eq!(level["users"], users);
        for key in [
            "aggregate_tps",
            "per_user_tps_p50",
            "per_user_tps_min",
            "ttft_ms_p50",
            "ttft_ms_p99",
            "itl_ms_p99",
            "wall_ms",
        ] {
            assert!(level[key].as_f64().unwrap() > 0.0, "{key} at {users} users");
        }
        assert_eq!(level["conditions"]["users"], users);
        assert_eq!(level["conditions"]["arrival"], "burst");
        assert_eq!(level["conditions"]["quant"], "stored");
        // The ceiling: the step's products alone at this many rows.
        let products = &level["products_alone"];
        assert_eq!(products["rows"], users);
        for key in ["ms_p50", "tps", "gb_per_s", "gmac_per_s"] {
            assert!(
                products[key].as_f64().unwrap() > 0.0,
                "{key} at {users} users"
            );
        }
    }
    // The memory-bandwidth ceiling at each level's batch: a step reads the weights once for all
    // its users, so a token reads a share of them; the same bandwidth, measured once.
    let ceilings: Vec<&serde_json::Value> =
        levels.iter().map(|l| &l["bandwidth_ceiling"]).collect();
    let field =
        |c: &serde_json::Value, k: &str| c[k].as_f64().unwrap_or_else(|| panic!("{k}: {c}"));
    for (c, batch) in ceilings.iter().zip([1, 2, 4]) {
        assert_eq!(c["batch"], batch, "{c}");
        let token = field(c, "weight_bytes") / batch as f64 + field(c, "kv_bytes");
        let tps = field(c, "read_gb_per_s") * 1e9 / token;
        assert!((field(c, "tps") - tps).abs() < 1e-6 * tps, "{c}");
    }
    assert!(
        ceilings
            .windows(2)
            .all(|w| field(w[1], "tps") > field(w[0], "tps")),
        "the ceiling rises with the batch: {ceilings:?}"
    );
    assert_eq!(
        field(ceilings[0], "read_gb_per_s"),
        field(ceilings[2], "read_gb_per_s")
    );
    // The human table, with a Poisson arrival and a batch limit below the users.
    let output = tokenometer(&[
        "bench",
        "--model",
        &model(),
        "--tokenizer",
        &tok512(),
        "--concurrency",
        "4",
        "--arrival",
        "poisson:200",
        "--max-batch",
        "2",
        "--max-tokens",
        "8",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("poisson:200 arrival"), "{stdout}");
    assert!(stdout.contains("batch limit 2"), "{stdout}");
    assert!(stdout.contains("aggr tok/s"), "{stdout}");
    // The ceiling at the batch limit's 2 rows, not the 4 users.
    assert!(stdout.contains("ceiling tok/s"), "{stdout}");
    assert!(stdout.contains("    2 rows: "), "{stdout}");
    // 1e-300 a second was an infinite sleep (a panic); tiny rates, sleeps of years.
    for (rate, says) in [
        ("poisson:-1", "use burst (all users at once), poisson:RATE"),
        ("poisson:1e-300", "would leave users hours apart"),
        ("poisson:0.0001", "would leave users hours apart"),
    ] {
        assert_refused(
            tokenometer(&[
                "bench",
                "--model",
                &model(),
                "--tokenizer",
                &tok512(),
                "--concurrency",
                "2",
                "--arrival",
                rate,
            ]),
            says,
        );
    }
}

/// `synth --vocab` writes a GGUF with a vocabulary's tokenizer inside; `generate` then runs it with
/// no tokenizer file, wrapping the prompt in the chat template the vocabulary carries (or not, with
/// `--raw`), and the report says which.
#[test]
fn synth_writes_a_smollm2_shaped_gguf_that_chats() {
    let mut vocab = Vec::new();
    tokenometer::loading::gguf_writer::write(
        &vocab_copies::smollm2_like(byte_level_vocab("starcoder")),
        &[],
        None,
        &mut vocab,
    )
    .unwrap();
    let vocab = scratch("smollm2-vocab.gguf", &vocab);
    let out = scratch("smollm2-1layer.gguf", b"");
    let synth = |extra: &[&str]| {
        let args = [
            &[
                "synth",
                "--shape",
                "smollm2-135M",
                "--layers",
                "1",
                "--out",
                &out,
            ][..],
            extra,
        ]
        .concat();
        tokenometer(&args)
    };
    // A GGUF must carry a tokenizer, and a vocabulary must fit the shape.
    assert_refused(synth(&[]), "give --vocab");
    let gpt2_vocab = {
        let mut bytes = Vec::new();
        let gpt2: Vec<_> = byte_level_vocab("gpt-2").metadata.into_iter().collect();
        tokenometer::loading::gguf_writer::write(&gpt2, &[], None, &mut bytes).unwrap();
        scratch("gpt2-vocab.gguf", &bytes)
    };
    assert_refused(
        synth(&["--vocab", &gpt2_vocab]),
        "holds 50257 tokens but SmolLM2-135M has a vocabulary of 49152",
    );
    succeeded(synth(&["--vocab", &vocab, "--q8"]));

    let run = |extra: &[&str]| {
        let args = [
            &[
                "generate",
                "--model",
                &out,
                "--quant",
                "q8",
                "--prompt",
                "Hi",
                "--max-tokens",
                "3",
                "--json",
            ][..],
            extra,
        ]
        .concat();
        let lines = json_lines(&succeeded(tokenometer(&args)));
        lines.last().unwrap()["report"]["conditions"].clone()
    };
    let chat = run(&[]);
    assert_eq!(chat["prompt_template"], "ChatML");
    assert_eq!(chat["chat_template"], "ChatML");
    assert_eq!(chat["vocab_size"], 49152);
    assert_eq!(chat["output_tokens"], 3);
    let raw = run(&["--raw"]);
    assert!(raw.get("prompt_template").is_none(), "{raw}");
    // "Hi" alone is one token; its turn, the template's system turn and the assistant's start
    // are the rest.
    assert_eq!(raw["prompt_tokens"], 1);
    assert!(chat["prompt_tokens"].as_u64().unwrap() > 20, "{chat}");
}

/// A file whose chat template tokenometer does not follow (here an Alpaca-style one) gets its
/// prompts as they are, and says so: the template named in the conditions, a warning on stderr
/// with how to pick one, and `serve`'s refusal of messages; `--chat-template` picks one the
/// vocabulary can write, and refuses one it cannot.
#[test]
fn a_chat_template_not_followed_is_named_and_another_can_be_picked() {
    let alpaca =
        "{% for m in messages %}### {{ m.role }}:\n{{ m.content }}\n{% endfor %}### Response:";
    let mut metadata = vocab_copies::smollm2_like(byte_level_vocab("starcoder"));
    for (key, value) in &mut metadata {
        if key == "tokenizer.chat_template" {
            *value = tokenometer::loading::gguf::Value::Str(alpaca.into());
        }
    }
    let mut vocab = Vec::new();
    tokenometer::loading::gguf_writer::write(&metadata, &[], None, &mut vocab).unwrap();
    let vocab = scratch("alpaca-vocab.gguf", &vocab);
    let out = scratch("alpaca-1layer.gguf", b"");
    succeeded(tokenometer(&[
        "synth",
        "--shape",
        "smollm2-135M",
        "--layers",
        "1",
        "--q8",
        "--vocab",
        &vocab,
        "--out",
        &out,
    ]));
    let run = |extra: &[&str]| {
        let args = [
            &[
                "generate",
                "--model",
                &out,
                "--prompt",
                "Hi",
                "--max-tokens",
                "2",
                "--json",
            ][..],
            extra,
        ]
        .concat();
        let output = tokenometer(&args);
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        let lines = json_lines(&succeeded(output));
        (
            lines.last().unwrap()["report"]["conditions"].clone(),
            stderr,
        )
    };
    let (plain, stderr) = run(&[]);
    let named = "\"{% for m in messages %}### {{ m.role }}: {{ m.co…\" (82 characters)";
    assert_eq!(plain["unrecognized_chat_template"], named, "{plain}");
    assert!(plain.get("prompt_template").is_none(), "{plain}");
    assert_eq!(plain["prompt_tokens"], 1, "the prompt as it is: {plain}");
    assert!(
        stderr.contains(&format!(
            "warning: alpaca-1layer's chat template {named} is not one tokenometer \
             follows, so chat prompts go to it as they are; --chat-template (chatml, gemma or \
             llama3) wraps them in one of those"
        )),
        "{stderr}"
    );
    let (raw, stderr) = run(&["--raw"]);
    assert!(
        !stderr.contains("warning"),
        "--raw asks for the prompt as it is: {stderr}"
    );
    assert_eq!(raw["prompt_tokens"], 1);
    let (chatml, stderr) = run(&["--chat-template", "chatml"]);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert_eq!(chatml["prompt_template"], "ChatML");
    assert!(
        chatml.get("unrecognized_chat_template").is_none(),
        "{chatml}"
    );
    // `<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n`
    assert!(chatml["prompt_tokens"].as_u64().unwrap() > 5, "{chatml}");
    let generate = |template: &str| {
        tokenometer(&[
            "generate",
            "--model",
            &out,
            "--prompt",
            "Hi",
            "--chat-template",
            template,
        ])
    };
    assert_refused(
        generate("llama3"),
        "the Llama 3 chat template needs <|start_header_id|> as one token, and this model's \
         vocabulary has no such token",
    );
    assert_refused(
        generate("alpaca"),
        "\"alpaca\" is not a chat template tokenometer follows: use chatml, gemma or llama3",
    );
    // `serve` says the same at start and refuses messages in words that say what to do.
    let server = common::serve::Server::start(&["--model", &out]);
    let (status, body) = server.post(
        "/v1/chat/completions",
        &serde_json::json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
    );
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "chat template {named} is not one tokenometer follows, so it \
             cannot take messages: send a raw prompt to /v1/completions, or start the server with \
             --chat-template (chatml, gemma or llama3)"
        )),
        "{message}"
    );
}

/// An explicit `--backend wgpu` is checked against the CPU at load, as the page and `auto` check
/// a GPU, and the conditions say what it found; `--no-check` skips it and says so, and means
/// nothing without `--backend wgpu`. (A GPU that disagrees: tests/engine.rs.)
#[test]
fn an_explicit_gpu_is_checked_against_the_cpu_at_load() {
    let run = |extra: &[&str]| {
        let mut args = generate_args(&model(), &tok512(), "Once upon a time", &["--json"]);
        args.extend(
            ["--max-tokens", "4", "--backend", "wgpu"]
                .iter()
                .chain(extra)
                .map(|s| s.to_string()),
        );
        let output = Command::new(env!("CARGO_BIN_EXE_tokenometer"))
            .args(&args)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let lines = json_lines(&succeeded(output));
        (
            lines.last().unwrap()["report"]["conditions"].clone(),
            stderr,
        )
    };
    let (checked, stderr) = run(&[]);
    let note = checked["backend_note"].as_str().unwrap_or_default();
    assert!(note.starts_with("GPU check passed: argmax "), "{checked}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let (unchecked, _) = run(&["--no-check"]);
    assert_eq!(
        unchecked["backend_note"],
        "not checked against the CPU (--no-check)"
    );
    assert_refused(
        tokenometer(&[
            "generate",
            "--model",
            &model(),
            "--tokenizer",
            &tok512(),
            "--prompt",
            "Hi",
            "--no-check",
        ]),
        "--no-check skips the check of --backend wgpu against the CPU: add --backend wgpu or drop \
         --no-check",
    );
}

/// `--speculate lookup` and `--speculate draft:PATH:QUANT` write plain decoding's text, say so in
/// the conditions and report their drafts; bad settings are refused in one line.
#[test]
fn speculate_keeps_the_text_and_reports_its_drafts() {
    let prompt = "Lily and Ben went to the park. Lily and Ben went to the park. Lily and Ben";
    let run = |extra: &[&str]| {
        let args = [&["--max-tokens", "100"][..], extra].concat();
        let output = generate(&model(), &tok512(), prompt, &args);
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        (succeeded(output), stderr)
    };
    let (plain, plain_stderr) = run(&[]);
    assert!(!plain_stderr.contains("speculati"), "{plain_stderr}");
    let (lookup, stderr) = run(&["--speculate", "lookup"]);
    assert_eq!(lookup, plain);
    assert!(
        stderr.contains("; speculative: prompt lookup (n-grams up to 3, drafts up to 8, as measured costs favour)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("speculation: ") && stderr.contains("drafts kept"),
        "{stderr}"
    );
    // With --logprobs each token, kept drafts too, gets its line (on stderr), as in a plain run.
    let (probed, probed_stderr) = run(&["--speculate", "lookup", "--logprobs", "2"]);
    let (_, plain_stderr) = run(&["--logprobs", "2"]);
    let table = |stderr: &str| {
        let (_, table) = stderr.split_once("log probabilities (").expect("the table");
        table.lines().take_while(|l| !l.is_empty()).count()
    };
    assert_eq!(probed, plain);
    assert_eq!(table(&probed_stderr), table(&plain_stderr));
    assert!(table(&probed_stderr) > 90, "{probed_stderr}");
    let draft = format!("draft:{}:q4", model());
    let (drafted, stderr) = run(&["--speculate", &draft, "--draft-max", "4"]);
    assert_eq!(drafted, plain);
    assert!(
        stderr.contains(
            "speculative: draft model stories260K q4 (drafts up to 4, as measured costs favour)"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("draft-model passes"), "{stderr}");
    let (fixed, stderr) = run(&["--speculate", "lookup", "--draft-max", "4", "--draft-fixed"]);
    assert_eq!(fixed, plain);
    assert!(
        stderr.contains("speculative: prompt lookup (n-grams up to 3, 4 drafts a step, fixed)"),
        "{stderr}"
    );

    let bench = tokenometer(&[
        "bench",
        "--model",
        &model(),
        "--tokenizer",
        &tok512(),
        "--runs",
        "1",
        "--max-tokens",
        "40",
        "--prompt",
        prompt,
        "--speculate",
        "lookup",
    ]);
    let table = succeeded(bench);
    for row in ["acceptance %", "kept/verify", "passes/token"] {
        assert!(table.contains(row), "{row}: {table}");
    }

    let refused = |extra: &[&str], expected: &str| {
        assert_refused(generate(&model(), &tok512(), "Hi", extra), expected)
    };
    refused(
        &["--speculate", "maybe"],
        "use lookup or draft:PATH[:QUANT]",
    );
    refused(&["--speculate", "draft:"], "needs the draft model's path");
    refused(
        &["--speculate", "lookup", "--draft-max", "0"],
        "choose 1 to 64 tokens",
    );
    refused(
        &["--speculate", "lookup", "--ngram", "99"],
        "choose 1 to 16 tokens",
    );
    refused(&["--draft-max", "4"], "--speculate");
    refused(&["--draft-fixed"], "--speculate");
    // A draft model must share the model's vocabulary (stories15M's 32,000 tokens, not 512).
    let dir = std::env::temp_dir().join(format!("tokenometer-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let other = dir.join("stories15M-1layer.bin");
    succeeded(tokenometer(&[
        "synth",
        "--shape",
        "stories15M",
        "--layers",
        "1",
        "--out",
        other.to_str().unwrap(),
    ]));
    std::fs::copy(llama2_tokenizer("tokenizer.bin"), dir.join("tokenizer.bin")).unwrap();
    refused(
        &["--speculate", &format!("draft:{}", other.display())],
        "a draft model must share the model's tokenizer",
    );
    // As many tokens (512) but other ones: stories260K beside a word-level tokenizer.json.
    let same_size = dir.join("words");
    std::fs::create_dir_all(&same_size).unwrap();
    std::fs::copy(model(), same_size.join("stories260K.bin")).unwrap();
    let vocab: serde_json::Map<String, serde_json::Value> =
        (0..512u64).map(|i| (format!("w{i}"), i.into())).collect();
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"}
    });
    std::fs::write(same_size.join("tokenizer.json"), json.to_string()).unwrap();
    let draft = same_size.join("stories260K.bin");
    refused(
        &["--speculate", &format!("draft:{}", draft.display())],
        "as many tokens as the model but not the same ones (token 3 is \"w3\" there",
    );
}

/// `score` along run.c's greedy sequence: at every position our choice is the given id, with its
/// log-probability; another id scores lower; and ids outside the vocabulary, or none, are refused.
#[test]
fn score_prints_each_position_s_choice_and_log_probabilities() {
    let (_, sequence) = reference_ids();
    let join = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
    let (prompt, given) = (join(&sequence[..20]), join(&sequence[20..60]));
    let score = |prompt: &str, ids: &str, json: bool| {
        let (model, tok512) = (model(), tok512());
        let mut args = vec![
            "score",
            "--model",
            &model,
            "--tokenizer",
            &tok512,
            "--prompt-ids",
            prompt,
            "--ids",
            ids,
        ];
        if json {
            args.push("--json");
        }
        tokenometer(&args)
    };
    let lines: Vec<serde_json::Value> = succeeded(score(&prompt, &given, true))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 40);
    for (k, line) in lines.iter().enumerate() {
        assert_eq!(line["position"], k);
        assert_eq!(line["id"], sequence[20 + k], "{line}");
        assert_eq!(line["argmax"], line["id"], "greedy's own sequence: {line}");
        assert_eq!(line["logprob"], line["argmax_logprob"]);
        assert!(line["logprob"].as_f64().unwrap() <= 0.0, "{line}");
    }
    // Another id than greedy's at the first position scores below greedy's choice.
    let other = ((sequence[20] + 1) % 512).to_string();
    let out = succeeded(score(&prompt, &other, true));
    let line: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(
        line["logprob"].as_f64() < line["argmax_logprob"].as_f64(),
        "{line}"
    );
    // The table form says how many positions agree.
    let table = succeeded(score(&prompt, &given, false));
    assert!(table.contains("40 of 40 positions"), "{table}");
    assert_refused(
        score("1", "5 512", false),
        "outside the model's vocabulary of 512",
    );
    assert_refused(score("1", "5 -3", false), "\"-3\" is not a token id");
    assert_refused(
        score("1", "", false),
        "give at least one prompt id and one id to score",
    );
}

/// `perplexity` refuses a text too short for two windows and a window out of bounds, each in a
/// sentence that says what to give.
#[test]
fn perplexity_refuses_short_texts_and_absurd_windows() {
    let text = scratch("short.txt", b"Once upon a time, there was a cat.");
    let run = |ctx: &str| {
        tokenometer(&[
            "perplexity",
            "--model",
            &model(),
            "--tokenizer",
            &tok512(),
            "--file",
            &text,
            "--ctx",
            ctx,
        ])
    };
    assert_refused(
        run("64"),
        "needs at least 128 (a longer file, or a smaller --ctx)",
    );
    for ctx in ["0", "4", "100000"] {
        assert_refused(
            run(ctx),
            &format!(
                "--ctx {ctx} is out of range: a perplexity window is 8 to 512 tokens (the model's \
                 context)"
            ),
        );
    }
}

/// Messages a user can act on (issue 73): the number said right, the range given, nothing left
/// to a library's wording; each refused before any work.
#[test]
fn bad_flags_are_refused_in_words_a_user_can_act_on() {
    let perplexity = |file: &str| {
        let (model, tokenizer) = (model(), tok512());
        tokenometer(&[
            "perplexity",
            "--model",
            &model,
            "--tokenizer",
            &tokenizer,
            "--file",
            file,
            "--ctx",
            "8",
        ])
    };
    // One token is "1 token" (an empty text is its BOS).
    assert_refused(
        perplexity(&scratch("one-token.txt", b"")),
        "the text is 1 token; perplexity with --ctx 8 needs at least 16",
    );
    // A text too large for perplexity is refused by its size, before it is read (a sparse file).
    let huge = scratch("huge.txt", b"");
    std::fs::File::options()
        .write(true)
        .open(&huge)
        .and_then(|f| f.set_len(65 << 20))
        .unwrap();
    assert_refused(
        perplexity(&huge),
        "65 MiB of text, over the 64 MiB perplexity reads",
    );
    // A port out of range is named as such (reqwest said "builder error").
    for port in ["0", "70000"] {
        let url = format!("http://127.0.0.1:{port}/v1");
        assert_refused(
            tokenometer(&["bench", "--endpoint", &url, "--runs", "1"]),
            &format!("port {port} is out of range: a port is 1 to 65535"),
        );
    }
    // A page that is not there is refused at start, not served as a 404: a server that started
    // anyway is stopped after 60 s and fails the test instead of holding it.
    let mut serve = Command::new(env!("CARGO_BIN_EXE_tokenometer"))
        .args(["serve", "--model", &model(), "--tokenizer", &tok512()])
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--page",
            "/no/such/dir",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let started = std::time::Instant::now();
    while serve.try_wait().unwrap().is_none() {
        if started.elapsed().as_secs() >= 60 {
            serve.kill().unwrap();
            panic!("serve --page /no/such/dir started instead of refusing the folder");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_refused(
        serve.wait_with_output().unwrap(),
        "--page /no/such/dir: no page there",
    );
}

/// `--backend auto --race` checks the GPU (here lavapipe) against the CPU, times both on a short
/// decode and says what it measured and chose; the verdict is kept in the cache folder, and the next
/// run without `--race` loads its choice at once and says so.
#[test]
fn auto_races_checks_and_remembers_its_verdict() {
    let cache = std::env::temp_dir().join(format!("tokenometer-auto-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let run = |extra: &[&str]| {
        let mut args = generate_args(
            &model(),
            &tok512(),
            "Once upon a time",
            &["--max-tokens", "8"],
        );
        args.extend(
            ["--backend", "auto", "--threads", "1"]
                .iter()
                .chain(extra)
                .map(|s| s.to_string()),
        );
        let output = Command::new(env!("CARGO_BIN_EXE_tokenometer"))
            .args(&args)
            .env("XDG_CACHE_HOME", &cache)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let stdout = succeeded(output);
        // The text goes to stdout, the report with its conditions to stderr.
        stdout
            .lines()
            .chain(stderr.lines())
            .find(|l| l.starts_with("conditions:"))
            .unwrap_or_else(|| panic!("a conditions line in {stdout} / {stderr}"))
            .to_string()
    };
    let raced = run(&["--race"]);
    assert!(raced.contains("(auto: CPU 1 thread "), "{raced}");
    assert!(raced.contains(" tok/s, wgpu ("), "{raced}");
    assert!(raced.contains(" tok/s -> "), "{raced}");
    let kept =
        std::fs::read_to_string(cache.join("tokenometer/auto.json")).expect("the verdict is kept");
    let verdicts: serde_json::Value = serde_json::from_str(&kept).unwrap();
    let verdict = verdicts
        .as_object()
        .unwrap()
        .values()
        .next()
        .expect("one verdict");
    assert_eq!(verdict["check"]["disagreed"], 0, "{kept}");
    assert!(verdict["check"]["clear"].as_u64().unwrap() > 0, "{kept}");
    let again = run(&[]);
    assert!(
        again.contains("remembered from an earlier race; --race runs it again"),
        "{again}"
    );
    let _ = std::fs::remove_dir_all(&cache);
}
