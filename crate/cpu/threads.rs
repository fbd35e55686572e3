//! The CPU kernels' threads: the caller's alone, or (natively) a pool of `n` over which each
//! matrix product is split by rows and attention by heads (`cpu/ops.rs`). Every row's dot
//! product is made by the same kernel, in the same order, whichever thread makes it, so `n`
//! threads give the very bits one thread gives.
//!
//! The pool is our own (natively; the page's builds run one thread): `n - 1` workers beside the
//! caller, which takes parts too. A product's parts are claimed from one atomic word (the job's
//! number, the next part, the count of parts), so a worker can never take a part of a job that
//! has ended. Between jobs the workers spin for about a millisecond before they sleep: a decode
//! step hands out a job for each of its ~200 products, microseconds apart. Measured first with
//! rayon's pool (its `install` puts the caller to sleep and wakes a worker each time): SmolLM2 Q8_0
//! decoded at 80.0 / 74.5 tok/s on 2 threads against 81.2 / 72.3 on one, no gain at all.
//!
//! A part is a range of whole rows (whole groups of 8 for packed matrices), written straight into
//! the product's output at batch 1; nothing is allocated per product there.

use std::fmt;

/// The threads the CPU kernels run on.
#[derive(Clone)]
pub struct Threads {
    #[cfg(not(target_arch = "wasm32"))]
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
            #[cfg(not(target_arch = "wasm32"))]
            pool: None,
            count: 1,
        }
    }

    /// `count` threads (1: the caller's alone), or a sentence saying why not.
    pub fn new(count: usize) -> Result<Threads, String> {
        if count == 0 {
            return Err("--threads must be at least 1".into());
        }
        if count == 1 {
            return Ok(Threads::one());
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let pool = pool::Pool::new(count - 1)
                .map_err(|e| format!("cannot start {count} threads: {e}"))?;
            Ok(Threads {
                pool: Some(std::sync::Arc::new(pool)),
                count,
            })
        }
        #[cfg(target_arch = "wasm32")]
        Err("this build runs the CPU kernels on one thread".into())
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
        #[cfg(not(target_arch = "wasm32"))]
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

/// The workers and how a job reaches them.
#[cfg(not(target_arch = "wasm32"))]
mod pool {
    use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::{Duration, Instant};

    /// How long an idle worker spins before it sleeps.
    const SPIN: Duration = Duration::from_millis(1);

    /// A pointer handed to the parts of a job (each part uses its own elements).
    pub struct Shared<T>(pub *mut T);
    // SAFETY: the parts of a job use disjoint elements (see `Threads::for_pieces`).
    unsafe impl<T: Send> Sync for Shared<T> {}
    unsafe impl<T: Send> Send for Shared<T> {}
    impl<T> Shared<T> {
        /// Element `i`'s address (a method, so that closures capture the whole `Shared`).
        pub fn at(&self, i: usize) -> *mut T {
            self.0.wrapping_add(i)
        }
    }

    /// A job: its parts' function, on the caller's stack while the job runs.
    struct Job<'a> {
        f: &'a (dyn Fn(usize) + Sync),
    }

    /// The job's number (bits 32..64), the next part to take (16..32) and its parts (0..16).
    fn pack(job: u64, next: u64, parts: u64) -> u64 {
        (job << 32) | (next << 16) | parts
    }

    struct State {
        word: AtomicU64,
        job: AtomicPtr<Job<'static>>,
        done: AtomicUsize,
        panicked: AtomicBool,
        stop: AtomicBool,
        sleepers: AtomicUsize,
        lock: Mutex<()>,
        wake: Condvar,
    }

    impl State {
        /// Take a part of the current job and run it; false when none is left.
        fn take_one(&self) -> bool {
            let word = self.word.load(Acquire);
            let (next, parts) = ((word >> 16) & 0xffff, word & 0xffff);
            if next >= parts {
                return false;
            }
            if self
                .word
                .compare_exchange_weak(word, word + (1 << 16), AcqRel, Relaxed)
                .is_err()
            {
                return true;
            }
            // SAFETY: a part of the job is ours and not done, so the caller is still inside
            // `run` and the job lives.
            let job = unsafe { &*self.job.load(Acquire) };
            let ran =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (job.f)(next as usize)));
            if ran.is_err() {
                self.panicked.store(true, Release);
            }
            self.done.fetch_add(1, Release);
            true
        }

        fn has_work(&self) -> bool {
            let word = self.word.load(SeqCst);
            (word >> 16) & 0xffff < word & 0xffff
        }
    }

    pub struct Pool {
        state: Arc<State>,
        workers: Vec<std::thread::JoinHandle<()>>,
        /// One job at a time.
        running: Mutex<()>,
    }

    impl Pool {
        /// `workers` threads beside the caller's.
        pub fn new(workers: usize) -> std::io::Result<Pool> {
            let state = Arc::new(State {
                word: AtomicU64::new(0),
                job: AtomicPtr::new(std::ptr::null_mut()),
                done: AtomicUsize::new(0),
                panicked: AtomicBool::new(false),
                stop: AtomicBool::new(false),
                sleepers: AtomicUsize::new(0),
                lock: Mutex::new(()),
                wake: Condvar::new(),
            });
            let mut pool = Pool {
                state: state.clone(),
                workers: Vec::new(),
                running: Mutex::new(()),
            };
            for i in 0..workers {
                let state = state.clone();
                let worker = std::thread::Builder::new()
                    .name(format!("tokenometer-cpu-{}", i + 1))
                    .spawn(move || work(&state))?;
                pool.workers.push(worker);
            }
            Ok(pool)
        }

        /// `f(part)` for every part in `0..parts`, on the workers and the caller; returns when all
        /// are done.
        pub fn run(&self, parts: usize, f: &(dyn Fn(usize) + Sync)) {
            assert!(parts < 1 << 16, "a job has fewer than 65,536 parts");
            let _one = self.running.lock().unwrap_or_else(|e| e.into_inner());
            let state = &self.state;
            let job = Job { f };
            // SAFETY: the job outlives its parts: this function returns when all are done, and
            // no worker takes a part of a job after its last part is taken.
            let job: &Job<'static> = unsafe { std::mem::transmute(&job) };
            state.done.store(0, Relaxed);
            state.job.store(job as *const Job as *mut Job, Release);
            // The job's number follows the last one's (only a caller holding `running` writes it).
            let number = ((state.word.load(Relaxed) >> 32) + 1) & 0xffff_ffff;
            state.word.store(pack(number, 0, parts as u64), SeqCst);
            if state.sleepers.load(SeqCst) > 0 {
                let _guard = state.lock.lock().unwrap_or_else(|e| e.into_inner());
                state.wake.notify_all();
            }
            while state.take_one() {}
            while state.done.load(Acquire) < parts {
                std::hint::spin_loop();
            }
            if state.panicked.swap(false, AcqRel) {
                panic!("a CPU thread panicked in a kernel");
            }
        }
    }

    impl Drop for Pool {
        fn drop(&mut self) {
            self.state.stop.store(true, SeqCst);
            {
                let _guard = self.state.lock.lock().unwrap_or_else(|e| e.into_inner());
                self.state.wake.notify_all();
            }
            for worker in self.workers.drain(..) {
                let _ = worker.join();
            }
        }
    }

    /// A worker: take parts while there are any, spin a while, then sleep until woken.
    fn work(state: &State) {
        loop {
            while state.take_one() {}
            let idle = Instant::now();
            while !state.has_work() && idle.elapsed() < SPIN {
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
                if state.stop.load(Relaxed) {
                    return;
                }
            }
            if state.has_work() {
                continue;
            }
            let guard = state.lock.lock().unwrap_or_else(|e| e.into_inner());
            state.sleepers.fetch_add(1, SeqCst);
            if !state.has_work() && !state.stop.load(SeqCst) {
                let _ = state
                    .wake
                    .wait_timeout(guard, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner());
            }
            state.sleepers.fetch_sub(1, SeqCst);
            if state.stop.load(SeqCst) {
                return;
            }
        }
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
