//! Batched generation is the same computation as batch 1: sequences of a batch (different prompts,
//! joining mid-run, cancelled, or filling their context) each produce their own batch-1 tokens, on
//! the CPU and the wgpu backends.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::collections::BTreeMap;

use common::*;
use tokenometer::{
    Backend, BackendChoice, Engine, Event, Flow, GenerateOptions, Quant, Request, Sampling,
    Scheduler, StopReason,
};

/// Different lengths and different stories.
const PROMPTS: [&str; 4] = [
    "Once upon a time",
    "Lily and Ben went to the park with their dog",
    "The little red car",
    "Tom had a big red ball",
];

fn engine(backend: &Backend) -> Engine {
    engine_in(backend, Quant::F32)
}

fn engine_in(backend: &Backend, quant: Quant) -> Engine {
    common::engine(backend, quant)
}

fn gpu() -> Backend {
    pollster::block_on(Backend::init(BackendChoice::Wgpu)).expect(
        "the wgpu backend needs a Vulkan driver; on a machine without a GPU install Mesa's \
         software one: apt-get install -y mesa-vulkan-drivers",
    )
}

fn options(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        ..Default::default()
    }
}

/// The ids `generate` (batch 1) produces from `prompt`, and why it stopped.
fn solo(engine: &Engine, prompt: &str, max_tokens: usize) -> (Vec<u32>, StopReason) {
    solo_with(engine, prompt, &options(max_tokens))
}

/// [`solo`] with `options`.
fn solo_with(engine: &Engine, prompt: &str, options: &GenerateOptions) -> (Vec<u32>, StopReason) {
    let mut ids = Vec::new();
    let reason = pollster::block_on(engine.generate(prompt, options, &mut |e| {
        if let Event::Token { id, .. } = e {
            ids.push(*id);
        }
        Flow::Continue
    }))
    .unwrap();
    (ids, reason)
}

/// What each sequence of a batch produced.
#[derive(Default, Debug)]
struct Outcome {
    ids: Vec<u32>,
    reason: Option<StopReason>,
    /// The step at which it ended.
    ended_at: usize,
}

/// Run `requests` through one scheduler; `(prompt, max_tokens, join_at_step)`. After each step,
/// `between(step, scheduler)` may act (cancel). Returns the outcome by sequence id.
fn batch(
    engine: &Engine,
    requests: &[(&str, usize, usize)],
    mut between: impl FnMut(usize, &mut Scheduler) -> Vec<tokenometer::SeqEvent>,
) -> BTreeMap<usize, Outcome> {
    let mut scheduler = Scheduler::new(requests.len());
    let mut out: BTreeMap<usize, Outcome> = BTreeMap::new();
    let mut ids_by_request = BTreeMap::new();
    let mut step = 0;
    loop {
        for (i, (prompt, max, join)) in requests.iter().enumerate() {
            if *join == step {
                let request = Request {
                    prompt: prompt.to_string(),
                    options: options(*max),
                };
                let id = scheduler.submit(engine, &request, None).unwrap();
                ids_by_request.insert(i, id);
            }
        }
        let joined_all = requests.iter().all(|r| r.2 <= step);
        if scheduler.is_idle() && joined_all {
            break;
        }
        let mut events = pollster::block_on(scheduler.step(engine)).unwrap();
        events.extend(between(step, &mut scheduler));
        for e in events {
            let o = out.entry(e.seq).or_default();
            match e.event {
                Event::Token { id, .. } => o.ids.push(id),
                Event::Done { reason, .. } => {
                    o.reason = Some(reason);
                    o.ended_at = step;
                }
                Event::Prefill { .. } | Event::Verify { .. } | Event::Chunk { .. } => {}
            }
        }
        step += 1;
    }
    // Outcomes in request order.
    ids_by_request
        .into_iter()
        .map(|(i, id)| (i, out.remove(&id).unwrap_or_default()))
        .collect()
}

fn check_batch_equals_solo(backend: &Backend) {
    let engine = engine(backend);
    let requests: Vec<_> = PROMPTS.iter().map(|p| (*p, 120, 0)).collect();
    let outcomes = batch(&engine, &requests, |_, _| Vec::new());
    for (i, prompt) in PROMPTS.iter().enumerate() {
        let (ids, reason) = solo(&engine, prompt, 120);
        assert!(
            ids.len() >= 100,
            "{prompt:?} gave only {} tokens",
            ids.len()
        );
        assert_eq!(
            outcomes[&i].ids, ids,
            "{prompt:?} in a batch of 4 on {}",
            backend.adapter
        );
        assert_eq!(outcomes[&i].reason, Some(reason));
    }
    // And the reference prompt follows run.c.
    let (prompt, sequence) = reference_ids();
    let expected = &sequence[prompt.len()..prompt.len() + 120];
    assert_eq!(outcomes[&0].ids, expected);
}

#[test]
fn a_batch_of_four_prompts_gives_each_its_batch_1_tokens_on_cpu() {
    check_batch_equals_solo(&Backend::cpu());
}

#[test]
fn a_batch_of_four_prompts_gives_each_its_batch_1_tokens_on_wgpu() {
    check_batch_equals_solo(&gpu());
}

#[path = "common/launches.rs"]
mod launches;

/// On wgpu a batch's sequences share every dispatch: each kernel takes every sequence's rows, each
/// sequence's keys and values in its own slot of one KV pool. A step of 1 or 4 users is the same 4
/// dispatches a layer and 2 more, one graph replayed, creating nothing (each added 2 a layer until
/// 2026-11-28: 98 dispatches for 4 sequences of stories260K, 22 now). Two submits: the step's and
/// its read-back's (CubeCL's read submits what came before it apart: `crate/gpu/plan.rs`).
#[test]
fn a_batched_step_is_4_dispatches_a_layer_whatever_the_users_on_wgpu() {
    let engine = engine(&gpu());
    let layers = engine.model.config.n_layers as u64;
    for users in [1, 4] {
        let step = launches::per_batched_step(&engine, users);
        assert_eq!(step.dispatches, 4 * layers + 2, "{users}: {step:?}");
        assert_eq!(
            (step.submits, step.buffers, step.bind_groups),
            (2, 0, 0),
            "{users}: {step:?}"
        );
    }
}

#[test]
fn a_sequence_joining_mid_run_changes_nobody_elses_tokens() {
    let engine = engine(&Backend::cpu());
    let requests = [
        (PROMPTS[0], 100, 0),
        (PROMPTS[1], 100, 0),
        (PROMPTS[2], 60, 17),
    ];
    let outcomes = batch(&engine, &requests, |_, _| Vec::new());
    for (i, (prompt, max, _)) in requests.iter().enumerate() {
        assert_eq!(
            outcomes[&i].ids,
            solo(&engine, prompt, *max).0,
            "{prompt:?}"
        );
    }
    // The others were still running when it joined at step 17.
    assert!(outcomes[&0].ended_at > 17 && outcomes[&1].ended_at > 17);
}

/// A prompt that joins while another sequence decodes is read a chunk a step, the other getting a
/// token in each of those steps, and neither one's tokens change: greedy, and sampled from a seed
/// (a pick after a prompt's earlier chunk would use up the seed's randomness).
#[test]
fn a_prompt_joining_a_decoding_sequence_is_read_a_chunk_a_step_and_changes_no_tokens_on_cpu() {
    check_chunked_join(&Backend::cpu());
}

#[test]
fn a_prompt_joining_a_decoding_sequence_is_read_a_chunk_a_step_and_changes_no_tokens_on_wgpu() {
    check_chunked_join(&gpu());
}

fn check_chunked_join(backend: &Backend) {
    let engine = engine(backend);
    let chunk = 3;
    let prompt_len = engine.encode_prompt(PROMPTS[1], true).unwrap().len();
    let chunks = prompt_len.div_ceil(chunk);
    assert!(chunks >= 3, "{prompt_len} tokens");
    for temperature in [0.0, 0.9] {
        let options = |max_tokens| GenerateOptions {
            max_tokens,
            sampling: Sampling {
                temperature,
                top_p: 0.95,
                seed: 7,
            },
            ..Default::default()
        };
        let submit = |scheduler: &mut Scheduler, prompt: &str, max_tokens| {
            let request = Request {
                prompt: prompt.to_string(),
                options: options(max_tokens),
            };
            scheduler.submit(&engine, &request, None).unwrap()
        };
        let mut scheduler = Scheduler::new(2);
        scheduler.set_prefill_chunk(chunk);
        let first = submit(&mut scheduler, PROMPTS[0], 40);
        let mut second = None;
        // By sequence: its tokens, and the step of each.
        let mut tokens: BTreeMap<usize, Vec<(u32, usize)>> = BTreeMap::new();
        let mut step = 0;
        while step < 2 || !scheduler.is_idle() {
            if step == 2 {
                second = Some(submit(&mut scheduler, PROMPTS[1], 30));
            }
            for e in pollster::block_on(scheduler.step(&engine)).unwrap() {
                if let Event::Token { id, .. } = e.event {
                    tokens.entry(e.seq).or_default().push((id, step));
                }
            }
            step += 1;
        }
        let second = second.unwrap();
        // The first, alone, had its whole prompt read in step 0; the second's chunks took steps
        // 2.. and its first token came in the last of them.
        assert_eq!(tokens[&first][0].1, 0);
        assert_eq!(tokens[&second][0].1, 2 + chunks - 1, "T={temperature}");
        let steps_of_first: Vec<usize> = tokens[&first].iter().map(|t| t.1).collect();
        assert_eq!(
            steps_of_first,
            (0..40).collect::<Vec<_>>(),
            "T={temperature}"
        );
        for (id, prompt, max) in [(first, PROMPTS[0], 40), (second, PROMPTS[1], 30)] {
            let ids: Vec<u32> = tokens[&id].iter().map(|t| t.0).collect();
            let (alone, _) = solo_with(&engine, prompt, &options(max));
            assert_eq!(ids, alone, "{prompt:?} at T={temperature}");
        }
    }
}

#[test]
fn cancelling_one_sequence_leaves_the_others_running() {
    let engine = engine(&Backend::cpu());
    let requests: Vec<_> = PROMPTS.iter().map(|p| (*p, 100, 0)).collect();
    let outcomes = batch(&engine, &requests, |step, scheduler| {
        // Sequence 1 (the second request) is cancelled after its 10th token: its prompt is read
        // in step 0 with the others', which gives its first token.
        if step == 9 {
            vec![scheduler.cancel(1).expect("running")]
        } else {
            Vec::new()
        }
    });
    assert_eq!(outcomes[&1].reason, Some(StopReason::Cancelled));
    assert_eq!(outcomes[&1].ids, solo(&engine, PROMPTS[1], 10).0);
    for i in [0, 2] {
        assert_eq!(outcomes[&i].ids, solo(&engine, PROMPTS[i], 100).0);
        assert_eq!(outcomes[&i].reason, Some(StopReason::MaxTokens));
    }
}

#[test]
fn a_full_context_ends_only_its_own_sequence() {
    // Synthetic weights never pick BOS or EOS, so only the context or max tokens end these runs.
    let engine = tiny_synthetic_engine(32);
    let long = "Lily and Ben went to the park with their dog and a ball";
    let requests = [(long, 1000, 0), ("Once", 20, 0)];
    let outcomes = batch(&engine, &requests, |_, _| Vec::new());
    let prompt_len = engine.encode_prompt(long, true).unwrap().len();
    assert_eq!(outcomes[&0].reason, Some(StopReason::ContextFull));
    assert_eq!(outcomes[&0].ids.len(), 32 - prompt_len + 1);
    assert_eq!(outcomes[&1].reason, Some(StopReason::MaxTokens));
    assert_eq!(outcomes[&1].ids.len(), 20);
    assert!(outcomes[&1].ended_at > outcomes[&0].ended_at);
    for (i, (prompt, max, _)) in requests.iter().enumerate() {
        assert_eq!(outcomes[&i].ids, solo(&engine, prompt, *max).0);
    }
}

/// A burst of short prompts is read in one pass (each weight read once for all of them), within
/// the step's budget of prompt tokens: four prompts, one step, four first tokens. (From 82ae6d6
/// to 2026-11-29 a step read one prompt, so this took four steps.)
#[test]
fn a_burst_of_four_short_prompts_is_read_in_one_step() {
    let engine = engine(&Backend::cpu());
    let lens: usize = PROMPTS
        .iter()
        .map(|p| engine.encode_prompt(p, true).unwrap().len())
        .sum();
    assert!(
        lens <= tokenometer::decode::STEP_TOKENS,
        "{lens} prompt tokens"
    );
    // The prompts read in each step of a burst of four, on an engine whose passes cost `pass_ms`
    // and `row_ms` a row, after one request has run alone (a prompt's pass and decode steps: what
    // the engine learns a pass costs from).
    let burst = |pass_ms: f64, row_ms: f64| {
        let engine = engine_in(&Backend::cpu(), Quant::F32);
        let clock = tokenometer::decode::Clock::Passes {
            now_ms: 0.0,
            pass_ms,
            row_ms,
        };
        let request = |prompt: &str| Request {
            prompt: prompt.to_string(),
            options: options(10),
        };
        let mut alone = Scheduler::with_clock(4, clock);
        alone.submit(&engine, &request(PROMPTS[0]), None).unwrap();
        while !alone.is_idle() {
            pollster::block_on(alone.step(&engine)).unwrap();
        }
        let mut scheduler = Scheduler::with_clock(4, clock);
        for prompt in PROMPTS {
            scheduler.submit(&engine, &request(prompt), None).unwrap();
        }
        let mut read = Vec::new();
        while read.iter().sum::<usize>() < 4 {
            let events = pollster::block_on(scheduler.step(&engine)).unwrap();
            let prefills = events
                .iter()
                .filter(|e| matches!(e.event, Event::Prefill { .. }));
            read.push(prefills.count());
        }
        read
    };
    // Passes that cost mostly their fixed part (a GPU's, or short prompts' on a big model): the
    // burst shares one pass.
    assert_eq!(burst(FIXED_MS, 1.0), [4]);
    // Passes that cost mostly their rows (a CPU reading prompts at full arithmetic): a prompt
    // would cost the others in its pass more than it saves, so one a pass.
    assert_eq!(burst(1.0, 1.0), [1, 1, 1, 1]);
    // A fresh engine has learned nothing: the token budget alone decides.
    let mut scheduler = Scheduler::new(4);
    for prompt in PROMPTS {
        let request = Request {
            prompt: prompt.to_string(),
            options: options(10),
        };
        scheduler.submit(&engine, &request, None).unwrap();
    }
    let events = pollster::block_on(scheduler.step(&engine)).unwrap();
    let count = |f: fn(&Event) -> bool| events.iter().filter(|e| f(&e.event)).count();
    assert_eq!(count(|e| matches!(e, Event::Prefill { .. })), 4);
    assert_eq!(count(|e| matches!(e, Event::Token { .. })), 4);
    assert_eq!((scheduler.running(), scheduler.waiting()), (4, 0));
}

/// A test clock's fixed part of a pass, far above any test prompt's rows: passes cost mostly it.
const FIXED_MS: f64 = 1000.0;

/// The budget is spent in arrival order and the prompt that does not fit is cut: with one
/// sequence decoding and a budget of a few tokens, two prompts joining together are read as one
/// stream of prompt tokens, `budget` a step, the second starting in the first's last step; each
/// step's pass holds exactly the decoding rows and the budget's tokens (a clock that counts
/// rows); every text is its run alone, greedy and sampled from a seed.
#[test]
fn prompts_past_the_step_budget_are_cut_and_their_texts_unchanged_on_cpu() {
    check_budget_cuts(&Backend::cpu());
}

#[test]
fn prompts_past_the_step_budget_are_cut_and_their_texts_unchanged_on_wgpu() {
    check_budget_cuts(&gpu());
}

fn check_budget_cuts(backend: &Backend) {
    let engine = engine(backend);
    let len = |p: &str| engine.encode_prompt(p, true).unwrap().len();
    let (len1, len2) = (len(PROMPTS[1]), len(PROMPTS[2]));
    // A budget that cuts the first joining prompt in the middle of a step.
    let budget = (3..).find(|b| len1 % b != 0).unwrap();
    assert!(len1 > 2 * budget && len2 > budget, "{len1}, {len2}");
    for temperature in [0.0, 0.9] {
        let options = |max_tokens| GenerateOptions {
            max_tokens,
            sampling: Sampling {
                temperature,
                top_p: 0.95,
                seed: 11,
            },
            ..Default::default()
        };
        // Passes that cost mostly their fixed part (as on a GPU), so that prompts share them
        // (crate/decode/costs.rs): the budget alone cuts.
        let clock = tokenometer::decode::Clock::Passes {
            now_ms: 0.0,
            pass_ms: FIXED_MS,
            row_ms: 1.0,
        };
        // What the engine learned of its passes from the runs alone below (on the real clock)
        // is forgotten: this test's passes are the test clock's.
        *engine.pass_costs.lock().unwrap() = Default::default();
        let mut scheduler = Scheduler::with_clock(3, clock);
        scheduler.set_step_tokens(budget);
        let submit = |scheduler: &mut Scheduler, prompt: &str| {
            let request = Request {
                prompt: prompt.to_string(),
                options: options(40),
            };
            scheduler.submit(&engine, &request, None).unwrap()
        };
        let first = submit(&mut scheduler, PROMPTS[0]);
        let mut joined = Vec::new();
        let mut tokens: BTreeMap<usize, Vec<(u32, usize)>> = BTreeMap::new();
        // The prompt tokens each step read: its rows less the sequences decoding in it (those
        // that had given a token and not ended).
        let mut prompt_rows = Vec::new();
        let mut live = std::collections::BTreeSet::new();
        let mut step = 0;
        while step < 2 || !scheduler.is_idle() {
            if step == 1 {
                joined = vec![
                    submit(&mut scheduler, PROMPTS[1]),
                    submit(&mut scheduler, PROMPTS[2]),
                ];
            }
            let before = scheduler.now_ms();
            let events = pollster::block_on(scheduler.step(&engine)).unwrap();
            let rows = (scheduler.now_ms() - before - FIXED_MS) as usize;
            prompt_rows.push(rows - live.len());
            for e in events {
                match e.event {
                    Event::Token { id, .. } => {
                        tokens.entry(e.seq).or_default().push((id, step));
                        live.insert(e.seq);
                    }
                    Event::Done { .. } => {
                        live.remove(&e.seq);
                    }
                    _ => {}
                }
            }
            step += 1;
        }
        // Step 0 read the first prompt alone; from step 1 the two others' tokens, `budget` a
        // step, then nothing.
        let total = len1 + len2;
        let reading = total.div_ceil(budget);
        let mut expected = vec![budget; reading];
        expected[reading - 1] = total - budget * (reading - 1);
        assert_eq!(prompt_rows[0], len(PROMPTS[0]));
        assert_eq!(prompt_rows[1..=reading], expected, "T={temperature}");
        assert!(prompt_rows[reading + 1..].iter().all(|&r| r == 0));
        // The second prompt's first token came in the step that read its last token; the third
        // began in that same step (the first's last chunk left room in the budget).
        assert_eq!(tokens[&joined[0]][0].1, len1.div_ceil(budget));
        assert_eq!(tokens[&joined[1]][0].1, reading);
        for (id, prompt) in [
            (first, PROMPTS[0]),
            (joined[0], PROMPTS[1]),
            (joined[1], PROMPTS[2]),
        ] {
            let ids: Vec<u32> = tokens[&id].iter().map(|t| t.0).collect();
            let (alone, _) = solo_with(&engine, prompt, &options(40));
            assert_eq!(ids, alone, "{prompt:?} at T={temperature}");
        }
    }
}

#[test]
fn requests_beyond_the_batch_limit_wait_and_their_wait_is_queue_time() {
    let engine = engine(&Backend::cpu());
    let mut scheduler = Scheduler::new(2);
    for prompt in PROMPTS {
        let request = Request {
            prompt: prompt.to_string(),
            options: options(30),
        };
        scheduler.submit(&engine, &request, None).unwrap();
    }
    let mut prefills = BTreeMap::new();
    let mut most_running = 0;
    while !scheduler.is_idle() {
        for e in pollster::block_on(scheduler.step(&engine)).unwrap() {
            if let Event::Prefill {
                queued_ms, t_ms, ..
            } = e.event
            {
                prefills.insert(e.seq, (queued_ms, t_ms));
            }
        }
        most_running = most_running.max(scheduler.running());
    }
    assert_eq!(most_running, 2);
    // The third joined only when one of the first two ended, 30 tokens later.
    let (queued, ttft) = prefills[&2];
    assert!(queued > prefills[&0].0 && queued > 0.0, "{prefills:?}");
    assert!(ttft > prefills[&0].1 && ttft >= queued, "{prefills:?}");
}

/// stories260K's matrices: per layer wq and wo 64x64, wk and wv 32x64 (4 KV heads of 8), w1 and
/// w3 172x64, w2 64x172, times 5 layers, and the classifier 512x64.
const STORIES260K_MACS_PER_ROW: u64 = 5 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 172 * 64) + 512 * 64;

#[test]
fn a_steps_products_alone_read_every_matrix_once_for_all_rows() {
    let engine = engine(&Backend::cpu());
    for rows in [1, 4] {
        let p = engine
            .products_alone(rows)
            .and_then(|p| tokenometer::meter::Products::from_passes(&p))
            .expect("measured on the CPU");
        assert_eq!(p.rows, rows);
        assert_eq!(p.macs, rows as u64 * STORIES260K_MACS_PER_ROW);
        // f32: 4 bytes a weight, read once whatever the rows.
        assert_eq!(p.weight_bytes, 4 * STORIES260K_MACS_PER_ROW);
        assert!(p.passes >= 5 && p.ms_p50 > 0.0, "{p:?}");
        assert!((p.tps - rows as f64 / p.ms_p50 * 1e3).abs() < 1e-6, "{p:?}");
    }
    // Q8_0 blocks: 34 bytes for 32 weights, fewer bytes for the same multiply-adds.
    let p = engine_in(&Backend::cpu(), Quant::Q8)
        .products_alone(2)
        .unwrap();
    assert!(p.macs >= 2 * STORIES260K_MACS_PER_ROW, "{p:?}");
    assert!(p.bytes < 4 * STORIES260K_MACS_PER_ROW / 3, "{p:?}");
}

#[test]
fn a_gpu_has_no_products_alone_ceiling() {
    assert!(engine(&gpu()).products_alone(2).is_none());
}
