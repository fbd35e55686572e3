//! `generate --endpoint` and `bench --endpoint`, run as a user runs them, against servers on
//! loopback: `tokenometer serve` (the client's counts are the server's own, its text is
//! `generate`'s, a level of eight completes with goodput from its own records), and a scripted
//! server whose every byte and pause a test chooses (chunks of several tokens, pings, CRLF, events
//! split across writes, an error mid-stream, each HTTP failure, a stall, an API key).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::serve::*;

fn tokenometer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tokenometer"))
        .args(args)
        .env("TEST_ENDPOINT_KEY", "sekret-key-123")
        .output()
        .expect("runs")
}

fn stdout_ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// `generate --json`'s events: the chunks' text and the done line's report.
fn text_and_report(stdout: &str) -> (String, Value) {
    let mut text = String::new();
    let mut report = Value::Null;
    for line in stdout.lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        match event["event"].as_str() {
            Some("chunk") if event["reasoning"] != true => {
                text.push_str(event["text"].as_str().unwrap())
            }
            Some("token") => text.push_str(event["text"].as_str().unwrap()),
            Some("done") => {
                text.push_str(event["trailing_text"].as_str().unwrap());
                report = event["report"].clone();
            }
            _ => {}
        }
    }
    (text, report)
}

/// The local `generate`'s greedy text for the same model and prompt.
fn local_text(model: &[String], prompt: &str, max_tokens: &str, raw: bool) -> String {
    let mut args: Vec<&str> = vec!["generate"];
    args.extend(model.iter().map(String::as_str));
    args.extend(["--prompt", prompt, "--max-tokens", max_tokens, "--json"]);
    if raw {
        args.push("--raw");
    }
    text_and_report(&stdout_ok(&tokenometer(&args))).0
}

#[test]
fn the_clients_counts_are_the_servers_own_and_its_text_is_generates() {
    let server = Server::stories();
    let prompt = "Once upon a time";
    let out = tokenometer(&[
        "generate",
        "--endpoint",
        &server.url,
        "--prompt",
        prompt,
        "--max-tokens",
        "60",
        "--raw",
        "--json",
    ]);
    let (text, report) = text_and_report(&stdout_ok(&out));
    assert_eq!(text, local_text(&stories_args(&[]), prompt, "60", true));
    let c = &report["conditions"];
    let timings = &report["server_timings"];
    assert_eq!(c["token_counts"], "chunk_usage", "{report}");
    assert_eq!(c["output_tokens"], timings["predicted_n"], "{report}");
    assert_eq!(c["prompt_tokens"], timings["prompt_n"], "{report}");
    assert!(c["output_tokens"].as_u64().unwrap() > 10, "{report}");
    assert_eq!(c["model"], "stories260K");
    assert!(c["endpoint"].as_str().unwrap().ends_with("/v1"), "{c}");
    assert!(
        c["server"].as_str().unwrap().starts_with("tokenometer"),
        "{c}"
    );
    assert!(c.get("quant").is_none(), "an endpoint has no quant: {c}");
    assert!(report["ttft_ms"].as_f64().unwrap() > 0.0);
}

#[test]
fn smollm2_chat_over_an_endpoint_is_generates_with_the_servers_counts() {
    let model = vec![
        "--model".to_string(),
        smollm2(),
        "--threads".into(),
        "1".into(),
    ];
    let server = Server::start(&model);
    let prompt = "What is the capital of France?";
    let out = tokenometer(&[
        "generate",
        "--endpoint",
        &format!("{}/v1/chat/completions", server.url),
        "--prompt",
        prompt,
        "--max-tokens",
        "24",
        "--json",
    ]);
    let (text, report) = text_and_report(&stdout_ok(&out));
    assert_eq!(text, local_text(&model, prompt, "24", false));
    let c = &report["conditions"];
    assert_eq!(c["token_counts"], "chunk_usage", "{report}");
    assert_eq!(c["output_tokens"], report["server_timings"]["predicted_n"]);
    assert_eq!(c["prompt_tokens"], report["server_timings"]["prompt_n"]);
}

#[test]
fn a_level_of_eight_completes_with_goodput_from_its_own_records() {
    let server = Server::stories();
    let out = tokenometer(&[
        "bench",
        "--endpoint",
        &server.url,
        "--concurrency",
        "8",
        "--max-tokens",
        "16",
        "--ignore-eos",
        "--raw",
        "--slo",
        "ttft=600000,e2e=600000",
        "--json",
    ]);
    let levels: Value = serde_json::from_str(&stdout_ok(&out)).unwrap();
    let level = &levels[0];
    assert_eq!(level["users"], 8, "{level}");
    assert_eq!(level["requests"], 8);
    assert_eq!(level["requests_completed"], 8);
    // --ignore-eos reached the server: every request made all its tokens.
    assert_eq!(level["output_tokens"], 8 * 16, "{level}");
    let goodput = &level["goodput"];
    assert_eq!(goodput["good"], 8, "{goodput}");
    assert_eq!(goodput["share"], 1.0);
    let per_s = goodput["requests_per_s"].as_f64().unwrap();
    let wall_s = level["wall_ms"].as_f64().unwrap() / 1e3;
    assert!(
        (per_s - 8.0 / wall_s).abs() < 1e-9,
        "{per_s} vs 8 / {wall_s}"
    );
    assert!(level["aggregate_tps"].as_f64().unwrap() > 0.0);
    // The server batched them: its own count of the most requests in one batch at once.
    let peak = server.metric("tokenometer:num_requests_running_peak");
    assert!(
        peak >= 4.0,
        "the server held at most {peak} of the eight at once"
    );
    assert_eq!(level["conditions"]["token_counts"], "chunk_usage");
    assert!(level["server_tps_p50"].as_f64().unwrap() > 0.0);

    // An objective no request meets: none is good, and the share names which one failed.
    let out = tokenometer(&[
        "bench",
        "--endpoint",
        &server.url,
        "--concurrency",
        "2",
        "--max-tokens",
        "4",
        "--raw",
        "--slo",
        "ttft=0.0001,e2e=600000",
        "--json",
    ]);
    let levels: Value = serde_json::from_str(&stdout_ok(&out)).unwrap();
    let goodput = &levels[0]["goodput"];
    assert_eq!(goodput["good"], 0, "{goodput}");
    assert_eq!(goodput["share_ttft"], 0.0);
    assert_eq!(goodput["share_e2e"], 1.0);
}

/// One scripted answer: the HTTP status line and headers' status, then body pieces, each written
/// after its pause (ms).
#[derive(Clone)]
struct Script {
    status: u16,
    pieces: Vec<(u64, String)>,
    /// Stop writing and hold the connection open (a stalled stream).
    stall: bool,
    /// Refuse (400) a request with fields it does not know, as OpenAI's API does: the per-chunk
    /// counting fields.
    strict: bool,
    /// The answer's content type, when not the status's usual one.
    ctype: Option<&'static str>,
    /// After the pieces, send the last one again and again, at once, until the client leaves (a
    /// body that never ends, as fast as the client reads).
    endless: bool,
}

/// A server on loopback that answers `/v1/models` with one model and every POST with `script`,
/// keeping each request's Authorization header and each POST's body.
struct Scripted {
    url: String,
    auth: Arc<Mutex<Vec<String>>>,
    bodies: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    fn start(script: Script) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let auth = Arc::new(Mutex::new(Vec::new()));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let (seen, posted) = (auth.clone(), bodies.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (script, seen, posted) = (script.clone(), seen.clone(), posted.clone());
                std::thread::spawn(move || answer(stream, &script, &seen, &posted));
            }
        });
        Scripted { url, auth, bodies }
    }
}

fn answer(
    mut stream: TcpStream,
    script: &Script,
    seen: &Mutex<Vec<String>>,
    posted: &Mutex<Vec<String>>,
) {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = Vec::new();
    let mut byte = [0u8; 1];
    while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
        request.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&request).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    let _ = stream.read_exact(&mut body);
    if let Some(a) = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("authorization:"))
    {
        seen.lock().unwrap().push(a.to_string());
    }
    if head.starts_with("GET /v1/models") {
        let body = r#"{"object":"list","data":[{"id":"scripted","object":"model"}]}"#;
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nserver: scripted/1\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    let body = String::from_utf8_lossy(&body).to_string();
    posted.lock().unwrap().push(body.clone());
    if script.strict && body.contains("timings_per_token") {
        let refusal = r#"{"error":{"message":"Unrecognized request argument supplied: timings_per_token","type":"invalid_request_error"}}"#;
        let _ = write!(
            stream,
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{refusal}",
            refusal.len()
        );
        return;
    }
    let ctype = script.ctype.unwrap_or(if script.status == 200 {
        "text/event-stream"
    } else {
        "application/json"
    });
    let _ = write!(
        stream,
        "HTTP/1.1 {} X\r\ncontent-type: {ctype}\r\nconnection: close\r\n\r\n",
        script.status
    );
    let _ = stream.flush();
    for (pause, piece) in &script.pieces {
        std::thread::sleep(Duration::from_millis(*pause));
        let _ = stream.write_all(piece.as_bytes());
        let _ = stream.flush();
    }
    if let (true, Some((_, piece))) = (script.endless, script.pieces.last()) {
        while stream.write_all(piece.as_bytes()).is_ok() {}
    }
    if script.stall {
        std::thread::sleep(Duration::from_secs(20));
    }
}

fn sse(json: &str) -> String {
    format!("data: {json}\r\n\r\n")
}

/// A chunk of `text` alone, no counts.
fn content(text: &str) -> String {
    sse(&format!(
        r#"{{"choices":[{{"delta":{{"content":"{text}"}}}}]}}"#
    ))
}

/// `generate --json` against a scripted server: the text and the report.
fn generate_json(server: &Scripted) -> (String, Value) {
    let out = tokenometer(&[
        "generate",
        "--endpoint",
        &server.url,
        "--prompt",
        "hi",
        "--json",
        "--no-warmup",
    ]);
    text_and_report(&stdout_ok(&out))
}

#[test]
fn a_scripted_stream_of_multi_token_chunks_pings_and_split_events_is_counted_right() {
    let chunk = |text: &str, n: usize| {
        sse(&format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"{text}"}}}}],"usage":{{"prompt_tokens":9,"completion_tokens":{n}}}}}"#
        ))
    };
    let three = chunk("bcd", 4);
    let (head, tail) = three.split_at(17);
    let script = Script {
        status: 200,
        pieces: vec![
            (0, ": ping\r\n\r\n".into()),
            (
                0,
                sse(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#),
            ),
            (0, chunk("a", 1)),
            // Three tokens in one chunk, its event split across two writes 60 ms apart in all.
            (40, head.to_string()),
            (20, tail.to_string()),
            (60, ": ping\n\n".into()),
            (0, chunk("e", 5)),
            (
                0,
                sse(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#),
            ),
            (
                0,
                sse(r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":5}}"#),
            ),
            (0, "data: [DONE]\n\n".into()),
        ],
        stall: false,
        strict: false,
        ctype: None,
        endless: false,
    };
    let server = Scripted::start(script);
    let (text, report) = generate_json(&server);
    assert_eq!(text, "abcde");
    let c = &report["conditions"];
    assert_eq!(c["output_tokens"], 5, "{report}");
    assert_eq!(c["prompt_tokens"], 9);
    assert_eq!(c["token_counts"], "chunk_usage");
    assert_eq!(c["model"], "scripted");
    assert_eq!(c["server"], "scripted/1");
    assert_eq!(c["stop_reason"], "max_tokens");
    // Chunks came ~60 ms apart; per token, the three-token chunk's gap is shared: 20, 20, 20,
    // then 60 for the last. Decode: 4 tokens after the first over ~120 ms.
    let chunk_p50 = report["inter_chunk_ms"]["p50"].as_f64().unwrap();
    let token_p50 = report["inter_token_ms"]["p50"].as_f64().unwrap();
    assert!((55.0..200.0).contains(&chunk_p50), "{report}");
    assert!((18.0..70.0).contains(&token_p50), "{report}");
    assert!(token_p50 < chunk_p50 * 0.5, "{token_p50} vs {chunk_p50}");
    let decode = report["decode_tps"].as_f64().unwrap();
    let span = report["decode_ms"].as_f64().unwrap();
    assert!((decode - 4.0 / span * 1e3).abs() < 1e-9, "{report}");
}

#[test]
fn only_a_final_usage_is_spread_over_the_chunks_and_said_so() {
    // A server without per-chunk counts: two chunks, then a final usage of 7 tokens.
    let script = Script {
        status: 200,
        pieces: vec![
            (0, content("one")),
            (30, content(" two three")),
            (
                0,
                sse(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}"#),
            ),
            (0, "data: [DONE]\n\n".into()),
        ],
        stall: false,
        strict: false,
        ctype: None,
        endless: false,
    };
    let server = Scripted::start(script);
    let (_, report) = generate_json(&server);
    assert_eq!(report["conditions"]["output_tokens"], 7, "{report}");
    assert_eq!(report["conditions"]["token_counts"], "final_usage");
    assert!(
        report["summary"].as_str().unwrap().contains("final usage"),
        "{report}"
    );
}

#[test]
fn a_server_that_refuses_the_counting_fields_is_asked_again_without_them() {
    let script = Script {
        status: 200,
        pieces: vec![
            (0, content("one")),
            (
                0,
                sse(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#),
            ),
            (0, "data: [DONE]\n\n".into()),
        ],
        stall: false,
        strict: true,
        ctype: None,
        endless: false,
    };
    let server = Scripted::start(script);
    let (text, report) = generate_json(&server);
    assert_eq!(text, "one");
    assert_eq!(report["conditions"]["output_tokens"], 2, "{report}");
    assert_eq!(report["conditions"]["token_counts"], "final_usage");
    let bodies = server.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert!(
        bodies[0].contains("continuous_usage_stats") && bodies[0].contains("timings_per_token")
    );
    assert!(!bodies[1].contains("timings_per_token") && bodies[1].contains("include_usage"));
}

/// `generate --endpoint` against a scripted answer: its exit code 2 and its one line of error.
fn failure(script: Script, extra: &[&str]) -> String {
    let server = Scripted::start(script);
    let mut args = vec![
        "generate",
        "--endpoint",
        &server.url,
        "--prompt",
        "hi",
        "--no-warmup",
    ];
    args.extend(extra);
    let out = tokenometer(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    stderr
}

#[test]
fn every_failure_is_one_sentence_and_a_key_is_sent_but_never_shown() {
    let json_error = |status: u16, message: &str| Script {
        status,
        pieces: vec![(
            0,
            format!(r#"{{"error":{{"message":"{message}","code":{status}}}}}"#),
        )],
        stall: false,
        strict: false,
        ctype: None,
        endless: false,
    };
    for (status, says) in [
        (401, "--api-key-env"),
        (404, "ending in /v1"),
        (429, "fewer users"),
        (503, "failed on the server's side (503: loading model)"),
    ] {
        let e = failure(json_error(status, "loading model"), &[]);
        assert!(e.contains(says), "{status}: {e}");
    }
    let mid = Script {
        status: 200,
        pieces: vec![
            (0, sse(r#"{"choices":[{"delta":{"content":"a"}}]}"#)),
            (0, sse(r#"{"error":{"message":"the KV cache is full"}}"#)),
        ],
        stall: false,
        strict: false,
        ctype: None,
        endless: false,
    };
    let e = failure(mid, &[]);
    assert!(e.contains("error mid-stream: the KV cache is full"), "{e}");
    let stalled = Script {
        status: 200,
        pieces: vec![(0, sse(r#"{"choices":[{"delta":{"content":"a"}}]}"#))],
        stall: true,
        strict: false,
        ctype: None,
        endless: false,
    };
    let e = failure(stalled, &["--endpoint-timeout", "1"]);
    assert!(e.contains("stalled: no bytes for 1 s"), "{e}");

    // Nothing listening: a port that was free a moment ago.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = tokenometer(&[
        "generate",
        "--endpoint",
        &format!("http://127.0.0.1:{port}/v1"),
        "--prompt",
        "hi",
    ]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        e.contains("cannot connect to") && e.contains("is the server running"),
        "{e}"
    );

    // The key travels as a bearer token, and appears in no output.
    let ok = Script {
        status: 200,
        pieces: vec![
            (0, sse(r#"{"choices":[{"delta":{"content":"a"}}]}"#)),
            (0, "data: [DONE]\n\n".into()),
        ],
        stall: false,
        strict: false,
        ctype: None,
        endless: false,
    };
    let server = Scripted::start(ok);
    let out = tokenometer(&[
        "generate",
        "--endpoint",
        &server.url,
        "--prompt",
        "hi",
        "--json",
        "--api-key-env",
        "TEST_ENDPOINT_KEY",
    ]);
    let stdout = stdout_ok(&out);
    let seen = server.auth.lock().unwrap().clone();
    assert!(seen.len() >= 2, "models and the requests: {seen:?}");
    assert!(
        seen.iter().all(|a| a.ends_with("Bearer sekret-key-123")),
        "{seen:?}"
    );
    assert!(!stdout.contains("sekret") && !String::from_utf8_lossy(&out.stderr).contains("sekret"));
    let (_, report) = text_and_report(&stdout);
    assert_eq!(report["conditions"]["token_counts"], "chunks", "{report}");
    let e = String::from_utf8_lossy(
        &tokenometer(&[
            "generate",
            "--endpoint",
            &server.url,
            "--prompt",
            "hi",
            "--api-key-env",
            "NO_SUCH_VAR_HERE",
        ])
        .stderr,
    )
    .to_string();
    assert!(e.contains("NO_SUCH_VAR_HERE, which is not set"), "{e}");
}

/// A client that tells the truth about what it got: a 200 that is not an event stream (a whole
/// JSON answer, an HTML page) is an error naming what came, never a run of 0 tokens; a stream
/// closed without a finish reason or `[DONE]` was cut off and is an error, never a completed run;
/// a server that sends only pings stalls after `--endpoint-timeout` however often it pings; an
/// error body that never ends is read 64 KiB at most and within the timeout; `--request-timeout`
/// bounds a whole request; and a 400 whose message names no counting field is not retried.
#[test]
fn a_server_cannot_fool_the_client_about_what_it_sent() {
    let script = |status: u16,
                  ctype: Option<&'static str>,
                  pieces: Vec<(u64, String)>,
                  stall: bool| Script {
        status,
        pieces,
        stall,
        strict: false,
        ctype,
        endless: false,
    };
    let whole = r#"{"choices":[{"message":{"content":"hello"},"finish_reason":"stop"}]}"#;
    let e = failure(
        script(
            200,
            Some("application/json"),
            vec![(0, whole.into())],
            false,
        ),
        &[],
    );
    assert!(
        e.contains("answered 200 with application/json where an event stream was asked for")
            && e.contains("choices"),
        "{e}"
    );
    let e = failure(
        script(
            200,
            Some("text/html; charset=utf-8"),
            vec![(0, "<html>login</html>".into())],
            false,
        ),
        &[],
    );
    assert!(e.contains("text/html") && e.contains("<html>login"), "{e}");
    // Cut off: text, then the connection closes.
    let cut = vec![(0, sse(r#"{"choices":[{"delta":{"content":"a"}}]}"#))];
    let e = failure(script(200, None, cut, false), &[]);
    assert!(
        e.contains("closed without a finish reason or [DONE]: the answer was cut off"),
        "{e}"
    );
    // A finish reason without [DONE] is complete (some servers close so).
    let finished = vec![(
        0,
        sse(r#"{"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}"#),
    )];
    let server = Scripted::start(script(200, None, finished, false));
    let (text, _) = generate_json(&server);
    assert_eq!(text, "a");
    // Pings every 200 ms after the first chunk: stalled at the timeout all the same.
    let mut pings = vec![(0, sse(r#"{"choices":[{"delta":{"content":"a"}}]}"#))];
    pings.extend((0..40).map(|_| (200, ": ping\n\n".to_string())));
    let started = Instant::now();
    let e = failure(
        script(200, None, pings, false),
        &["--endpoint-timeout", "1"],
    );
    assert!(
        e.contains("stalled: only keep-alive comments for 1 s"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // An error body that never ends: 1 KB every 50 ms for 20 s; read within the timeout.
    let slow = (0..400).map(|_| (50, "x".repeat(1000))).collect();
    let started = Instant::now();
    let e = failure(script(500, None, slow, false), &["--endpoint-timeout", "1"]);
    assert!(e.contains("failed on the server's side (500"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // An error body that never ends and comes as fast as it is read, with time to spare: the
    // 64 KiB cap ends the reading, not the timeout (30 s here).
    let fast = Script {
        endless: true,
        ..script(500, None, vec![(0, "y".repeat(16 << 10))], false)
    };
    let started = Instant::now();
    let e = failure(fast, &["--endpoint-timeout", "30"]);
    assert!(
        e.contains("failed on the server's side (500") && e.contains("yyyy"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the cap, not the timeout, ended it: {:?}",
        started.elapsed()
    );
    // A stream that keeps sending text slowly, for longer than the whole request may take.
    let slow = (0..100)
        .map(|_| (100, sse(r#"{"choices":[{"delta":{"content":"a"}}]}"#)))
        .collect();
    let e = failure(
        script(200, None, slow, false),
        &["--request-timeout", "1", "--max-tokens", "1000"],
    );
    assert!(
        e.contains("did not finish the request within 1 s (--request-timeout)"),
        "{e}"
    );
    // A 400 about something else is the request's failure, not a reason to resend it.
    let refusal = r#"{"error":{"message":"model is loading"}}"#;
    let server = Scripted::start(script(400, None, vec![(0, refusal.into())], false));
    let out = tokenometer(&[
        "generate",
        "--endpoint",
        &server.url,
        "--prompt",
        "hi",
        "--no-warmup",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(server.bodies.lock().unwrap().len(), 1, "sent once");
}
