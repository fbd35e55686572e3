//! The meter's formulas on hand-computed cases, driven by a fake clock (the events' own times).
#![cfg(not(target_arch = "wasm32"))]

use tokenometer::decode::{Event, ModelInfo, StopReason};
use tokenometer::meter::{
    Conditions, Meter, Products, Spread, aggregate_decode_tps, count_words, percentiles, spread,
    word_ends_utf16,
};
use tokenometer::{BackendKind, Quant, Sampling};

fn info() -> ModelInfo {
    ModelInfo {
        name: "test".into(),
        architecture: "llama".into(),
        parameters: 1000,
        quant: Quant::F32,
        weight_bytes: 4000,
        bytes_per_token: 2_000_000,
        backend: BackendKind::Cpu,
        adapter: "CPU".into(),
        backend_note: None,
        context_length: 256,
        vocab_size: 512,
        quant_exceptions: vec![],
        chat_template: None,
        unrecognized_chat_template: None,
    }
}

fn meter() -> Meter {
    Meter::new(
        Conditions::new(&info(), Sampling::default(), 1, Some(50.0)),
        240.0,
    )
}

fn prefill(m: &mut Meter, prompt_tokens: usize, queued: f64, tokenize: f64, prefill: f64) {
    m.observe(&Event::Prefill {
        prompt_tokens,
        queued_ms: queued,
        tokenize_ms: tokenize,
        prefill_ms: prefill,
        t_ms: queued + tokenize + prefill,
        prompt: Vec::new(),
    });
}

fn token(m: &mut Meter, t_ms: f64, text: &str) {
    let pos = m.token_times().len();
    m.observe(&Event::Token {
        pos,
        id: 7,
        text: text.into(),
        t_ms,
        drafted: false,
        logprobs: None,
        phases: None,
    });
}

fn done(m: &mut Meter, t_ms: f64) {
    let n = m.token_times().len();
    m.observe(&Event::Done {
        reason: StopReason::MaxTokens,
        prompt_tokens: 10,
        output_tokens: n,
        t_ms,
        trailing_text: String::new(),
    });
}

#[test]
fn hand_computed_run() {
    let mut m = meter();
    // Queue 2 ms, tokenize 1 ms, prefill 20 ms for 10 prompt tokens: first token at 23 ms.
    prefill(&mut m, 10, 2.0, 1.0, 20.0);
    // Five tokens 10 ms apart: 4 tokens after the first over 40 ms = 100 tok/s.
    for (i, word) in ["Hello", " big", " wide", " world", "!"].iter().enumerate() {
        token(&mut m, 23.0 + 10.0 * i as f64, word);
    }
    done(&mut m, 64.0);
    let r = m.report(64.0);
    assert_eq!(r.ttft_ms, Some(23.0));
    assert_eq!(r.prefill_ms, Some(20.0));
    assert_eq!(r.prefill_tps, Some(500.0));
    assert_eq!(r.decode_ms, Some(40.0));
    assert_eq!(r.decode_tps, Some(100.0));
    // 4 words ("!" alone is no word); decode's span holds the 3 after the first token's
    // ("Hello"), as its tokens are the 4 after the first: 3 over 40 ms = 75 words/s (until
    // 2026-11-29 all 4 were divided by that span: 100); a 240 wpm reader does 4 words/s.
    assert_eq!(r.words, 4);
    assert_eq!(r.words_per_s, Some(75.0));
    assert_eq!(r.reading_speed_x, Some(18.75));
    assert_eq!(r.reading_time_s, 1.0);
    assert_eq!(r.tokens_per_word, Some(1.25));
    // Predicted = TTFT + 5 tokens / 100 tok/s = 23 + 50 ms.
    assert_eq!(r.predicted_total_ms, Some(73.0));
    assert_eq!(r.total_ms, Some(64.0));
    // 2 MB per token at 100 tok/s = 0.2 GB/s.
    assert!((r.effective_gb_per_s.unwrap() - 0.2).abs() < 1e-12);
    let p = r.inter_token_ms.unwrap();
    assert_eq!((p.p50, p.p90, p.p99, p.max), (10.0, 10.0, 10.0, 10.0));
    assert_eq!(r.conditions.prompt_tokens, 10);
    assert_eq!(r.conditions.output_tokens, 5);
    assert_eq!(r.conditions.stop_reason, Some(StopReason::MaxTokens));
    assert_eq!(r.conditions.warm_up_ms, Some(50.0));
    assert_eq!(r.per_request_tps, Some(100.0));
    assert_eq!(r.aggregate_tps, Some(100.0));
}

#[test]
fn zero_one_and_two_tokens() {
    let mut m = meter();
    prefill(&mut m, 3, 0.0, 1.0, 4.0);
    let r = m.report(5.0);
    assert_eq!(
        (r.ttft_ms, r.decode_tps, r.words_per_s, r.inter_token_ms),
        (None, None, None, None)
    );
    assert_eq!(r.predicted_total_ms, None);
    assert_eq!(r.effective_gb_per_s, None);

    token(&mut m, 5.0, " one");
    let r = m.report(5.0);
    assert_eq!(r.ttft_ms, Some(5.0));
    assert_eq!(r.decode_tps, None, "one token has no decode rate");
    assert_eq!(r.live_decode_tps, None);
    assert_eq!(r.inter_token_ms, None);

    token(&mut m, 9.0, " two");
    let r = m.report(9.0);
    assert_eq!(r.decode_tps, Some(250.0));
    assert_eq!(r.inter_token_ms.unwrap().max, 4.0);

    // Two tokens at the same instant: the span is empty, so the rate is undefined, not infinite.
    let mut m = meter();
    token(&mut m, 5.0, "a");
    token(&mut m, 5.0, "b");
    let r = m.report(5.0);
    assert_eq!(r.decode_tps, None);
    assert!(
        serde_json::to_string(&r)
            .unwrap()
            .contains("\"decode_tps\":null")
    );
}

#[test]
fn live_window_is_16_tokens_or_1_second_whichever_is_shorter() {
    // Fast stream: 100 tokens 2 ms apart. The window is the last 16 tokens (30 ms), not 1 s.
    let mut m = meter();
    for i in 0..100 {
        token(&mut m, 2.0 * i as f64, "x");
    }
    assert_eq!(m.live_decode_tps(198.0), Some(15.0 / 30.0 * 1e3));

    // Slow stream: first 10 tokens 10 ms apart, then 5 tokens 250 ms apart; at the last token the
    // 1 s window holds those 5 (1000 ms ago is exactly the first of them): 4 gaps of 250 ms.
    let mut m = meter();
    let mut t = 0.0;
    for _ in 0..10 {
        token(&mut m, t, "x");
        t += 10.0;
    }
    t += 1000.0;
    for _ in 0..5 {
        token(&mut m, t, "x");
        t += 250.0;
    }
    let last = *m.token_times().last().unwrap();
    assert_eq!(m.live_decode_tps(last), Some(4.0));
    // The needle falls while nothing arrives: 500 ms later the window holds 3 tokens over 1000 ms.
    assert_eq!(m.live_decode_tps(last + 500.0), Some(2.0));
    // And goes blank once fewer than two tokens are within the last second.
    assert_eq!(m.live_decode_tps(last + 2000.0), None);
}

#[test]
fn percentile_edges() {
    assert_eq!(percentiles(&[]), None);
    let one = percentiles(&[7.0]).unwrap();
    assert_eq!((one.p50, one.p90, one.p99, one.max), (7.0, 7.0, 7.0, 7.0));
    // 1..=100: nearest rank gives p50 = 50, p90 = 90, p99 = 99.
    let hundred: Vec<f64> = (1..=100).rev().map(f64::from).collect();
    let p = percentiles(&hundred).unwrap();
    assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
    // Ten values: p99 is the maximum, p90 the ninth.
    let ten: Vec<f64> = (1..=10).map(f64::from).collect();
    let p = percentiles(&ten).unwrap();
    assert_eq!((p.p50, p.p90, p.p99), (5.0, 9.0, 10.0));
}

#[test]
fn predicted_total_matches_actual_on_a_steady_stream() {
    // 200 tokens 8 ms apart after a 120 ms TTFT; the engine spends one more step finding EOS.
    let mut m = meter();
    prefill(&mut m, 20, 0.0, 0.5, 119.5);
    for i in 0..200 {
        token(&mut m, 120.0 + 8.0 * i as f64, " w");
    }
    let end = 120.0 + 8.0 * 200.0;
    done(&mut m, end);
    let r = m.report(end);
    let (actual, predicted) = (r.total_ms.unwrap(), r.predicted_total_ms.unwrap());
    assert!(
        (predicted - actual).abs() / actual < 0.05,
        "{predicted} vs {actual}"
    );
}

#[test]
fn word_ends_are_utf16_offsets_of_the_same_words() {
    assert_eq!(word_ends_utf16(""), Vec::<usize>::new());
    // "..." is not a word; "é" is one UTF-16 unit, "🦙" two, "你好" two.
    let text = " Hé ... 🦙x 你好!";
    assert_eq!(word_ends_utf16(text), vec![3, 11, 15]);
    assert_eq!(word_ends_utf16(text).len(), count_words(text));
    let utf16: Vec<u16> = text.encode_utf16().collect();
    assert_eq!(String::from_utf16(&utf16[..11]).unwrap(), " Hé ... 🦙x");
}

#[test]
fn a_spread_is_median_min_and_max_of_the_finite_values() {
    assert_eq!(spread(&[]), None);
    assert_eq!(spread(&[f64::NAN]), None);
    assert_eq!(
        spread(&[30.0, 10.0, f64::NAN, 20.0]),
        Some(Spread {
            n: 3,
            median: 20.0,
            min: 10.0,
            max: 30.0
        })
    );
    // An even count's median is the lower middle, as the percentiles count it.
    assert_eq!(spread(&[4.0, 1.0, 3.0, 2.0]).unwrap().median, 2.0);
}

#[test]
fn words_are_counted_from_the_text() {
    assert_eq!(count_words(""), 0);
    assert_eq!(count_words("Hello, world!"), 2);
    assert_eq!(
        count_words("  Line one.\nLine\ttwo —  \n\n \"quoted\" ... don't well-known"),
        7
    );
    assert_eq!(count_words("Führer naïve 你好 🦙 ½"), 4);
    assert_eq!(count_words("- * ... !!"), 0);
    // Words split across tokens are counted once, from the joined text.
    let mut m = meter();
    for piece in [" Th", "ere", " was", "\n", "a", " cat", "."] {
        token(&mut m, 0.0, piece);
    }
    assert_eq!(m.report(0.0).words, 4);
    assert_eq!(m.text(), " There was\na cat.");
}

#[test]
fn aggregate_and_per_request_differ_in_a_batch() {
    // Two sequences decoding side by side, each 10 tokens 20 ms apart: each runs at 50 tok/s,
    // the batch at 100 tok/s.
    let a: Vec<f64> = (0..10).map(|i| 20.0 * i as f64).collect();
    let b: Vec<f64> = (0..10).map(|i| 1.0 + 20.0 * i as f64).collect();
    let aggregate = aggregate_decode_tps(&[&a, &b]).unwrap();
    assert!((aggregate - 18.0 / 181.0 * 1e3).abs() < 1e-9);
    assert_eq!(aggregate_decode_tps(&[&a]), Some(50.0));
    assert_eq!(aggregate_decode_tps(&[&[], &[3.0]]), None);
}

#[test]
fn conditions_line_names_everything_a_figure_depends_on() {
    let mut m = meter();
    prefill(&mut m, 10, 0.0, 1.0, 2.0);
    token(&mut m, 3.0, "x");
    let line = m.report(3.0).conditions.summary();
    for part in [
        "test",
        "1K params",
        "f32",
        "4.0 kB",
        "cpu",
        "[CPU]",
        "batch 1",
        "prompt 10 tok",
        "output 1 tok",
        "context 256",
        "greedy",
    ] {
        assert!(line.contains(part), "{part:?} missing in {line}");
    }
}

fn load_meter(users: usize) -> tokenometer::meter::BatchMeter {
    let conditions = tokenometer::meter::LoadConditions {
        source: tokenometer::meter::Source::Engine(info()),
        users,
        max_batch: Some(users),
        arrival: "burst".into(),
        max_tokens: 3,
        sampling: Sampling::default(),
        warm_up_ms: None,
        slo: None,
    };
    tokenometer::meter::BatchMeter::new(conditions, 240.0)
}

fn event(text: &str, t_ms: f64) -> Event {
    Event::Token {
        pos: 0,
        id: 7,
        text: text.into(),
        t_ms,
        drafted: false,
        logprobs: None,
        phases: None,
    }
}

fn end(reason: StopReason, output_tokens: usize, t_ms: f64) -> Event {
    Event::Done {
        reason,
        prompt_tokens: 4,
        output_tokens,
        t_ms,
        trailing_text: String::new(),
    }
}

#[test]
fn a_load_test_reports_aggregate_per_user_ttft_and_inter_token_figures() {
    // User 0 is made at 0 ms, user 1 at 10 ms; each event's time is from its own request.
    let mut m = load_meter(2);
    m.arrive(0, 0.0);
    m.arrive(1, 10.0);
    for t in [5.0, 15.0, 25.0] {
        m.observe(0, &event(" a", t));
    }
    m.observe(0, &end(StopReason::MaxTokens, 3, 25.0));
    for t in [20.0, 25.0] {
        m.observe(1, &event(" b", t));
    }
    m.observe(1, &end(StopReason::Eos, 2, 25.0));
    let r = m.report();
    assert_eq!((r.users, r.requests_completed), (2, 2));
    assert_eq!((r.prompt_tokens, r.output_tokens), (8, 5));
    // 5 tokens from the first request (0 ms) to the last token (10 + 25 = 35 ms).
    assert_eq!(r.aggregate_tps, Some(5.0 / 35.0 * 1e3));
    // Per user: 2 tokens after the first over 20 ms = 100/s; 1 over 5 ms = 200/s.
    assert_eq!(r.per_user_tps_p50, Some(100.0));
    assert_eq!(r.per_user_tps_min, Some(100.0));
    // TTFTs 5 and 20 ms, each from its own request: queueing counts.
    assert_eq!((r.ttft_ms_p50, r.ttft_ms_p99), (Some(5.0), Some(20.0)));
    // Gaps 10, 10 and 5 ms, all users together.
    assert_eq!((r.itl_ms_p50, r.itl_ms_p99), (Some(10.0), Some(10.0)));
    assert_eq!(r.wall_ms, Some(35.0));
}

#[test]
fn a_cancelled_user_is_not_completed_and_a_one_token_user_has_no_rate() {
    let mut m = load_meter(2);
    m.arrive(0, 0.0);
    m.arrive(1, 0.0);
    m.observe(0, &event(" a", 4.0));
    m.observe(0, &end(StopReason::Cancelled, 1, 6.0));
    m.observe(1, &event(" b", 8.0));
    m.observe(1, &event(" c", 12.0));
    m.observe(1, &end(StopReason::MaxTokens, 2, 12.0));
    let r = m.report();
    assert_eq!(r.requests_completed, 1);
    // Only user 1 has a decode rate (one token after its first, over 4 ms).
    assert_eq!(r.per_user_tps_p50, Some(250.0));
    assert_eq!(r.per_user_tps_min, Some(250.0));
    assert_eq!(r.aggregate_tps, Some(3.0 / 12.0 * 1e3));
    assert_eq!(r.wall_ms, Some(12.0));
    let empty = load_meter(0).report();
    assert_eq!(
        (empty.aggregate_tps, empty.wall_ms, empty.ttft_ms_p99),
        (None, None, None)
    );
}

#[test]
fn a_load_test_says_whether_users_keep_up_with_a_reader() {
    // One user, 4 tokens ("a b c d", 4 words) over 30 ms after the first: 100 tok/s, 100 words/s.
    let mut m = load_meter(1);
    m.arrive(0, 0.0);
    for (i, w) in ["a", " b", " c", " d"].iter().enumerate() {
        m.observe(0, &event(w, 10.0 + 10.0 * i as f64));
    }
    m.observe(0, &end(StopReason::MaxTokens, 4, 40.0));
    let r = m.report();
    // 240 wpm is 4 words/s; at 1 token a word that is 4 tok/s.
    assert_eq!(r.reading_tps, Some(4.0));
    assert_eq!(r.per_user_below_reading, Some(false));
}

#[test]
fn a_ceiling_is_the_median_pass_as_tokens_bytes_and_multiply_adds_a_second() {
    // 8 rows of a 60 MB model with 15.2M multiply-adds a row: passes of 4, 2 and 3 ms.
    let p = Products::new(8, &[4.0, 2.0, 3.0], 60_000_000, 121_600_000).unwrap();
    assert_eq!((p.rows, p.passes, p.ms_p50), (8, 3, 3.0));
    // 8 tokens in 3 ms; 60 MB in 3 ms; 121.6M multiply-adds in 3 ms.
    assert!((p.tps - 8.0 / 3.0e-3).abs() < 1e-9, "{p:?}");
    assert!((p.gb_per_s - 20.0).abs() < 1e-9, "{p:?}");
    assert!((p.gmac_per_s - 121.6 / 3.0).abs() < 1e-9, "{p:?}");
    // An even count takes the lower middle, as every percentile here does.
    assert_eq!(Products::new(1, &[1.0, 5.0], 1, 1).unwrap().ms_p50, 1.0);
    // No passes, or none that took time: no ceiling, never infinity.
    assert_eq!(Products::new(1, &[], 1, 1), None);
    assert_eq!(Products::new(1, &[0.0, 0.0, 0.0], 1, 1), None);
}

fn endpoint_meter() -> Meter {
    let source = tokenometer::meter::Source::Endpoint(tokenometer::meter::EndpointInfo {
        endpoint: "http://127.0.0.1:8080/v1".into(),
        model: "m".into(),
        server: Some("llama.cpp".into()),
        token_counts: tokenometer::meter::TokenCounts::FinalUsage,
    });
    Meter::new(Conditions::of(source, Sampling::default(), 1), 240.0)
}

fn chunk(tokens: usize, text: &str, t_ms: f64, reasoning: bool) -> Event {
    Event::Chunk {
        tokens,
        text: text.into(),
        t_ms,
        reasoning,
        logprobs: Vec::new(),
    }
}

#[test]
fn an_endpoints_chunks_share_their_gaps_and_a_final_count_is_spread_over_them() {
    // Three chunks 30 ms apart, counted one a chunk; the server's final usage says 7 tokens: the
    // six after the first chunk's one are taken as three a chunk, so each token's gap is 10 ms.
    let mut m = endpoint_meter();
    for (i, t) in [100.0, 130.0, 160.0].into_iter().enumerate() {
        m.observe(&chunk(1, &format!("w{i} "), t, false));
    }
    m.observe(&end(StopReason::Eos, 7, 170.0));
    let r = m.final_report();
    assert_eq!(r.conditions.output_tokens, 7);
    assert_eq!(r.ttft_ms, Some(100.0));
    assert_eq!(r.decode_ms, Some(60.0));
    assert_eq!(r.decode_tps, Some(100.0)); // 6 tokens after the first over 60 ms
    assert_eq!(r.inter_token_ms.unwrap().p50, 10.0);
    assert_eq!(r.inter_chunk_ms.unwrap().p50, 30.0);
    assert_eq!(
        r.effective_gb_per_s, None,
        "an endpoint's weight bytes are unknown"
    );
    assert!(
        r.summary
            .contains("m at http://127.0.0.1:8080/v1 (llama.cpp)"),
        "{}",
        r.summary
    );
    assert!(r.summary.contains("final usage"), "{}", r.summary);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["conditions"]["endpoint"], "http://127.0.0.1:8080/v1");
    assert!(json["conditions"].get("quant").is_none());
}

#[test]
fn reasoning_counts_as_output_but_ttft_is_the_answers() {
    let mut m = endpoint_meter();
    m.observe(&chunk(3, "thinking", 50.0, true));
    m.observe(&chunk(2, "", 60.0, false)); // a chunk with tokens but no text yet
    m.observe(&chunk(1, "Yes", 80.0, false));
    m.observe(&chunk(0, ".", 85.0, false)); // text a server held back: no tokens, no arrival
    m.observe(&end(StopReason::Eos, 0, 90.0));
    let r = m.final_report();
    assert_eq!(r.conditions.output_tokens, 6);
    assert_eq!(r.reasoning_tokens, 3);
    assert_eq!(r.first_output_ms, Some(50.0));
    assert_eq!(r.ttft_ms, Some(80.0));
    assert_eq!(m.text(), "thinkingYes.");
    // Per token: 10 ms shared by the chunk of two, 20 ms for the last: [5, 5, 20].
    assert_eq!(m.token_gaps(), vec![5.0, 5.0, 20.0]);
}

/// A server's first chunk may carry several tokens: they are not decode (nothing timed them
/// apart), so decode tok/s counts the tokens after the first chunk over the time from it to the
/// last, as AIPerf does with per-chunk usage (until 2026-11-29 the first chunk's extra tokens
/// were credited to decode: 4 tokens over 20 ms here, 200 tok/s).
#[test]
fn a_multi_token_first_chunk_is_not_credited_to_decode() {
    let mut m = meter();
    let chunk = |tokens: usize, text: &str, t_ms: f64| Event::Chunk {
        tokens,
        text: text.into(),
        t_ms,
        reasoning: false,
        logprobs: Vec::new(),
    };
    m.observe(&chunk(3, "Once upon a", 10.0));
    m.observe(&chunk(1, " time", 20.0));
    m.observe(&chunk(1, " there", 30.0));
    let r = m.report(30.0);
    assert_eq!(r.conditions.output_tokens, 5);
    assert_eq!(r.decode_ms, Some(20.0));
    assert_eq!(r.decode_tps, Some(100.0));
    // Words likewise: the 2 after the first chunk's 3.
    assert_eq!(r.words_per_s, Some(100.0));
}

/// A failed request counts in TTFT's percentiles as never (+infinity): two quick requests and two
/// that failed (one after a first token) give a median of the slower quick one and a p99 of
/// never (until 2026-11-29 the failed ones dropped out: p50 5 ms, p99 8 ms).
#[test]
fn failed_requests_count_in_ttft_percentiles_as_never() {
    let mut m = load_meter(4);
    for seq in 0..4 {
        m.arrive(seq, 0.0);
    }
    m.observe(0, &event(" a", 5.0));
    m.observe(0, &end(StopReason::MaxTokens, 1, 6.0));
    m.observe(1, &event(" b", 8.0));
    m.observe(1, &end(StopReason::MaxTokens, 1, 9.0));
    m.observe(2, &event(" c", 3.0));
    m.fail(
        2,
        "the stream closed without a finish reason or [DONE]".into(),
    );
    m.fail(3, "answered 500".into());
    let r = m.report();
    assert_eq!(
        (r.requests, r.requests_completed, r.requests_failed),
        (4, 2, 2)
    );
    assert_eq!(r.ttft_ms_p50, Some(8.0));
    assert_eq!(r.ttft_ms_p99, Some(f64::INFINITY));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["ttft_ms_p99"], serde_json::Value::Null);
    assert_eq!(json["requests_failed"], 2);
}
