//! The workers and how a job reaches them. Natively the workers are OS threads; in the page's
//! threaded build (`target_feature = "atomics"`) they are Web Workers sharing the module and its
//! memory (`web.rs`), each running [`work`] from an exported function. The same code runs both:
//! std's `Mutex` and `Condvar` wait on `memory.atomic.wait32` there. (The other wasm builds
//! start no worker, so the workers' side goes unused in them.)
#![cfg_attr(
    all(target_arch = "wasm32", not(target_feature = "atomics")),
    allow(dead_code)
)]

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use web_time::Instant;

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

pub struct State {
    word: AtomicU64,
    job: AtomicPtr<Job<'static>>,
    done: AtomicUsize,
    panicked: AtomicBool,
    stop: AtomicBool,
    sleepers: AtomicUsize,
    /// Workers that have started taking parts.
    pub(super) started: AtomicUsize,
    /// The parts each thread has run: the caller's first, then each worker's in the order they
    /// started (a test's proof that the workers work: the caller alone gives the same bits).
    pub(super) taken: Box<[AtomicUsize]>,
    /// Set (by a Web Worker's JavaScript, `web.rs`) when a worker failed: in wasm a panic traps
    /// its instance, and a part it had taken would never be done.
    pub(super) failed: AtomicU32,
    lock: Mutex<()>,
    wake: Condvar,
}

impl State {
    /// Take a part of the current job and run it as thread `who`; false when none is left.
    fn take_one(&self, who: usize) -> bool {
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
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (job.f)(next as usize)));
        if ran.is_err() {
            self.panicked.store(true, Release);
        }
        self.taken[who].fetch_add(1, Relaxed);
        self.done.fetch_add(1, Release);
        true
    }

    fn has_work(&self) -> bool {
        let word = self.word.load(SeqCst);
        (word >> 16) & 0xffff < word & 0xffff
    }
}

pub struct Pool {
    pub(super) state: Arc<State>,
    #[cfg(not(target_arch = "wasm32"))]
    workers: Vec<std::thread::JoinHandle<()>>,
    /// One job at a time.
    running: Mutex<()>,
}

impl Pool {
    /// `workers` threads beside the caller's, or a sentence saying why not.
    pub fn new(workers: usize) -> Result<Pool, String> {
        let state = Arc::new(State {
            word: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            started: AtomicUsize::new(0),
            taken: (0..=workers).map(|_| AtomicUsize::new(0)).collect(),
            failed: AtomicU32::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        #[cfg(not(target_arch = "wasm32"))]
        {
            let mut pool = Pool {
                state: state.clone(),
                workers: Vec::new(),
                running: Mutex::new(()),
            };
            for i in 0..workers {
                let state = state.clone();
                let worker = std::thread::Builder::new()
                    .name(format!("tokenometer-cpu-{}", i + 1))
                    .spawn(move || work(&state))
                    .map_err(|e| e.to_string())?;
                pool.workers.push(worker);
            }
            Ok(pool)
        }
        // In the page the workers are Web Workers, which the caller starts on `state` (`web.rs`).
        #[cfg(target_arch = "wasm32")]
        {
            let _ = workers;
            Ok(Pool {
                state,
                running: Mutex::new(()),
            })
        }
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
        while state.take_one(0) {}
        while state.done.load(Acquire) < parts {
            std::hint::spin_loop();
            if state.failed.load(Relaxed) != 0 {
                panic!("a CPU thread stopped (its Web Worker failed: see the browser's console)");
            }
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
        #[cfg(not(target_arch = "wasm32"))]
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

/// A worker: take parts while there are any, spin a while, then sleep until woken; returns when
/// the pool is dropped.
pub fn work(state: &State) {
    let who = (state.started.fetch_add(1, SeqCst) + 1).min(state.taken.len() - 1);
    loop {
        while state.take_one(who) {}
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
