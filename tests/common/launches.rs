//! The GPU's dispatches counted: the kernels a decode step launches on wgpu, by name. On a GPU
//! each dispatch costs microseconds whatever its size, and for small models that, not arithmetic,
//! bounds a step (`crate/gpu/launch.rs`), so the count is what the tests hold down.

// Each test file that includes this uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use cubecl::logging::{LaunchObservation, LaunchObserver};
use tokenometer::{Engine, Flow, GenerateOptions, Request, Scheduler};

/// Launches by kernel name, from one thread: the observer sees every thread's, and tests run side
/// by side.
struct Count {
    thread: ThreadId,
    kernels: Mutex<BTreeMap<&'static str, usize>>,
}

impl LaunchObserver for Count {
    fn launched(&self, kernel: &'static str) {
        if std::thread::current().id() == self.thread {
            *self.kernels.lock().unwrap().entry(kernel).or_default() += 1;
        }
    }
}

/// The process has one observer slot: one count at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The kernels `work` launches from this thread, by name.
fn launches(work: impl FnOnce()) -> BTreeMap<&'static str, usize> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let count = Arc::new(Count {
        thread: std::thread::current().id(),
        kernels: Mutex::default(),
    });
    let watching = LaunchObservation::new(count.clone());
    work();
    drop(watching);
    count.kernels.lock().unwrap().clone()
}

/// The kernels greedy generation of `tokens` tokens launches, by name.
fn generation(engine: &Engine, prompt: &str, tokens: usize) -> BTreeMap<&'static str, usize> {
    let options = GenerateOptions {
        max_tokens: tokens,
        ..Default::default()
    };
    launches(|| {
        pollster::block_on(
            engine.generate_speculative(prompt, &options, None, &mut |_| Flow::Continue),
        )
        .expect("generates");
    })
}

/// Launches by kernel over `steps` steps, as (the dispatches of one step, "3 x RmsNormKernel, ...").
fn per_step(kernels: BTreeMap<&'static str, usize>, steps: usize) -> (usize, String) {
    let mut total = 0;
    let mut by_kernel = Vec::new();
    for (kernel, n) in kernels {
        let per_step = n / steps;
        if per_step > 0 {
            total += per_step;
            let name = kernel.rsplit("::").next().unwrap_or(kernel);
            by_kernel.push(format!("{per_step} x {name}"));
        }
    }
    (total, by_kernel.join(", "))
}

/// The dispatches of one decode step, and by kernel ("3 x RmsNormKernel, ..."): a run of
/// `2 * steps + 1` tokens less one of `steps + 1` (the prefill's and the first step's cancel), over
/// `steps`.
pub fn per_decode_step(engine: &Engine, prompt: &str, steps: usize) -> (usize, String) {
    let short = generation(engine, prompt, steps + 1);
    let mut long = generation(engine, prompt, 2 * steps + 1);
    for (kernel, n) in &short {
        *long
            .get_mut(kernel)
            .expect("the longer run launches every kernel") -= n;
    }
    per_step(long, steps)
}

/// The dispatches of one decode step of `users` sequences in one batch, and by kernel: the launches
/// of 4 steps over 4, once every sequence is past its prompt.
pub fn per_batched_step(engine: &Engine, users: usize) -> (usize, String) {
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
    // The prompts' prefills (one a step, the others decoding in it), then the first decode steps.
    for _ in 0..users + 2 {
        pollster::block_on(scheduler.step(engine)).expect("steps");
    }
    let kernels = launches(|| {
        for _ in 0..4 {
            pollster::block_on(scheduler.step(engine)).expect("steps");
        }
    });
    per_step(kernels, 4)
}
