//! The CPU kernels' threads: the caller's alone, or a pool of `n` over which each
//! matrix product is split by rows and attention by heads (`cpu/ops.rs`). Every row's dot
//! product is made by the same kernel, in the same order, whichever thread makes it, so `n`
//! threads give the very bits one thread gives.
//!
//! The pool is our own (`pool.rs`; natively OS threads, in the page's threaded build Web Workers
//! sharing the module's memory, `web.rs`): `n - 1` workers beside the caller, which takes parts too. A product's parts are claimed from one atomic word (the job's
//! number, the next part, the count of parts), so a worker can never take a part of a job that
//! has ended. Between jobs the workers spin for about a millisecond before they sleep: a decode
//! step hands out a job for each of its ~200 products, microseconds apart. Measured first with
//! rayon's pool (its `install` puts the caller to sleep and wakes a worker each time): SmolLM2 Q8_0
//! decoded at 80.0 / 74.5 tok/s on 2 threads against 81.2 / 72.3 on one, no gain at all.
//!
//! A part is a range of whole rows (whole groups of 8 for packed matrices), written straight into
//! the product's output at batch 1; nothing is allocated per product there.

use std::fmt;

mod pool;
#[cfg(target_arch = "wasm32")]
mod web;

/// The threads the CPU kernels run on.
#[derive(Clone)]
pub struct Threads {
    pool: Option<std::sync::Arc<pool::Pool>>,
    count: usize,
}

impl fmt::Debug for Threads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Threads({})", self.count)
    }
}

impl Default for Threads {
    fn default() -> Self {
        Threads::one()
    }
}

impl Threads {
    /// The caller's thread alone.
    pub fn one() -> Threads {
        Threads {
            pool: None,
            count: 1,
        }
    }

    /// `count` threads (1: the caller's alone), or a sentence saying why not.
    pub fn new(count: usize) -> Result<Threads, String> {
        if count == 0 {
            return Err("--threads must be at least 1".into());
        }
        // Each thread spins while it waits for a part: thousands on a few cores would take a
        // minute only to start (measured: 100,000 asked for, 40-60 s before failing).
        #[cfg(not(target_arch = "wasm32"))]
        {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            if count > 4 * cores {
                return Err(format!(
                    "--threads {count} is more than 4 times this machine's {cores} logical cores; \
                     use at most {}",
                    4 * cores
                ));
            }
        }
        if count == 1 {
            return Ok(Threads::one());
        }
        let pool =
            pool::Pool::new(count - 1).map_err(|e| format!("cannot start {count} threads: {e}"))?;
        #[cfg(target_arch = "wasm32")]
        for _ in 1..count {
            web::spawn(pool.state.clone())?;
        }
        Ok(Threads {
            pool: Some(std::sync::Arc::new(pool)),
            count,
        })
    }

    /// Whether this build can run more than one thread: natively always; in the page, the
    /// threaded build (shared memory).
    pub const MANY: bool = cfg!(any(not(target_arch = "wasm32"), target_feature = "atomics"));

    /// The workers that have started taking parts (each starts on its own, a little after `new`
    /// returns; in the page a Web Worker takes tens of milliseconds), or a sentence saying one
    /// failed. Until they have, the caller takes every part itself.
    pub fn started(&self) -> Result<usize, String> {
        let Some(pool) = &self.pool else {
            return Ok(0);
        };
        if pool.state.failed.load(std::sync::atomic::Ordering::SeqCst) != 0 {
            return Err(
                "a CPU thread (a Web Worker) failed to start: see the browser's console".into(),
            );
        }
        Ok(pool.state.started.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// The parts of jobs each thread has run so far: the caller's first, then each worker's in
    /// the order they started; empty for one thread.
    pub fn parts_taken(&self) -> Vec<usize> {
        self.pool.as_ref().map_or(Vec::new(), |pool| {
            let taken = pool.state.taken.iter();
            taken
                .map(|n| n.load(std::sync::atomic::Ordering::SeqCst))
                .collect()
        })
    }

    /// This machine's physical cores (the default): on Linux the distinct (package, core) pairs
    /// of /proc/cpuinfo, elsewhere the threads the OS offers.
    pub fn physical_cores() -> usize {
        let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
        #[cfg(target_os = "linux")]
        if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
            let mut cores = std::collections::BTreeSet::new();
            let mut package = "";
            for line in info.lines() {
                let value = line.split_once(':').map(|(_, v)| v.trim());
                if line.starts_with("physical id") {
                    package = value.unwrap_or("");
                } else if line.starts_with("core id") {
                    cores.insert((package.to_string(), value.unwrap_or("").to_string()));
                }
            }
            if !cores.is_empty() {
                return cores.len().min(logical);
            }
        }
        logical
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// The size of each of the parts `n` items are split into, a multiple of `multiple`: one part
    /// (`n`) with one thread or where `n` is under `min` items a thread.
    pub fn part_size(&self, n: usize, multiple: usize, min: usize) -> usize {
        if self.count == 1 || n < min * self.count {
            return n.max(1);
        }
        n.div_ceil(self.count).div_ceil(multiple) * multiple
    }

    /// `f(part, piece)` for each `size`-long piece of `out` (the last may be shorter), on the
    /// threads at once.
    pub fn for_pieces<T: Send>(
        &self,
        out: &mut [T],
        size: usize,
        f: impl Fn(usize, &mut [T]) + Sync + Send,
    ) {
        let size = size.max(1);
        if let Some(pool) = &self.pool
            && out.len() > size
        {
            let (len, parts) = (out.len(), out.len().div_ceil(size));
            let base = pool::Shared(out.as_mut_ptr());
            pool.run(parts, &|p| {
                let start = p * size;
                // SAFETY: part `p` alone takes elements `start..start + n` of `out`, which
                // outlives the job (`run` returns when every part is done).
                let piece = unsafe {
                    std::slice::from_raw_parts_mut(base.at(start), size.min(len - start))
                };
                f(p, piece)
            });
            return;
        }
        for (p, piece) in out.chunks_mut(size).enumerate() {
            f(p, piece);
        }
    }

    /// `f(part)` for `parts` parts on the threads at once, the results in order.
    pub fn map<R: Send>(&self, parts: usize, f: impl Fn(usize) -> R + Sync + Send) -> Vec<R> {
        let mut results: Vec<Option<R>> = (0..parts).map(|_| None).collect();
        self.for_pieces(&mut results, 1, |p, slot| slot[0] = Some(f(p)));
        results
            .into_iter()
            .map(|r| r.expect("every part ran"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element is written by exactly one part, job after job; results come back in order;
    /// a part that panics panics the caller, and the pool goes on working.
    #[test]
    fn parts_cover_the_output_once_and_in_order() {
        let threads = Threads::new(3).unwrap();
        let mut out = vec![0u32; 1001];
        for job in 1..=2000u32 {
            let size = threads.part_size(out.len(), 8, 1);
            threads.for_pieces(&mut out, size, |p, piece| {
                for (i, v) in piece.iter_mut().enumerate() {
                    *v += (p * size + i) as u32 + 1;
                }
            });
            if job % 500 == 0 {
                assert!(
                    out.iter()
                        .enumerate()
                        .all(|(i, &v)| v == job * (i as u32 + 1))
                );
            }
        }
        assert_eq!(threads.map(7, |p| p * p), vec![0, 1, 4, 9, 16, 25, 36]);
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            threads.for_pieces(&mut [0u8; 6], 2, |p, _| assert!(p != 2, "part 2 fails"))
        }));
        assert!(failed.is_err());
        assert_eq!(threads.map(3, |p| p + 1), vec![1, 2, 3]);
    }
}
