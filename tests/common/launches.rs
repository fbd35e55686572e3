//! What the GPU does per decode step, as the model's own plan counts it (`crate/gpu/plan.rs`):
//! dispatches, queue submits, and the buffers and bind groups it creates (none in a steady step).
//! On a GPU each dispatch costs microseconds whatever its size, and for small models that, not
//! arithmetic, bounds a step, so the count is what the tests hold down.

// Each test file that includes this uses a part of it.
#![allow(dead_code)]

use tokenometer::gpu::Counts;
use tokenometer::{Engine, Flow, GenerateOptions, Request, Scheduler};

fn counts(engine: &Engine) -> Counts {
    engine.model.gpu_counts().expect("a model on the GPU")
}

/// What greedy generation of `tokens` tokens does on the device.
fn generation(engine: &Engine, prompt: &str, tokens: usize) -> Counts {
    let options = GenerateOptions {
        max_tokens: tokens,
        ..Default::default()
    };
    let before = counts(engine);
    pollster::block_on(
        engine.generate_speculative(prompt, &options, None, &mut |_| Flow::Continue),
    )
    .expect("generates");
    counts(engine) - before
}

/// `total` over `steps`, checked to divide: every step does the same.
fn per(total: Counts, steps: u64) -> Counts {
    for n in [
        total.dispatches,
        total.submits,
        total.buffers,
        total.bind_groups,
    ] {
        assert_eq!(
            n % steps,
            0,
            "{steps} steps did not all do the same: {total:?}"
        );
    }
    total.per(steps)
}

/// One decode step: a run of `2 * steps + 1` tokens less one of `steps + 1` (the prefill's and the
/// first step's cancel), over `steps`.
pub fn per_decode_step(engine: &Engine, prompt: &str, steps: usize) -> Counts {
    generation(engine, prompt, steps + 1); // warm: the first run sizes the buffers
    let short = generation(engine, prompt, steps + 1);
    let long = generation(engine, prompt, 2 * steps + 1);
    let mut step = per(long - short, steps as u64);
    // Host time is a measurement, not a count: the difference of two runs' can be below zero.
    // A step's share of the longer run's, by its dispatches, instead.
    step.host_ns = long.host_ns * step.dispatches / long.dispatches.max(1);
    step
}

/// One decode step of `users` sequences in one batch, once every sequence is past its prompt.
pub fn per_batched_step(engine: &Engine, users: usize) -> Counts {
    let mut scheduler = Scheduler::new(users);
    for user in 0..users {
        let request = Request {
            prompt: format!("Once upon a time there were {user} cats"),
            options: GenerateOptions {
                max_tokens: 50,
                ..Default::default()
            },
        };
        scheduler.submit(engine, &request, None).expect("submits");
    }
    // The prompts' prefill (all in the first step, within its budget), then decode steps.
    for _ in 0..users + 2 {
        pollster::block_on(scheduler.step(engine)).expect("steps");
    }
    let before = counts(engine);
    for _ in 0..4 {
        pollster::block_on(scheduler.step(engine)).expect("steps");
    }
    per(counts(engine) - before, 4)
}
