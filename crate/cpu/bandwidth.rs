//! How fast this machine's memory reads, as the CPU engine's threads see it: the engine's own
//! threads ([`Threads`]: natively OS threads, in the page's threaded build Web Workers) each
//! summing their share of a buffer far larger than the caches, the best of a few passes. The
//! ceiling of decode ([`crate::meter::BandwidthCeiling`]) divides it by the bytes a token reads.
//! The same code runs natively (`bench`) and in the page (a worker of its own, so that the
//! buffer's memory goes with it).

use std::hint::black_box;

use crate::cpu::Threads;

/// The buffer read natively: 256 MiB, several times any last-level cache of the machines this
/// runs on.
pub const PROBE_BYTES: usize = 256 << 20;
/// Passes timed; the fastest counts (the others met a neighbour, a page fault, a frequency step).
const PASSES: usize = 4;

/// Memory read bandwidth with `threads` threads natively over [`PROBE_BYTES`], in GB/s (10^9
/// bytes a second), or a sentence saying why the threads could not start.
#[cfg(not(target_arch = "wasm32"))]
pub fn read_gb_per_s(threads: usize) -> Result<f64, String> {
    let threads = Threads::new(threads.max(1))?;
    // The pool's workers start at once natively; the caller takes parts until they have.
    while threads.started()? + 1 < threads.count() {
        std::thread::yield_now();
    }
    let start = std::time::Instant::now();
    Ok(read_with(&threads, PROBE_BYTES, || {
        start.elapsed().as_secs_f64() * 1e3
    }))
}

/// Memory read bandwidth over `bytes` on `threads`, in GB/s, timed by `now_ms` (milliseconds).
pub fn read_with(threads: &Threads, bytes: usize, now_ms: impl Fn() -> f64) -> f64 {
    let words = (bytes / 8).max(8 * threads.count());
    // Written once, so that every page is in memory before the timed reads.
    let buffer: Vec<u64> = (0..words as u64).collect();
    let parts = threads.count();
    let share = words.div_ceil(parts);
    let mut best = f64::INFINITY;
    for _ in 0..PASSES {
        let start = now_ms();
        let sums = threads.map(parts, |p| {
            sum(&buffer[(p * share).min(words)..((p + 1) * share).min(words)])
        });
        black_box(sums);
        best = best.min(now_ms() - start);
    }
    (words * 8) as f64 / (best.max(1e-3) / 1e3) / 1e9
}

/// The words' sum, read as fast as the loads go: eight lanes the compiler reads with the widest
/// vector loads natively.
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
fn sum(part: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    for block in part.chunks_exact(8) {
        for (lane, &w) in lanes.iter_mut().zip(block) {
            *lane = lane.wrapping_add(w);
        }
    }
    lanes.iter().fold(0u64, |a, &b| a.wrapping_add(b))
}

/// The same in wasm, with SIMD128's loads written out: four 16-byte loads a step into four
/// accumulators. On one thread of this project's 2-core Xeon in headless Chromium the loop the
/// compiler made of the portable one read 6.4 GB/s, this one 9.6 and 10.2, against 16.3-17.2
/// natively (tests/e2e/ceiling.test.mjs).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn sum(part: &[u64]) -> u64 {
    use core::arch::wasm32::{i64x2_add, i64x2_extract_lane, u64x2_splat, v128, v128_load};
    let mut acc = [u64x2_splat(0); 4];
    let blocks = part.chunks_exact(8);
    let tail: u64 = blocks.remainder().iter().fold(0, |a, &b| a.wrapping_add(b));
    for block in blocks {
        let at = block.as_ptr() as *const v128;
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: `block` holds 8 words, so the four 16-byte loads at `at` stay inside it.
            *a = i64x2_add(*a, unsafe { v128_load(at.add(i)) });
        }
    }
    let all = i64x2_add(i64x2_add(acc[0], acc[1]), i64x2_add(acc[2], acc[3]));
    (i64x2_extract_lane::<0>(all) as u64)
        .wrapping_add(i64x2_extract_lane::<1>(all) as u64)
        .wrapping_add(tail)
}
