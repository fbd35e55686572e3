//! `bench`'s ceilings, measured after its runs (apart from them): on the CPU the memory's read
//! bandwidth at the engine's threads; on a GPU the read bandwidth a kernel reaches and what one
//! dispatch costs (`gpu::probe`), with the dispatches a token took. Each run's report then holds
//! its bandwidth ceiling (and on a GPU its dispatch floor), and the median run's are printed.

use crate::decode::Engine;
use crate::meter::{BandwidthCeiling, Report};

/// How the ceilings were measured, for the printed lines.
pub(super) enum Measured {
    /// The CPU's memory, read by this many threads.
    Cpu { threads: usize },
    /// A GPU's read kernel over this many bytes, and one dispatch's cost in us.
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    Gpu { bytes: u64, dispatch_us: f64 },
}

/// What the model has done on the GPU so far (`None` on the CPU).
#[cfg(feature = "gpu")]
pub(super) fn gpu_work(engine: &Engine) -> Option<crate::gpu::Counts> {
    engine.model.gpu_counts()
}

#[cfg(not(feature = "gpu"))]
pub(super) fn gpu_work(_: &Engine) -> Option<()> {
    None
}

#[cfg(feature = "gpu")]
type Work = Option<crate::gpu::Counts>;
#[cfg(not(feature = "gpu"))]
type Work = Option<()>;

/// Measure this machine's ceilings and put each run against them: the CPU's (at `threads`) or,
/// where the model runs on a GPU, the GPU's, with the dispatches the timed runs took since
/// `before`.
pub(super) async fn measure(
    engine: &Engine,
    reports: &mut [Report],
    threads: Option<usize>,
    before: Work,
) -> Option<Measured> {
    let weights = engine.info.bytes_per_token;
    let kv = engine.model.kv_bytes_per_position() as u64;
    let against = |reports: &mut [Report], gb_per_s: f64| {
        for r in reports.iter_mut() {
            let c = &r.conditions;
            let tokens = (c.prompt_tokens, c.output_tokens);
            r.bandwidth_ceiling = Some(BandwidthCeiling::new(
                gb_per_s,
                weights,
                kv,
                tokens,
                r.decode_tps,
            ));
        }
    };
    if let Some(t) = threads {
        let gb_per_s = cpu_read_gb_per_s(t)?;
        against(reports, gb_per_s);
        return Some(Measured::Cpu { threads: t });
    }
    gpu_measure(engine, reports, before, against).await
}

/// The memory's read bandwidth at `threads` threads (`cpu::bandwidth`), or `None`, said on stderr.
pub(super) fn cpu_read_gb_per_s(threads: usize) -> Option<f64> {
    crate::cpu::bandwidth::read_gb_per_s(threads)
        .map_err(|why| eprintln!("tokenometer: no bandwidth ceiling: {why}"))
        .ok()
}

#[cfg(feature = "gpu")]
async fn gpu_measure(
    engine: &Engine,
    reports: &mut [Report],
    before: Work,
    against: impl Fn(&mut [Report], f64),
) -> Option<Measured> {
    let spent = gpu_work(engine)? - before?;
    let tokens: usize = reports.iter().map(|r| r.conditions.output_tokens).sum();
    let granted = crate::gpu::init().await.ok()?;
    let c = match crate::gpu::probe::measure(granted.gpu).await {
        Ok(c) => c,
        Err(why) => {
            eprintln!("tokenometer: no GPU ceilings: {why}");
            return None;
        }
    };
    against(reports, c.read_gb_per_s);
    let per_token = spent.dispatches as f64 / tokens.max(1) as f64;
    for r in reports.iter_mut() {
        r.dispatch_floor = Some(crate::meter::DispatchFloor::new(
            per_token,
            c.dispatch_us,
            r.decode_tps,
        ));
    }
    Some(Measured::Gpu {
        bytes: c.probe_bytes,
        dispatch_us: c.dispatch_us,
    })
}

#[cfg(not(feature = "gpu"))]
async fn gpu_measure(
    _: &Engine,
    _: &mut [Report],
    _: Work,
    _: impl Fn(&mut [Report], f64),
) -> Option<Measured> {
    None
}

/// The GPU's work since `before` and the median run against the ceilings, each in a sentence with
/// how it was measured.
pub(super) fn print(reports: &[Report], measured: Option<Measured>, before: Work, engine: &Engine) {
    print_gpu_work(before, engine);
    let Some(measured) = measured else {
        return;
    };
    let median = |f: fn(&Report) -> Option<(f64, &str)>| {
        let mut v: Vec<(f64, &str)> = reports.iter().filter_map(f).collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v.get(v.len() / 2).map(|(_, s)| s.to_string())
    };
    let ceiling = median(|r| {
        let c = r.bandwidth_ceiling.as_ref()?;
        Some((c.share.unwrap_or(0.0), c.sentence.as_str()))
    });
    match (measured, ceiling) {
        (Measured::Cpu { threads }, Some(sentence)) => println!(
            "bandwidth ceiling (memory read by {threads} threads over {} MiB, best of 4): {sentence}",
            crate::cpu::bandwidth::PROBE_BYTES >> 20
        ),
        (Measured::Gpu { bytes, dispatch_us }, Some(sentence)) => {
            println!(
                "GPU bandwidth ceiling (a read kernel over {} MiB, best of 3): {sentence}",
                bytes >> 20
            );
            if let Some(floor) = median(|r| {
                let f = r.dispatch_floor.as_ref()?;
                Some((f.share.unwrap_or(0.0), f.sentence.as_str()))
            }) {
                println!("GPU dispatch floor ({dispatch_us:.1} us a dispatch, best of 3): {floor}");
            }
        }
        _ => {}
    }
}

/// What the GPU did since `before`: the step's counts and the host's time a dispatch.
#[cfg(feature = "gpu")]
fn print_gpu_work(before: Work, engine: &Engine) {
    if let (Some(before), Some(after)) = (before, gpu_work(engine)) {
        let spent = after - before;
        println!(
            "GPU work of the timed runs: {} dispatches in {} submits, {} buffers and {} bind groups \
             made; the host spent {:.1} us a dispatch recording, writing and encoding (not \
             submitting or waiting)",
            spent.dispatches,
            spent.submits,
            spent.buffers,
            spent.bind_groups,
            spent.host_us_per_dispatch()
        );
    }
    if let Some((held, kv)) = engine.model.gpu_memory() {
        println!(
            "GPU memory held for this model: {:.1} MB (weights as held {:.1} MB, KV pool {:.1} MB, \
             the rest: activations, logits, the read-back)",
            held as f64 / 1e6,
            engine.info.weight_bytes as f64 / 1e6,
            kv as f64 / 1e6
        );
    }
}

#[cfg(not(feature = "gpu"))]
fn print_gpu_work(_: Work, _: &Engine) {}
