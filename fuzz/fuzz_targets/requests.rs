//! `tokenometer serve`'s request types (`crate/api/openai.rs`) on any JSON: a body parses or is
//! refused, and a parsed one is checked into the engine's options or a 400 naming a field,
//! without panicking; what passes is within the limits the server promises.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenometer::api::openai::{ChatRequest, CompletionRequest, MAX_STOP_BYTES, MAX_STOPS, Params};

fn check(params: &Params) {
    match params.check(8192, 7) {
        Ok(checked) => {
            assert!(checked.max_tokens.is_none_or(|m| (1..=8192).contains(&m)));
            assert!(checked.stops.len() <= MAX_STOPS);
            assert!(
                checked
                    .stops
                    .iter()
                    .all(|s| !s.is_empty() && s.len() <= MAX_STOP_BYTES)
            );
            assert!((0.0..=2.0).contains(&checked.sampling.temperature));
            assert!(checked.logprobs.is_none_or(|n| n <= 20));
        }
        Err(e) => assert_eq!(e.status, 400),
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = serde_json::from_slice::<ChatRequest>(data) {
        let _ = request.turns();
        check(&request.params);
    }
    if let Ok(request) = serde_json::from_slice::<CompletionRequest>(data) {
        let _ = request.text();
        check(&request.params);
    }
});
