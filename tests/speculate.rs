//! Speculative decoding keeps plain decoding's output: greedy text token for token with prompt
//! lookup and with a draft model, on the CPU (every quantization, one and two threads) and on wgpu;
//! drafts are really kept (so the comparison is not vacuous), the meter counts them, and sampling
//! with drafts runs to its length. The rejection rule's distribution is tested in
//! `crate/decode/speculate.rs`.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::*;
use tokenometer::api::drive::MeteredRun;
use tokenometer::cpu::Threads;
use tokenometer::{
    Backend, BackendChoice, Engine, Event, Flow, GenerateOptions, ModelFiles, Quant, Sampling,
    Speculation,
};

/// Prompts where lookup finds n-grams to copy (the story models repeat names and phrases), and
/// one where it finds little.
const PROMPTS: [&str; 4] = [
    "Once upon a time",
    "Lily and Ben went to the park. Lily and Ben went to the park. Lily and Ben",
    "The cat sat on the mat. The dog sat on the log. The cat sat",
    "Tom wanted to fly",
];

/// The ids a run generates, and how many drafts were kept.
fn run(
    engine: &Engine,
    prompt: &str,
    options: &GenerateOptions,
    speculation: Option<&Speculation>,
) -> (Vec<u32>, usize) {
    let (mut ids, mut kept) = (Vec::new(), 0);
    pollster::block_on(
        engine.generate_speculative(prompt, options, speculation, &mut |e| {
            match e {
                Event::Token { id, drafted, .. } => {
                    ids.push(*id);
                    kept += usize::from(*drafted);
                }
                Event::Verify { accepted, .. } => assert!(*accepted <= 64),
                _ => {}
            }
            Flow::Continue
        }),
    )
    .expect("generates");
    (ids, kept)
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        ..Default::default()
    }
}

/// Greedy with `speculation` gives plain greedy's ids on every prompt; returns the drafts kept.
fn same_as_plain(engine: &Engine, speculation: &Speculation, what: &str) -> usize {
    let mut kept = 0;
    for prompt in PROMPTS {
        let (plain, _) = run(engine, prompt, &greedy(120), None);
        let (fast, k) = run(engine, prompt, &greedy(120), Some(speculation));
        assert_eq!(fast, plain, "{what}, {prompt:?}");
        kept += k;
    }
    kept
}

/// Fixed draft lengths (every length the cache is rolled back from), then the lengths measured
/// costs favour, which depend on the machine's timings: the same ids whatever was drafted. How
/// many the measured lengths keep is not asserted: on a loaded debug build they may draft only
/// their first probe (the choice itself is tested on given costs in `crate/decode/speculate.rs`).
#[test]
fn lookup_gives_plain_greedy_s_tokens_on_the_cpu() {
    for quant in [Quant::F32, Quant::Q8, Quant::Q4] {
        for threads in [1, 2] {
            let backend = Backend::cpu().with_threads(Threads::new(threads).unwrap());
            let engine = engine(&backend, quant);
            for max_draft in [1, 4, 8] {
                let mut speculation = Speculation::lookup();
                speculation.max_draft = max_draft;
                speculation.fixed = true;
                let what = format!("{quant}, {threads} threads, {max_draft} drafts a step");
                let kept = same_as_plain(&engine, &speculation, &what);
                assert!(kept > 20, "{what}: only {kept} drafts kept");
            }
            let what = format!("{quant}, {threads} threads, measured lengths");
            same_as_plain(&engine, &Speculation::lookup(), &what);
        }
    }
}

/// Fixed lengths: a draft model as small as the model drafts only where its passes are cheap next
/// to the model's, which on stories260K depends on the machine's timings.
fn fixed(mut speculation: Speculation) -> Speculation {
    speculation.fixed = true;
    speculation.max_draft = 4;
    speculation
}

#[test]
fn a_draft_model_gives_plain_greedy_s_tokens() {
    let target = engine(&Backend::cpu(), Quant::F32);
    let draft = engine(&Backend::cpu(), Quant::Q4);
    let speculation = Speculation::draft_model(&target, draft, "stories260K q4".into()).unwrap();
    let speculation = fixed(speculation);
    let kept = same_as_plain(&target, &speculation, "q4 drafting for f32");
    // The q4 model agrees with f32 on most greedy tokens.
    assert!(kept > 200, "only {kept} drafts kept");
    // The shipped GGUF (its own tokenizer inside) drafts as well.
    let gguf = Engine::load(
        ModelFiles::gguf(
            "stories260K-q8_0",
            read(stories260k("stories260K-q8_0.gguf")),
        ),
        None,
        Quant::Stored,
        &Backend::cpu(),
    )
    .unwrap();
    let speculation = fixed(Speculation::draft_model(&target, gguf, "GGUF q8_0".into()).unwrap());
    assert!(same_as_plain(&target, &speculation, "GGUF drafting for f32") > 200);
}

#[test]
fn lookup_gives_plain_greedy_s_tokens_on_wgpu() {
    let gpu = pollster::block_on(Backend::init(BackendChoice::Wgpu)).expect("a wgpu adapter");
    for quant in [Quant::F32, Quant::Q8] {
        let engine = engine(&gpu, quant);
        let mut speculation = Speculation::lookup();
        speculation.fixed = true;
        let kept = same_as_plain(&engine, &speculation, &format!("wgpu {quant}"));
        assert!(kept > 20, "wgpu {quant}: only {kept} drafts kept");
    }
}

/// Each token's log probabilities and alternatives, and whether it was a kept draft.
fn with_logprobs(
    engine: &Engine,
    options: &GenerateOptions,
    speculation: Option<&Speculation>,
) -> Vec<(u32, bool, tokenometer::decode::TokenLogprobs)> {
    let mut tokens = Vec::new();
    pollster::block_on(
        engine.generate_speculative(PROMPTS[1], options, speculation, &mut |e| {
            if let Event::Token {
                id,
                drafted,
                logprobs,
                ..
            } = e
            {
                let l = logprobs
                    .as_deref()
                    .expect("every token has them, drafts too");
                tokens.push((*id, *drafted, l.clone()));
            }
            Flow::Continue
        }),
    )
    .expect("generates");
    tokens
}

/// A speculating run that asks for log probabilities (the page's token inspector keeps them in
/// every run) gets plain decoding's for every token, the kept drafts' read from the verifying
/// pass's logits at their place: the same ids, ranks and alternatives, the same numbers within
/// what a wider pass's arithmetic moves them, on the CPU and on wgpu. Sampling with drafts gives
/// each token its own too.
#[test]
fn speculating_runs_report_each_token_s_log_probabilities() {
    let gpu = pollster::block_on(Backend::init(BackendChoice::Wgpu)).expect("a wgpu adapter");
    let mut speculation = Speculation::lookup();
    speculation.fixed = true;
    speculation.max_draft = 4;
    let options = GenerateOptions {
        logprobs: Some(5),
        ..greedy(80)
    };
    for (backend, what) in [(Backend::cpu(), "cpu"), (gpu, "wgpu")] {
        let engine = engine(&backend, Quant::F32);
        let plain = with_logprobs(&engine, &options, None);
        let fast = with_logprobs(&engine, &options, Some(&speculation));
        assert!(
            fast.iter().filter(|t| t.1).count() > 10,
            "{what}: few drafts kept"
        );
        assert_eq!(fast.len(), plain.len(), "{what}");
        for ((id, drafted, l), (want_id, _, want)) in fast.iter().zip(&plain) {
            assert_eq!(
                (id, l.rank, &l.bytes),
                (want_id, want.rank, &want.bytes),
                "{what}"
            );
            let ids = |l: &tokenometer::decode::TokenLogprobs| {
                l.top.iter().map(|a| a.id).collect::<Vec<_>>()
            };
            assert_eq!(ids(l), ids(want), "{what}, drafted: {drafted}");
            assert!(
                (l.logprob - want.logprob).abs() < 1e-4,
                "{what}: {l:?} {want:?}"
            );
        }
        let sampled = GenerateOptions {
            sampling: Sampling {
                temperature: 0.8,
                top_p: 1.0,
                seed: 9,
            },
            ..options
        };
        for (id, _, l) in with_logprobs(&engine, &sampled, Some(&speculation)) {
            assert!(
                l.logprob <= 0.0 && l.rank >= 1 && l.top.len() == 5,
                "{what}: {l:?}"
            );
            assert!(
                l.rank > 5 || l.top[l.rank - 1].id == id,
                "{what}: {id} {l:?}"
            );
        }
    }
}

/// A metered run's report, with the verifications, drafts, kept drafts and tokens its events
/// showed.
fn metered(
    engine: &Engine,
    speculation: Option<&Speculation>,
) -> (tokenometer::meter::Report, [usize; 4]) {
    let mut run =
        MeteredRun::start(engine, PROMPTS[1], greedy(200), speculation, 238.0, None).unwrap();
    let mut counts = [0; 4];
    let report = pollster::block_on(run.run_to_end(engine, &mut |e| {
        match e {
            Event::Verify {
                drafted,
                accepted,
                step_ms,
                ..
            } => {
                counts[0] += 1;
                counts[1] += drafted;
                counts[2] += accepted;
                assert!(*step_ms > 0.0);
            }
            Event::Token { .. } => counts[3] += 1,
            _ => {}
        }
        Flow::Continue
    }))
    .unwrap();
    (report, counts)
}

/// The meter's figures: drafts kept over drafts made, passes per decoded token below 1 when
/// drafts are kept, decode tok/s still output tokens over time. Fixed lengths, so that drafts are
/// made whatever this machine's timings (the measured lengths may draft nothing on a slow debug
/// build: CI's did once); the measured lengths are checked for what does not depend on timings.
#[test]
fn the_meter_reports_what_speculation_did() {
    let engine = engine(&Backend::cpu(), Quant::F32);
    let mut speculation = Speculation::lookup();
    speculation.fixed = true;
    speculation.max_draft = 4;
    let (report, [verifications, drafted, accepted, tokens]) = metered(&engine, Some(&speculation));
    let s = report.speculation.expect("speculation figures");
    assert_eq!(
        (s.verifications, s.drafted, s.accepted),
        (verifications, drafted, accepted)
    );
    assert!(s.accepted > 0 && s.accepted <= s.drafted);
    assert_eq!(s.acceptance_rate, Some(accepted as f64 / drafted as f64));
    assert_eq!(
        s.passes_per_token,
        Some(verifications as f64 / (tokens - 1) as f64)
    );
    assert!(s.passes_per_token.unwrap() < 1.0);
    assert_eq!(s.draft_passes, 0);
    // What the steps cost by their drafts: every step counted once, by at most 4 drafts.
    let steps: usize = s.step_costs.iter().map(|c| c.steps).sum();
    assert_eq!(steps, verifications);
    assert!(s.step_costs.iter().any(|c| c.drafts > 0));
    assert!(
        s.step_costs
            .iter()
            .all(|c| c.drafts <= 4 && c.median_ms > 0.0)
    );
    assert!(s.steps_summary.starts_with("step time, median: "));
    assert!(
        report
            .summary
            .contains("speculative: prompt lookup (n-grams up to 3, 4 drafts a step, fixed)")
    );
    let span = report.decode_ms.unwrap();
    assert_eq!(report.decode_tps, Some((tokens - 1) as f64 / span * 1e3));

    // Measured lengths: the first step is plain (the drafter times a step without drafts before
    // it weighs any), and the counts agree with the events whatever was drafted.
    let (report, [verifications, drafted, accepted, _]) =
        metered(&engine, Some(&Speculation::lookup()));
    let s = report.speculation.expect("speculation figures");
    assert_eq!(
        (s.verifications, s.drafted, s.accepted),
        (verifications, drafted, accepted)
    );
    assert_eq!(s.step_costs[0].drafts, 0);
    assert!(s.steps_summary.starts_with("step time, median: no draft "));
    assert!(report.summary.contains(
        "speculative: prompt lookup (n-grams up to 3, drafts up to 8, as measured costs favour)"
    ));

    // Without speculation there are no such figures.
    assert!(metered(&engine, None).0.speculation.is_none());
}

/// With temperature above 0 the rejection rule runs (drafts kept, residual draws), the run ends
/// at its length, and a seed repeats its text.
#[test]
fn sampling_with_drafts_runs_to_its_length_and_a_seed_repeats() {
    let engine = engine(&Backend::cpu(), Quant::F32);
    let options = GenerateOptions {
        max_tokens: 150,
        sampling: Sampling {
            temperature: 0.8,
            top_p: 0.9,
            seed: 7,
        },
        ..Default::default()
    };
    let draft = Speculation::draft_model(
        &engine,
        self::engine(&Backend::cpu(), Quant::Q8),
        "q8".into(),
    )
    .unwrap();
    for speculation in [fixed(Speculation::lookup()), fixed(draft)] {
        let (ids, kept) = run(&engine, PROMPTS[1], &options, Some(&speculation));
        assert!(kept > 0, "no draft kept");
        assert!(ids.len() <= 150 && ids.len() > 20);
        assert_eq!(
            run(&engine, PROMPTS[1], &options, Some(&speculation)).0,
            ids
        );
    }
}

/// The default drafter (lookup, its lengths chosen from the steps' measured costs) drafts on
/// grounded prompts when the clock says a drafted row is cheap next to a step, and stops after its
/// one probe when the clock says every row costs as much as a step (then no draft can pay). The
/// clock is the test's (`Clock::Passes`), so this machine's speed cannot decide it: with the real
/// clock a loaded debug build drafted only its first probe, and the check had been dropped.
#[test]
fn the_default_drafter_drafts_where_the_clock_says_drafts_pay() {
    use tokenometer::decode::Clock;
    use tokenometer::{Request, Scheduler};
    let engine = engine(&Backend::cpu(), Quant::F32);
    // (verifications with drafts, drafts made, drafts kept, the longest draft, the ids)
    let clocked = |prompt: &str, pass_ms: f64, row_ms: f64| {
        let clock = Clock::Passes {
            now_ms: 0.0,
            pass_ms,
            row_ms,
        };
        let mut scheduler = Scheduler::with_clock(1, clock);
        let request = Request {
            prompt: prompt.into(),
            options: greedy(120),
        };
        let lookup = Speculation::lookup();
        scheduler
            .submit_speculative(&engine, &request, None, Some(&lookup))
            .unwrap();
        let (mut counts, mut ids) = ([0; 4], Vec::new());
        while !scheduler.is_idle() {
            for e in pollster::block_on(scheduler.step(&engine)).unwrap() {
                match e.event {
                    Event::Verify {
                        drafted, accepted, ..
                    } if drafted > 0 => {
                        counts[0] += 1;
                        counts[1] += drafted;
                        counts[2] += accepted;
                        counts[3] = counts[3].max(drafted);
                    }
                    Event::Token { id, .. } => ids.push(id),
                    _ => {}
                }
            }
        }
        (counts, ids)
    };
    // Measured on 2026-11-27 (the clock makes them the same on every machine): a step of 10 ms
    // and 1 ms a row drafted 101 and 116 tokens in 42 and 25 verifications, kept 37 and 50, up to
    // 4 and 8 at once; rows of 10 ms and no fixed cost, the one probe (kept 0).
    for prompt in &PROMPTS[1..3] {
        let (plain, _) = run(&engine, prompt, &greedy(120), None);
        let ([verifications, _, kept, longest], ids) = clocked(prompt, 10.0, 1.0);
        assert_eq!(ids, plain, "{prompt:?}");
        assert!(
            verifications >= 20 && kept >= 30 && longest >= 4,
            "{prompt:?}: cheap rows, {verifications} verifications, {kept} kept, at most {longest}"
        );
        let ([_, drafted, ..], ids) = clocked(prompt, 0.0, 10.0);
        assert_eq!(ids, plain, "{prompt:?}");
        assert!(
            drafted <= 1,
            "{prompt:?}: {drafted} drafted where no draft pays"
        );
    }
}

/// Sampled speculation gives every position the model's own distribution, not only a draft's
/// first (the unit test in `crate/decode/speculate.rs` checks one position at top-p 1): a stream
/// decoded in steps of 3 drafts, with the model's logits changing with the position (3 rows in
/// turn) and top-p 1 and 0.8, drafts from a draft model's other distributions or certain ones
/// (lookup's). Each position's counts are held to a chi-square bound: for 4 to 5 tokens with
/// probability above 0 (3 or 4 degrees of freedom), 35 is above the 1 - 1e-6 quantile (30.7 and
/// 33.4), so a right rule fails by chance once in a million seeds; tokens top-p leaves out never
/// appear. A skew of 0.02 in one probability over the 40,000 tokens a position counts here gives
/// a statistic near 60. The draws are seeded, so the run is the same every time.
#[test]
fn sampled_speculation_keeps_the_distribution_at_every_position() {
    use tokenometer::decode::sampling::Sampler;
    use tokenometer::decode::speculate::accept_sampled;
    let logits: [[f32; 5]; 3] = [
        [0.0, 1.0, 2.0, 0.5, -1.0],
        [1.5, 0.2, 0.0, 1.0, 0.3],
        [0.3, -0.5, 1.2, 2.0, 0.9],
    ];
    let drafts_q: [Vec<f32>; 3] = [
        vec![0.1, 0.5, 0.1, 0.2, 0.1],
        vec![0.4, 0.1, 0.1, 0.1, 0.3],
        vec![0.2, 0.2, 0.2, 0.2, 0.2],
    ];
    for top_p in [1.0, 0.8] {
        for certain in [false, true] {
            let sampling = Sampling {
                temperature: 0.9,
                top_p,
                seed: 11,
            };
            let mut sampler = Sampler::new(sampling);
            let p: Vec<Vec<f32>> = logits.iter().map(|l| sampler.distribution(l)).collect();
            let mut counts = [[0usize; 5]; 3];
            let mut t = 0;
            while t < 120_000 {
                let (mut drafts, mut probs) = (Vec::new(), Vec::new());
                for i in 0..3 {
                    let q = &drafts_q[(t + i) % 3];
                    // Lookup's drafts are certain: here the token after the position's favourite.
                    drafts.push(match certain {
                        true => (sampler.pick(&p[(t + i) % 3]) + 1) % 5,
                        false => sampler.pick(q),
                    });
                    probs.push(q.clone());
                }
                let rows: Vec<f32> = (0..=3).flat_map(|i| logits[(t + i) % 3]).collect();
                let probs = (!certain).then_some(probs.as_slice());
                let (kept, next) = accept_sampled(&mut sampler, &drafts, probs, &rows, 5);
                for id in drafts[..kept].iter().chain([&next]) {
                    counts[t % 3][*id as usize] += 1;
                    t += 1;
                }
            }
            for (position, (seen, p)) in counts.iter().zip(&p).enumerate() {
                let n: usize = seen.iter().sum();
                let mut chi2 = 0.0;
                for (&c, &p) in seen.iter().zip(p) {
                    if p == 0.0 {
                        assert_eq!(c, 0, "top-p {top_p}: a token it leaves out was drawn");
                        continue;
                    }
                    let expected = n as f64 * p as f64;
                    chi2 += (c as f64 - expected).powi(2) / expected;
                }
                assert!(
                    chi2 < 35.0,
                    "top-p {top_p}, certain drafts {certain}, position {position} of 3: \
                     chi-square {chi2:.1} over {n} tokens ({seen:?} against {p:?})"
                );
            }
        }
    }
}
