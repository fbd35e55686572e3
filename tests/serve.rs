//! `tokenometer serve`, run as a user runs it and spoken to over HTTP on loopback: its text is
//! `generate`'s (streamed and whole, alone and among eight), a client that leaves frees its place,
//! the queue is bounded, every bad request gets OpenAI's error shape and the server keeps serving,
//! and `/metrics` counts what was served. Each test starts its own server on a free port, which
//! stops by itself (`--exit-after`) if the test does not stop it.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::serve::*;

/// The text of a stream's chunks, and its chunks as JSON (`[DONE]` left out; it must be last).
fn streamed_text(lines: &[String]) -> (String, Vec<Value>) {
    assert_eq!(
        lines.last().map(String::as_str),
        Some("[DONE]"),
        "{lines:?}"
    );
    let chunks: Vec<Value> = lines[..lines.len() - 1]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let text = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .filter_map(|c| c["delta"]["content"].as_str().or(c["text"].as_str()))
        .collect();
    (text, chunks)
}

/// `tokenometer generate`'s greedy text (its JSON events' pieces).
fn generate(args: &[String], prompt: &str, max_tokens: usize, raw: bool) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tokenometer"));
    command.arg("generate").args(args).args([
        "--prompt",
        prompt,
        "--max-tokens",
        &max_tokens.to_string(),
        "--json",
    ]);
    if raw {
        command.arg("--raw");
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut text = String::new();
    for line in String::from_utf8(output.stdout).unwrap().lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        match event["event"].as_str() {
            Some("token") => text.push_str(event["text"].as_str().unwrap()),
            Some("done") => text.push_str(event["trailing_text"].as_str().unwrap()),
            _ => {}
        }
    }
    text
}

/// A raw HTTP/1.1 request on its own connection; the response as text (until the server closes
/// or `within` passes).
fn raw(url: &str, request: &[u8], within: Duration) -> String {
    let address = url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).unwrap();
    stream.write_all(request).unwrap();
    stream.set_read_timeout(Some(within)).unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn greedy_text_over_http_is_generates_streamed_or_whole() {
    let server = Server::stories();
    let expected = generate(&stories_args(&[]), "Once upon a time", 60, true);
    assert!(expected.len() > 100, "{expected}");
    let body = json!({"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0});
    let (status, whole) = server.post("/v1/completions", &body);
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["object"], "text_completion");
    assert_eq!(whole["choices"][0]["text"], expected);
    assert_eq!(whole["choices"][0]["finish_reason"], "length");
    assert_eq!(whole["usage"]["completion_tokens"], 60);
    let prompt_tokens = whole["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens >= 4, "{whole}");
    assert_eq!(whole["usage"]["total_tokens"], prompt_tokens + 60);
    assert_eq!(whole["timings"]["predicted_n"], 60);
    assert_eq!(whole["timings"]["prompt_n"], prompt_tokens);

    let mut body = body;
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (text, chunks) = streamed_text(&server.stream("/v1/completions", &body));
    assert_eq!(text, expected);
    // A chunk a token: the chunks with text are as many as the tokens the usage counts.
    let with_text = chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .count();
    assert_eq!(with_text, 60);
    // The last chunk before usage says why it ended and carries llama.cpp's timings; usage comes
    // in a chunk of its own with no choices, as OpenAI sends it.
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["completion_tokens"], 60);
    assert_eq!(usage["usage"]["prompt_tokens"], prompt_tokens);
    let last = &chunks[chunks.len() - 2];
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    let timings = &last["timings"];
    assert_eq!(timings["predicted_n"], 60);
    let (n, ms) = (60.0, timings["predicted_ms"].as_f64().unwrap());
    let rate = timings["predicted_per_second"].as_f64().unwrap();
    assert!((rate - n / ms * 1e3).abs() < 1e-6 * rate, "{timings}");
    // Every chunk but the usage one has exactly one choice; none before the end says why.
    for c in &chunks[..chunks.len() - 2] {
        assert_eq!(c["choices"][0]["finish_reason"], Value::Null, "{c}");
        assert_eq!(c["object"], "text_completion");
    }
    // Without include_usage there is no usage chunk.
    body["stream_options"] = json!({"include_usage": false});
    let (_, chunks) = streamed_text(&server.stream("/v1/completions", &body));
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "{chunks:?}"
    );

    // The server counted what it served.
    assert_eq!(server.metric("tokenometer:generation_tokens_total"), 180.0);
    assert_eq!(
        server.metric("tokenometer:prompt_tokens_total"),
        3.0 * prompt_tokens as f64
    );
    assert_eq!(
        server.metric("tokenometer:request_success_total{model_name=\"stories260K\",finished_reason=\"length\"}"),
        3.0
    );
    assert_eq!(
        server.metric("tokenometer:time_to_first_token_seconds_count"),
        3.0
    );
    assert_eq!(
        server.metric("tokenometer:inter_token_latency_seconds_count"),
        3.0 * 59.0
    );
    assert_eq!(server.metric("tokenometer:num_requests_running"), 0.0);
}

#[test]
fn stop_strings_cut_the_text_and_end_the_request() {
    let server = Server::stories();
    let full = generate(&stories_args(&[]), "Once upon a time", 80, true);
    // A stop string that occurs in the greedy text: the answer ends just before it.
    let word = full.split_whitespace().nth(6).unwrap().to_string();
    let at = full.find(&word).unwrap();
    for stream in [false, true] {
        let body = json!({"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0,
            "stop": [word.clone(), "never-generated"], "stream": stream});
        let (text, finish) = if stream {
            let (text, chunks) = streamed_text(&server.stream("/v1/completions", &body));
            let finish = chunks.last().unwrap()["choices"][0]["finish_reason"].clone();
            (text, finish)
        } else {
            let (status, whole) = server.post("/v1/completions", &body);
            assert_eq!(status, 200, "{whole}");
            (
                whole["choices"][0]["text"].as_str().unwrap().to_string(),
                whole["choices"][0]["finish_reason"].clone(),
            )
        };
        assert_eq!(text, full[..at], "stream: {stream}");
        assert_eq!(finish, "stop");
    }
    // The stop ends the sequence in the engine, and what is counted is what was sent (as OpenAI
    // and llama.cpp's server count): the tokens whose text begins before the stop string, found
    // here from a run without it, each token with its offset in the text.
    let (status, unstopped) = server.post(
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0, "logprobs": 0}),
    );
    assert_eq!(status, 200, "{unstopped}");
    let offsets = unstopped["choices"][0]["logprobs"]["text_offset"]
        .as_array()
        .unwrap()
        .clone();
    let sent = offsets
        .iter()
        .filter(|o| (o.as_u64().unwrap() as usize) < at)
        .count();
    assert!(sent > 3 && sent < 80, "{sent} of {offsets:?}");
    let generated_before = server.metric("tokenometer:generation_tokens_total");
    let body = json!({"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0,
        "stop": word.clone(), "logprobs": 0, "stream": true,
        "stream_options": {"include_usage": true}});
    let (text, chunks) = streamed_text(&server.stream("/v1/completions", &body));
    assert_eq!(text, full[..at]);
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(
        usage["completion_tokens"].as_u64(),
        Some(sent as u64),
        "{usage}"
    );
    let listed: usize = chunks
        .iter()
        .filter_map(|c| {
            c["choices"].get(0)?["logprobs"]["tokens"]
                .as_array()
                .map(Vec::len)
        })
        .sum();
    assert_eq!(listed, sent, "one log probability a token sent");
    // The meter's own figures and /metrics count the same tokens.
    let report = &usage["extra"];
    if !report.is_null() {
        assert_eq!(
            report["conditions"]["output_tokens"].as_u64(),
            Some(sent as u64)
        );
    }
    assert_eq!(
        server.metric("tokenometer:generation_tokens_total") - generated_before,
        sent as f64
    );
}

#[test]
fn ignore_eos_goes_on_to_max_tokens_where_the_text_would_end() {
    let server = Server::stories();
    let ask = |ignore_eos: bool| {
        let body = json!({"prompt": "Once upon a time", "max_tokens": 480, "temperature": 0,
            "ignore_eos": ignore_eos});
        let (status, whole) = server.post("/v1/completions", &body);
        assert_eq!(status, 200, "{whole}");
        let tokens = whole["usage"]["completion_tokens"].as_u64().unwrap();
        (tokens, whole["choices"][0]["finish_reason"].clone())
    };
    // The story ends by itself well before 480 tokens...
    let (ended, why) = ask(false);
    assert_eq!(why, "stop");
    assert!(ended < 480, "{ended}");
    // ...and with ignore_eos it goes on to the tokens asked for.
    assert_eq!(ask(true), (480, json!("length")));
}

/// `serve --ctx N` serves N positions of the model's context: a request whose prompt and
/// max_tokens pass it is refused naming N, one without max_tokens ends at N (`length`), the
/// conditions say N, and N outside 8 to the model's own is refused at start in one line.
#[test]
fn ctx_caps_the_context_served() {
    let server = Server::start(&stories_args(&["--ctx", "40"]));
    let (status, error) = server.post(
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 38}),
    );
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["code"], "context_length_exceeded", "{error}");
    assert!(
        error["error"]["message"].as_str().unwrap().contains("40"),
        "{error}"
    );
    let (status, error) = server.post(
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 41}),
    );
    assert_eq!(
        (status, &error["error"]["param"]),
        (400, &json!("max_tokens")),
        "{error}"
    );
    // The context served, not the model's (512 positions), is what the message names.
    assert_eq!(
        error["error"]["message"], "max_tokens is 41 but this server's context holds 40 tokens",
        "{error}"
    );
    let (status, whole) = server.post(
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "temperature": 0, "ignore_eos": true}),
    );
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["choices"][0]["finish_reason"], "length", "{whole}");
    let used = whole["usage"]["total_tokens"].as_u64().unwrap();
    // 40 positions read; the last token picked is never read, so it needs none.
    assert_eq!(used, 41, "{whole}");
    assert_eq!(whole["usage"]["extra"]["conditions"]["context_length"], 40);
    drop(server);
    for (ctx, says) in [
        (
            "4",
            "--ctx 4: the context served is 8 to this model's own, 512 positions",
        ),
        (
            "513",
            "--ctx 513: the context served is 8 to this model's own, 512 positions",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tokenometer"))
            .arg("serve")
            .args(stories_args(&["--ctx", ctx, "--port", "0"]))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
}

#[test]
fn a_model_without_a_chat_template_refuses_chat_and_names_completions() {
    let server = Server::stories();
    let (status, error) = server.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}]}),
    );
    assert_eq!(status, 400);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("/v1/completions"), "{message}");
    let models: Value = serde_json::from_str(&server.get("/v1/models")).unwrap();
    assert_eq!(models["data"][0]["id"], "stories260K");
    assert_eq!(models["data"][0]["max_model_len"], 512);
    assert_eq!(server.get("/health"), r#"{"status":"ok"}"#);
}

#[test]
fn every_bad_request_gets_openais_error_shape_and_the_server_keeps_serving() {
    let server = Server::start(&stories_args(&[
        "--header-timeout",
        "1",
        "--body-timeout",
        "1",
    ]));
    let url = &server.url;
    let completions = format!("{url}/v1/completions");
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "malformed JSON",
            b"{\"prompt\": ".to_vec(),
            400,
            "not valid JSON",
        ),
        (
            "a wrong type",
            br#"{"prompt": "x", "max_tokens": "ten"}"#.to_vec(),
            400,
            "wrong type",
        ),
        ("no prompt", br#"{"max_tokens": 4}"#.to_vec(), 400, "prompt"),
        (
            "an empty prompt",
            br#"{"prompt": "  "}"#.to_vec(),
            400,
            "empty",
        ),
        (
            "max_tokens 0",
            br#"{"prompt": "x", "max_tokens": 0}"#.to_vec(),
            400,
            "at least 1",
        ),
        (
            "negative max_tokens",
            br#"{"prompt": "x", "max_tokens": -5}"#.to_vec(),
            400,
            "at least 1",
        ),
        (
            "max_tokens over the context",
            br#"{"prompt": "x", "max_tokens": 100000}"#.to_vec(),
            400,
            "context holds 512",
        ),
        (
            "an unknown model",
            br#"{"prompt": "x", "model": "gpt-4o"}"#.to_vec(),
            404,
            "not served here",
        ),
        (
            "n of 2",
            br#"{"prompt": "x", "n": 2}"#.to_vec(),
            400,
            "one choice",
        ),
        (
            "temperature 5",
            br#"{"prompt": "x", "temperature": 5}"#.to_vec(),
            400,
            "temperature",
        ),
        (
            "top_p 0",
            br#"{"prompt": "x", "top_p": 0}"#.to_vec(),
            400,
            "top_p",
        ),
        (
            "5 stop strings",
            br#"{"prompt": "x", "stop": ["a","b","c","d","e"]}"#.to_vec(),
            400,
            "at most 4",
        ),
    ];
    for (what, body, status, says) in cases {
        let response = client()
            .post(&completions)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{what}");
        let error: Value = response.json().unwrap();
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{what}: {error}");
        assert!(!message.contains('\n'), "{what}: one sentence: {message}");
        assert!(error["error"]["type"].is_string(), "{what}: {error}");
    }
    // A prompt over the context.
    let long = "Once upon a time ".repeat(300);
    let (status, error) = server.post("/v1/completions", &json!({"prompt": long}));
    assert_eq!(status, 400);
    assert_eq!(error["error"]["code"], "context_length_exceeded", "{error}");
    // Chat: no messages, an empty list, an unknown role (refused before the template is asked
    // for, with a chat model; stories260K has none, so here the template's absence is said).
    let (status, _) = server.post("/v1/chat/completions", &json!({"messages": []}));
    assert_eq!(status, 400);
    // A body over the limit.
    let big = vec![b'a'; 5 << 20];
    match client().post(&completions).body(big).send() {
        Ok(response) => assert_eq!(response.status().as_u16(), 413),
        // Or the server's answer and close came while the client was still writing, which then
        // fails with a broken pipe before it reads the answer (seen beside a build): the raw
        // request below reads the 413 where nothing is left unsent.
        Err(e) => assert!(
            e.is_request() && format!("{e:?}").contains("BodyWrite"),
            "{e:?}"
        ),
    }
    // The server answers before reading the rest of the body and closes the connection; on a
    // loaded machine the client's unsent bytes can then reset it before the answer's body is
    // read (seen once in 4 runs beside a build). So the body is checked where nothing is left
    // unsent: a body of 4 MiB and one byte, all of which the server reads to know it is over.
    let over = (4 << 20) + 1;
    let mut request = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {over}\r\n\r\n"
    )
    .into_bytes();
    request.extend(std::iter::repeat_n(b'a', over));
    let answer = raw(url, &request, Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let error: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{answer}"));
    assert!(
        error["error"]["message"].as_str().unwrap().contains("over"),
        "{error}"
    );

    // Half a request: headers that never end are cut off; a body that stops coming gets 408.
    let start = Instant::now();
    let answer = raw(
        url,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n",
        Duration::from_secs(5),
    );
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "headers never ending were not cut off"
    );
    assert!(!answer.contains("200 OK"), "{answer}");
    let answer = raw(
        url,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\"",
        Duration::from_secs(5),
    );
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive whole"), "{answer}");

    // A thousand connections at once, each asking for its health.
    let streams: Vec<TcpStream> = (0..1000)
        .map(|_| {
            let mut s = TcpStream::connect(url.trim_start_matches("http://")).unwrap();
            s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    let ok = streams
        .into_iter()
        .filter(|s| {
            let mut s = s.try_clone().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            out.starts_with("HTTP/1.1 200")
        })
        .count();
    assert_eq!(ok, 1000);

    // And it still serves.
    let (status, whole) = server.post(
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 5}),
    );
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["usage"]["completion_tokens"], 5);
}

#[test]
fn the_queue_is_bounded_and_a_client_that_leaves_frees_its_place() {
    // One place, no queue: a second request while one runs is turned away with 429.
    let server = Server::start(&[
        "--model",
        &smollm2(),
        "--threads",
        "1",
        "--parallel",
        "1",
        "--queue",
        "0",
    ]);
    let address = server.url.trim_start_matches("http://").to_string();
    let body = json!({"messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": 4000, "ignore_eos": true, "stream": true, "temperature": 0})
    .to_string();
    let mut stream = TcpStream::connect(&address).unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // Read until three chunks have come: it is running.
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut chunks = 0;
    while chunks < 3 {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "the stream ended early"
        );
        chunks += line.starts_with("data: ") as usize;
    }
    let response = client()
        .post(format!("{}/v1/completions", server.url))
        .json(&json!({"prompt": "Hello", "max_tokens": 2}))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let error: Value = response.json().unwrap();
    assert_eq!(error["error"]["code"], "queue_full", "{error}");
    assert_eq!(server.metric("tokenometer:requests_rejected_total"), 1.0);

    // The client leaves mid-stream: its sequence ends and the next request is taken.
    drop(reader);
    stream.shutdown(std::net::Shutdown::Both).unwrap();
    drop(stream);
    let left = Instant::now();
    let (status, whole) = loop {
        let (status, whole) = server.post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}),
        );
        if status != 429 || left.elapsed() > Duration::from_secs(30) {
            break (status, whole);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status, 200, "{whole}");
    // Had it waited for the abandoned stream, the place would have come after its 4000 tokens
    // (45 s or more at SmolLM2's speed on one thread); 20 s leaves room for a loaded machine.
    assert!(
        left.elapsed() < Duration::from_secs(20),
        "the place was freed after {:?}",
        left.elapsed()
    );
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["choices"][0]["message"]["role"], "assistant");
    let aborted = "tokenometer:request_success_total{model_name=\"SmolLM2-135M-Instruct.Q4_1\",finished_reason=\"abort\"}";
    assert_eq!(server.metric(aborted), 1.0);
    // It had generated far fewer than the 4000 tokens it asked for.
    let generated = server.metric("tokenometer:generation_tokens_total");
    assert!(generated < 1000.0, "{generated} tokens");
}

#[test]
fn smollm2_chat_over_http_is_generates_alone_and_among_eight() {
    let model = smollm2();
    let args: Vec<String> = ["--model", &model, "--threads", "1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let server = Server::start(&["--model", &model, "--threads", "1", "--parallel", "8"]);
    let question = "What is a token, in one sentence?";
    let expected = generate(&args, question, 24, false);
    let chat = |content: &str, stream: bool| {
        json!({"model": "SmolLM2-135M-Instruct.Q4_1", "messages": [{"role": "user", "content": content}],
            "max_completion_tokens": 24, "temperature": 0, "stream": stream})
    };
    let (status, whole) = server.post("/v1/chat/completions", &chat(question, false));
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["choices"][0]["message"]["content"], expected);
    let (text, chunks) =
        streamed_text(&server.stream("/v1/chat/completions", &chat(question, true)));
    assert_eq!(text, expected);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");

    // The chat request's checks on a model with a template: the same question as text parts is
    // the same text; no messages, an unknown role and a part that is not text are refused, each
    // in a sentence that names what to change.
    let mut parts = chat(question, false);
    parts["messages"][0]["content"] = json!([
        {"type": "text", "text": "What is a token,"},
        {"type": "text", "text": " in one sentence?"}
    ]);
    let (status, whole) = server.post("/v1/chat/completions", &parts);
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["choices"][0]["message"]["content"], expected);
    let refused = |body: Value, says: &str| {
        let (status, error) = server.post("/v1/chat/completions", &body);
        assert_eq!(status, 400, "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{says:?} not in {message:?}");
    };
    refused(json!({"messages": []}), "messages");
    refused(
        json!({"messages": [{"role": "wizard", "content": "Hi"}]}),
        "\"wizard\"",
    );
    refused(
        json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}),
        "image_url",
    );

    // Eight different questions, each alone, then all eight at once: the same texts.
    let questions: Vec<String> = [
        "What is a token?",
        "Name a color.",
        "What is 2 + 2?",
        "Say hello.",
        "What is the sun?",
        "Name a fruit.",
        "What is rain?",
        "Count to three.",
    ]
    .iter()
    .map(|q| q.to_string())
    .collect();
    let alone: Vec<String> = questions
        .iter()
        .map(|q| {
            let (text, _) = streamed_text(&server.stream("/v1/chat/completions", &chat(q, true)));
            text
        })
        .collect();
    let url = server.url.clone();
    // While they run, /metrics is sampled: the batch really holds several at once (a scheduler
    // that ran them one after another would give the same texts).
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (done, url) = (done.clone(), url.clone());
        std::thread::spawn(move || {
            let mut most = 0.0f64;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let text = client()
                    .get(format!("{url}/metrics"))
                    .send()
                    .unwrap()
                    .text()
                    .unwrap();
                let running = text
                    .lines()
                    .find(|l| l.starts_with("tokenometer:num_requests_running"))
                    .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .unwrap_or(0.0);
                most = most.max(running);
                std::thread::sleep(Duration::from_millis(2));
            }
            most
        })
    };
    let (together, batches): (Vec<String>, Vec<Value>) = questions
        .iter()
        .map(|q| {
            let mut body = chat(q, true);
            body["stream_options"] = json!({"include_usage": true});
            let url = url.clone();
            std::thread::spawn(move || {
                let response = client()
                    .post(format!("{url}/v1/chat/completions"))
                    .json(&body)
                    .send()
                    .unwrap();
                let (text, chunks) = streamed_text(&data_lines(&response.text().unwrap()));
                let conditions = chunks.last().unwrap()["usage"]["extra"]["conditions"].clone();
                (text, conditions)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .unzip();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let most_running = sampler.join().unwrap();
    assert_eq!(together, alone);
    assert!(alone.iter().all(|t| !t.is_empty()));
    assert!(
        most_running >= 4.0,
        "at most {most_running} of the eight ran at once (/metrics num_requests_running)"
    );
    // Each request's conditions say the batch it ran in (not --parallel): the largest and the
    // mean over its steps, at least one of them with others.
    for c in &batches {
        let (most, mean) = (
            c["batch_size"].as_u64().unwrap(),
            c["batch_mean"].as_f64().unwrap(),
        );
        assert!(
            (1..=8).contains(&most) && mean >= 1.0 && mean <= most as f64,
            "{c}"
        );
    }
    assert!(
        batches.iter().any(|c| c["batch_size"].as_u64() >= Some(4)),
        "{batches:?}"
    );
    let served = "tokenometer:request_success_total{model_name=\"SmolLM2-135M-Instruct.Q4_1\"";
    let text = server.get("/metrics");
    let total: f64 = text
        .lines()
        .filter(|l| l.starts_with(served))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    // Two alone, the text parts, eight alone, eight together.
    assert_eq!(total, 19.0, "{text}");
    let room: Value = serde_json::from_str(&server.get("/room")).unwrap();
    assert_eq!(room["room"]["served"], 19, "{room}");
    assert_eq!(room["room"]["users"], 0, "{room}");
}

/// OpenAI's fields this server does not implement are refused by name with a 400 (never a 200
/// that quietly ignored them), their defaults pass (and `top_logprobs` without `logprobs`, or
/// past 20, is refused); a stop string past 256 bytes, a user message
/// without content, an unknown path and a wrong method each get OpenAI's error object.
#[test]
fn unimplemented_fields_are_refused_by_name_and_their_defaults_pass() {
    let server = Server::start(&stories_args(&[]));
    let refused = [
        ("top_logprobs", json!(3)),
        ("logprobs", json!(21)),
        ("logprobs", json!("yes")),
        (
            "tools",
            json!([{"type": "function", "function": {"name": "f"}}]),
        ),
        ("tool_choice", json!("required")),
        (
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": "x"}}),
        ),
        ("frequency_penalty", json!(0.5)),
        ("presence_penalty", json!(-1)),
        ("logit_bias", json!({"50256": -100})),
        ("echo", json!(true)),
        ("best_of", json!(3)),
        ("suffix", json!("the end")),
    ];
    for (field, value) in refused {
        let mut body = json!({"prompt": "Once upon a time", "max_tokens": 2});
        body[field] = value.clone();
        let (status, error) = server.post("/v1/completions", &body);
        assert_eq!(status, 400, "{field}: {value} gave {error}");
        assert_eq!(error["error"]["param"], field, "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("{field} is ")), "{message}");
    }
    // Their defaults ask for nothing, and pass.
    let defaults = json!({
        "prompt": "Once upon a time", "max_tokens": 2, "logprobs": null, "top_logprobs": 0,
        "tools": [], "tool_choice": "none", "response_format": {"type": "text"},
        "frequency_penalty": 0, "presence_penalty": 0.0, "logit_bias": {}, "echo": false,
        "best_of": 1, "suffix": ""
    });
    let (status, whole) = server.post("/v1/completions", &defaults);
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["usage"]["completion_tokens"], 2);
    // A prompt and max_tokens that the context (512) cannot hold together: refused, not run.
    let (status, error) = server.post(
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 510}),
    );
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["code"], "context_length_exceeded", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ask for at most"),
        "{error}"
    );
    // A stop string of 257 bytes.
    let (status, error) = server.post(
        "/v1/completions",
        &json!({"prompt": "x", "stop": "a".repeat(257)}),
    );
    assert_eq!(status, 400, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 256"),
        "{error}"
    );
    // A user message without content (refused before the chat template is asked for).
    let (status, error) = server.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user"}]}),
    );
    assert_eq!(status, 400, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("without content"),
        "{error}"
    );
    // An unknown path and a wrong method: OpenAI's error object, not an empty body.
    let response = client()
        .get(format!("{}/v1/nothing", server.url))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    let error: Value = response.json().unwrap();
    assert_eq!(error["error"]["code"], "not_found", "{error}");
    let response = client()
        .delete(format!("{}/v1/chat/completions", server.url))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 405);
    let error: Value = response.json().unwrap();
    assert_eq!(error["error"]["code"], "method_not_allowed", "{error}");
}

/// `logprobs` work as OpenAI's do, streamed and whole: completions' `logprobs: N` gives parallel
/// lists (tokens, their logprobs, N alternatives each, offsets), the engine's own numbers
/// (`generate --logprobs N --json`'s); chat's `logprobs: true, top_logprobs: N` gives `content`
/// entries (token, logprob, bytes, top_logprobs); the tokens spell the text, a stream's chunks
/// carry their own tokens' entries, and a stop string's cut leaves out the tokens after it.
#[test]
fn logprobs_are_the_engines_streamed_or_whole() {
    let server = Server::stories();
    let mut command = Command::new(env!("CARGO_BIN_EXE_tokenometer"));
    command.arg("generate").args(stories_args(&[])).args([
        "--prompt",
        "Once upon a time",
        "--max-tokens",
        "20",
        "--json",
        "--raw",
        "--logprobs",
        "3",
    ]);
    let out = String::from_utf8(command.output().unwrap().stdout).unwrap();
    let engine: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "token")
        .map(|e| e["logprobs"].clone())
        .collect();
    assert_eq!(engine.len(), 20, "{out}");
    let body =
        json!({"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0, "logprobs": 3});
    let (status, whole) = server.post("/v1/completions", &body);
    assert_eq!(status, 200, "{whole}");
    let choice = &whole["choices"][0];
    let lp = &choice["logprobs"];
    let tokens: Vec<&str> = lp["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tokens.concat(), choice["text"].as_str().unwrap());
    let mut offset = 0;
    for (i, e) in engine.iter().enumerate() {
        assert_eq!(
            lp["token_logprobs"][i].as_f64().unwrap() as f32,
            e["logprob"].as_f64().unwrap() as f32
        );
        let top = lp["top_logprobs"][i].as_object().unwrap();
        assert!(top.len() <= 3 && !top.is_empty(), "{top:?}");
        assert_eq!(
            top[tokens[i]], lp["token_logprobs"][i],
            "greedy: the token heads its alternatives"
        );
        assert_eq!(lp["text_offset"][i], offset);
        offset += tokens[i].len();
    }
    // Streamed: each chunk carries its own tokens, and together they are the whole answer's.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (text, chunks) = streamed_text(&server.stream("/v1/completions", &streamed));
    assert_eq!(text, choice["text"].as_str().unwrap());
    let mut joined = Vec::new();
    for c in chunks.iter().filter(|c| c["choices"][0]["text"] != "") {
        let lp = &c["choices"][0]["logprobs"];
        let these: Vec<&str> = lp["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(
            these.concat(),
            c["choices"][0]["text"].as_str().unwrap(),
            "{c}"
        );
        joined.extend(lp["token_logprobs"].as_array().unwrap().clone());
    }
    assert_eq!(&Value::Array(joined), &lp["token_logprobs"]);
    // A stop string: the tokens up to it, none after.
    let mut stopped = body.clone();
    stopped["stop"] = json!(" was");
    let (_, cut) = server.post("/v1/completions", &stopped);
    let text = cut["choices"][0]["text"].as_str().unwrap();
    let tokens: Vec<&str> = cut["choices"][0]["logprobs"]["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        tokens.concat().starts_with(text) && tokens.concat().len() < text.len() + " was".len(),
        "{cut}"
    );
    assert!(text.len() < choice["text"].as_str().unwrap().len(), "{cut}");
    drop(server);

    // Chat, on SmolLM2 (a chat template): entries in OpenAI's shape, streamed or whole.
    let server = Server::start(&["--model", &smollm2(), "--threads", "1"]);
    let chat = |stream: bool| {
        json!({"messages": [{"role": "user", "content": "What is a token?"}],
        "max_completion_tokens": 12, "temperature": 0, "logprobs": true, "top_logprobs": 2, "stream": stream})
    };
    let (status, whole) = server.post("/v1/chat/completions", &chat(false));
    assert_eq!(status, 200, "{whole}");
    let content = whole["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(content.len(), 12, "{whole}");
    let mut spelled = Vec::new();
    for entry in content {
        let token = entry["token"].as_str().unwrap();
        let bytes: Vec<u8> = entry["bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect();
        spelled.extend(&bytes);
        let top = entry["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2, "{entry}");
        assert_eq!(top[0]["token"], token, "{entry}");
        assert_eq!(top[0]["logprob"], entry["logprob"], "{entry}");
        assert!(top[1]["logprob"].as_f64() <= top[0]["logprob"].as_f64());
        assert!(entry["logprob"].as_f64().unwrap() <= 0.0);
    }
    assert_eq!(
        String::from_utf8(spelled).unwrap(),
        whole["choices"][0]["message"]["content"]
    );
    let (text, chunks) = streamed_text(&server.stream("/v1/chat/completions", &chat(true)));
    assert_eq!(text, whole["choices"][0]["message"]["content"]);
    let entries: Vec<Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .filter(|c| {
            c["delta"]["content"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .flat_map(|c| c["logprobs"]["content"].as_array().unwrap().clone())
        .collect();
    assert_eq!(
        &Value::Array(entries),
        &whole["choices"][0]["logprobs"]["content"]
    );
    // Without logprobs, a choice's logprobs is null, as OpenAI sends it.
    let mut plain = chat(false);
    plain.as_object_mut().unwrap().remove("logprobs");
    plain.as_object_mut().unwrap().remove("top_logprobs");
    let (_, whole) = server.post("/v1/chat/completions", &plain);
    assert_eq!(whole["choices"][0]["logprobs"], Value::Null);
}

/// The KV cache a room can make the server hold is bounded (`--kv-memory`): requests asking for
/// the whole context at every place of `--parallel 32` are refused at once, naming the budget
/// (they could never fit), as is one that gives no max_tokens (1,024 by default, past this small
/// budget); requests that fit two at a time run two at a time, the others waiting their turn,
/// and every one is served in full. The server's own peak reservation says so, and the bytes it
/// holds for keys and values (`tokenometer:kv_cache_bytes`) stay within the budget and go when
/// the room empties.
#[test]
fn the_kv_budget_bounds_what_a_room_can_make_the_server_hold() {
    let model = smollm2();
    let server = Server::start(&[
        "--model",
        &model,
        "--threads",
        "1",
        "--parallel",
        "32",
        "--kv-memory",
        "10MB",
    ]);
    // SmolLM2-135M: 30 layers x 2 x 3 KV heads x 64 x 4 bytes = 46,080 bytes a position.
    let budget = server.metric("tokenometer:kv_cache_positions_budget");
    assert_eq!(budget, (10_000_000 / 46_080) as f64);
    let chat = |max: Option<usize>| {
        let mut body = json!({"messages": [{"role": "user", "content": "Count to ten."}],
            "temperature": 0, "ignore_eos": true});
        if let Some(max) = max {
            body["max_tokens"] = json!(max);
        }
        body
    };
    // `n` copies of `body` sent at once; their answers.
    let together = |n: usize, body: Value| {
        std::thread::scope(|s| {
            let asks: Vec<_> = (0..n)
                .map(|_| s.spawn(|| server.post("/v1/chat/completions", &body)))
                .collect();
            asks.into_iter()
                .map(|a| a.join().unwrap())
                .collect::<Vec<_>>()
        })
    };
    let hostile = together(32, chat(Some(8000)));
    for (status, error) in hostile
        .iter()
        .chain([&server.post("/v1/chat/completions", &chat(None))])
    {
        assert_eq!(*status, 400, "{error}");
        assert_eq!(error["error"]["code"], "kv_budget_exceeded", "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("--kv-memory") && message.contains("ask for at most"),
            "{message}"
        );
    }
    // Four that fit two at a time: about 40 prompt tokens and 60 more each, the bytes the
    // backend holds for keys and values watched while they run.
    let running = std::sync::atomic::AtomicBool::new(true);
    let (served, held) = std::thread::scope(|s| {
        let watch = s.spawn(|| {
            let mut held = Vec::new();
            while running.load(std::sync::atomic::Ordering::Relaxed) {
                held.push(server.metric("tokenometer:kv_cache_bytes"));
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            held
        });
        let served = together(4, chat(Some(60)));
        running.store(false, std::sync::atomic::Ordering::Relaxed);
        (served, watch.join().unwrap())
    });
    let most = held.iter().copied().fold(0.0, f64::max);
    assert!(
        most > 0.0 && most <= 10_000_000.0,
        "the KV bytes held, watched {} times, at most {most}",
        held.len()
    );
    let mut reservation = 0;
    for (status, whole) in &served {
        assert_eq!(*status, 200, "{whole}");
        assert_eq!(whole["usage"]["completion_tokens"], 60);
        reservation = whole["usage"]["total_tokens"].as_u64().unwrap();
    }
    assert!(
        (3 * reservation) as f64 > budget && (2 * reservation) as f64 <= budget,
        "{reservation}"
    );
    let peak = server.metric("tokenometer:kv_cache_positions_reserved_peak");
    assert_eq!(peak, 2.0 * reservation as f64, "two at a time, never more");
    assert_eq!(
        server.metric("tokenometer:kv_cache_positions_reserved"),
        0.0
    );
    assert_eq!(
        server.metric("tokenometer:kv_cache_bytes"),
        0.0,
        "an empty room holds none"
    );
}

/// One made-up word of random letters, `bytes` long: no cache of words helps a tokenizer with it,
/// and SentencePiece merges it across the whole length.
fn random_letters(bytes: usize) -> String {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (b'a' + (state % 26) as u8) as char
        })
        .collect()
}

/// Prompts are tokenized on the HTTP side, never on the engine's thread, and one with more bytes
/// than the context could hold in tokens is refused without tokenizing: while a stream runs (Gemma 3
/// 270M, one thread), a 3.9 MB prompt (refused at once, by its bytes) and one that takes the
/// tokenizer over a second (tokenized, then refused by its tokens) leave no gap in it a tenth as
/// long. (Until 2026-11-29 the engine tokenized them between steps: a 4 MB prompt stalled every
/// stream for 2.3 s. Until 2026-12-07 this test allowed a gap of 800 ms where its prompt took
/// 0.1 s to tokenize, so it could not catch a stall of that prompt.)
#[test]
fn a_huge_prompt_never_stalls_the_other_streams() {
    let gemma = common::models().join("cache/gemma3-270m/gemma-3-270m-q4_k_m.gguf");
    let server = Server::start(&["--model", gemma.to_str().unwrap(), "--threads", "1"]);
    let body = json!({"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0,
        "ignore_eos": true, "stream": true});
    let url = server.url.clone();
    let streaming = std::thread::spawn(move || {
        let response = client()
            .post(format!("{url}/v1/completions"))
            .json(&body)
            .send()
            .unwrap();
        let mut arrivals = Vec::new();
        for line in BufReader::new(response).lines() {
            let line = line.unwrap();
            if line.starts_with("data: ") {
                arrivals.push(Instant::now());
            }
        }
        arrivals
    });
    std::thread::sleep(Duration::from_millis(300));
    let huge = "word ".repeat(780_000);
    let (status, error) = server.post("/v1/completions", &json!({"prompt": huge, "max_tokens": 4}));
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["code"], "context_length_exceeded");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("bytes"),
        "{error}"
    );
    let long = random_letters(SLOW_PROMPT_BYTES);
    let started = Instant::now();
    let (status, error) = server.post("/v1/completions", &json!({"prompt": long, "max_tokens": 4}));
    let took = started.elapsed();
    assert_eq!(status, 400, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tokens but the context holds"),
        "{error}"
    );
    // The test means something only if tokenizing takes long enough to show in the stream.
    assert!(
        took >= Duration::from_secs(1),
        "the prompt was tokenized and refused in {took:?}: too quick for this test"
    );
    let during = Instant::now();
    let arrivals = streaming.join().unwrap();
    assert!(
        arrivals.last().is_some_and(|&last| last > during),
        "the stream ended before the slow prompt was refused"
    );
    assert!(arrivals.len() > 100, "{}", arrivals.len());
    let gap = arrivals.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    assert!(
        gap * 10 < took,
        "a gap of {gap:?} in the stream while a prompt took {took:?} to tokenize"
    );
}

/// Bytes of random letters that Gemma 3's tokenizer took 2.3 s to tokenize (2 cores, 2026-12-07),
/// under the bytes its context could hold in tokens (so they are tokenized, then refused).
const SLOW_PROMPT_BYTES: usize = 900_000;

/// A client that stops reading its stream loses its place after `--write-timeout`: its
/// connection (a 4 KB receive buffer) fills, the server's events for it wait unread, and after
/// the timeout its request ends as `abort`, freeing its place and cache, while another client is
/// served. (Until 2026-11-29 it held its place until its generation ended, 4,000 tokens here.)
#[test]
fn a_client_that_stops_reading_loses_its_place() {
    let server = Server::start(&[
        "--model",
        &smollm2(),
        "--threads",
        "1",
        "--parallel",
        "2",
        "--write-timeout",
        "1",
    ]);
    let address: std::net::SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&address.into()).unwrap();
    let mut silent: TcpStream = socket.into();
    let body = json!({"messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": 4000, "temperature": 0, "ignore_eos": true, "stream": true,
        // 20 alternatives a token make each chunk about 3 kB: the buffers fill in seconds.
        "logprobs": true, "top_logprobs": 20})
    .to_string();
    write!(
        silent,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let aborted = || {
        server
            .get("/metrics")
            .lines()
            .find(|l| {
                l.contains("request_success_total") && l.contains("finished_reason=\"abort\"")
            })
            .map_or(0.0, |l| {
                l.rsplit(' ').next().unwrap().parse::<f64>().unwrap()
            })
    };
    let started = Instant::now();
    while aborted() < 1.0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the silent client still holds its place after {:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(server.metric("tokenometer:num_requests_running"), 0.0);
    // Another client is served, while the silent one's connection is still open.
    let (status, whole) = server.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}),
    );
    assert_eq!(status, 200, "{whole}");
    drop(silent);
}

/// The request bodies being read share a memory budget (`--body-memory`): while a slow client
/// holds most of it, a body that does not fit beside it gets 503 at once (with Retry-After and
/// OpenAI's error shape), a small one is served, and the large one is served once the slow client
/// has gone.
#[test]
fn request_bodies_share_a_memory_budget() {
    let server = Server::start(&stories_args(&["--body-memory", "1MB"]));
    let address = server.url.trim_start_matches("http://").to_string();
    let mut slow = TcpStream::connect(&address).unwrap();
    write!(
        slow,
        "POST /v1/completions HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: 900000\r\n\r\n{{\"prompt\""
    )
    .unwrap();
    slow.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let padded = |n: usize| {
        format!(
            "{{\"prompt\": \"Once\", \"max_tokens\": 2}}{}",
            " ".repeat(n)
        )
    };
    let send = |body: String| {
        let response = client()
            .post(format!("{}/v1/completions", server.url))
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .unwrap();
        let retry = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let status = response.status().as_u16();
        (status, retry, response.json::<Value>().unwrap())
    };
    let (status, retry, body) = send(padded(200_000));
    assert_eq!(status, 503, "{body}");
    assert_eq!(retry.as_deref(), Some("1"));
    assert_eq!(body["error"]["code"], "server_busy", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--body-memory"),
        "{body}"
    );
    let (status, _, body) = send(padded(100));
    assert_eq!(status, 200, "{body}");
    drop(slow);
    std::thread::sleep(Duration::from_millis(300));
    let (status, _, body) = send(padded(200_000));
    assert_eq!(status, 200, "{body}");
}

/// Raise this process's soft limit on open files to at least `files` (within the hard limit), or
/// say why not.
fn allow_open_files(files: u64) {
    // SAFETY: getrlimit and setrlimit read and write the struct given, nothing else.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur >= files {
            return;
        }
        assert!(
            limit.rlim_max >= files,
            "this test opens {files} connections, but the hard limit on open files is {}: raise it \
             (ulimit -Hn)",
            limit.rlim_max
        );
        limit.rlim_cur = files;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

/// 5,000 connections that send nothing, opened at once: the kernel holds them (the server's
/// backlog is 4,096), the server takes at most its connection cap (4,096, or its file limit less
/// 64) and closes each idle one after the header timeout, and a real client among them, waiting
/// behind the cap, is answered once places free.
#[test]
fn five_thousand_idle_connections_and_a_real_client_is_served() {
    allow_open_files(5_500);
    let server = Server::start(&stories_args(&["--header-timeout", "2"]));
    let address = server.url.trim_start_matches("http://").to_string();
    let opening = Instant::now();
    let mut idle: Vec<TcpStream> = (0..5_000)
        .map(|i| {
            TcpStream::connect(&address)
                .unwrap_or_else(|e| panic!("connection {i} of 5,000 to the server: {e}"))
        })
        .collect();
    let opened = opening.elapsed();
    let started = Instant::now();
    let (status, body) = server.post(
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}),
    );
    let waited = started.elapsed();
    eprintln!("5,000 connections opened in {opened:?}; the real client answered in {waited:?}");
    // The kernel caps the backlog at net.core.somaxconn (4,096 since Linux 5.4; 128 before).
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        opened < Duration::from_secs(10) || somaxconn < 4096,
        "5,000 connections took {opened:?} to open: the server's backlog overflowed"
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        waited < Duration::from_secs(30),
        "the real client waited {waited:?} behind 5,000 idle connections"
    );
    // The server closed the idle connections it took (a read ends, with nothing).
    let first = &mut idle[0];
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(first.read(&mut byte).unwrap_or(0), 0);
    assert!(!server.get("/health").is_empty());
}
