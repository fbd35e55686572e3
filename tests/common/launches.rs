//! The GPU's dispatches counted: the kernels a decode step launches on wgpu, by name. On a GPU
//! each dispatch costs microseconds whatever its size, and for small models that, not arithmetic,
//! bounds a step (`crate/gpu/launch.rs`), so the count is what the tests hold down.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use cubecl::logging::{LaunchObservation, LaunchObserver};
use tokenometer::{Engine, Flow, GenerateOptions};

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

/// The kernels greedy generation of `tokens` tokens launches, by name.
fn launches(engine: &Engine, prompt: &str, tokens: usize) -> BTreeMap<&'static str, usize> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let count = Arc::new(Count {
        thread: std::thread::current().id(),
        kernels: Mutex::default(),
    });
    let watching = LaunchObservation::new(count.clone());
    let options = GenerateOptions {
        max_tokens: tokens,
        ..Default::default()
    };
    pollster::block_on(
        engine.generate_speculative(prompt, &options, None, &mut |_| Flow::Continue),
    )
    .expect("generates");
    drop(watching);
    count.kernels.lock().unwrap().clone()
}

/// The dispatches of one decode step, and by kernel ("3 x RmsNormKernel, ..."): a run of
/// `2 * steps + 1` tokens less one of `steps + 1` (the prefill's and the first step's cancel), over
/// `steps`.
pub fn per_decode_step(engine: &Engine, prompt: &str, steps: usize) -> (usize, String) {
    let short = launches(engine, prompt, steps + 1);
    let long = launches(engine, prompt, 2 * steps + 1);
    let mut total = 0;
    let mut by_kernel = Vec::new();
    for (kernel, n) in long {
        let per_step = (n - short.get(kernel).copied().unwrap_or(0)) / steps;
        if per_step > 0 {
            total += per_step;
            let name = kernel.rsplit("::").next().unwrap_or(kernel);
            by_kernel.push(format!("{per_step} x {name}"));
        }
    }
    (total, by_kernel.join(", "))
}
