//! How fast this machine's memory reads, as the CPU engine's threads see it: `threads` threads
//! each summing their share of a buffer far larger than the caches, the best of a few passes.
//! The ceiling of decode ([`crate::meter::BandwidthCeiling`]) divides it by the bytes a token
//! reads. Natively only (the page measures its own).

use std::hint::black_box;
use std::time::Instant;

/// The buffer read: 256 MiB, several times any last-level cache of the machines this runs on.
pub const PROBE_BYTES: usize = 256 << 20;
/// Passes timed; the fastest counts (the others met a neighbour, a page fault, a frequency step).
const PASSES: usize = 4;

/// Memory read bandwidth with `threads` threads, in GB/s (10^9 bytes a second).
pub fn read_gb_per_s(threads: usize) -> f64 {
    let threads = threads.max(1);
    let words = PROBE_BYTES / 8;
    // Written once, so that every page is in memory before the timed reads.
    let buffer: Vec<u64> = (0..words as u64).collect();
    let share = words.div_ceil(threads);
    let mut best = f64::INFINITY;
    for _ in 0..PASSES {
        let start = Instant::now();
        std::thread::scope(|s| {
            for part in buffer.chunks(share) {
                s.spawn(move || {
                    // Eight lanes of sums: the compiler reads them with the widest vector loads.
                    let mut lanes = [0u64; 8];
                    for block in part.chunks_exact(8) {
                        for (lane, &w) in lanes.iter_mut().zip(block) {
                            *lane = lane.wrapping_add(w);
                        }
                    }
                    black_box(lanes);
                });
            }
        });
        best = best.min(start.elapsed().as_secs_f64());
    }
    PROBE_BYTES as f64 / best / 1e9
}
