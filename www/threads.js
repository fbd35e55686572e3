// @ts-check
// The CPU engine's threads in the page. More than one needs the threaded build (pkg/threads/,
// `make pkg` with nightly Rust: shared memory and atomics), which runs only where the page is
// cross-origin isolated (www/serve.mjs sends COOP/COEP; on a static host www/sw.js adds them) and is the CPU engine alone: WebGPU runs
// in the other builds (simd.js). The choice starts as the URL's `threads=` (default: half the
// logical cores, as wllama's), follows the form's Threads select, and each engine client starts
// its worker with the build a configuration needs (engine-client.js, worker.js).
import { simdBuild } from './simd.js';

/** The browser's logical cores, as it reports them. */
export const CORES = Math.max(1, globalThis.navigator?.hardwareConcurrency || 1);

/** The default: half the logical cores (at least one). */
export const DEFAULT_THREADS = Math.max(1, Math.floor(CORES / 2));

/** Whether this page can share memory between workers (cross-origin isolated). */
export const threadsPossible = () =>
  globalThis.crossOriginIsolated === true && typeof SharedArrayBuffer === 'function';

/** Why the page runs one thread whatever is chosen, or null when it can run more. */
export function oneThreadReason() {
  if (globalThis.crossOriginIsolated === true && typeof SharedArrayBuffer !== 'function') {
    return 'one thread here: this browser gives no SharedArrayBuffer, even to a cross-origin isolated page, so workers cannot share memory';
  }
  if (!threadsPossible()) {
    return (
      "one thread here: the page is not cross-origin isolated (its host sends no COOP/COEP headers, as make serve does, and the site's service worker that adds them is not running: " +
      ('serviceWorker' in navigator && globalThis.isSecureContext
        ? 'it installs on the first visit and the page reloads once; reload if it did not'
        : 'this window has no service workers (a private window?) or the page is not on https or localhost') +
      '), so workers cannot share memory'
    );
  }
  return null;
}

let chosen = DEFAULT_THREADS;

/** The thread count chosen now. */
export const chosenThreads = () => chosen;

/** @param {number} n  1 to CORES */
export function chooseThreads(n) {
  chosen = n;
}

/**
 * Parse `threads=`: a whole number from 1 to CORES. Throws an error that names the choices.
 * @param {string} raw
 */
export function parseThreads(raw) {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > CORES)
    throw new Error(`threads=${raw} is not a choice (1 to ${CORES}, this browser's logical cores)`);
  return n;
}

/**
 * The build and thread count a configuration runs: the threaded build for the CPU on more than
 * one thread where the page can share memory, else the chosen SIMD build on one.
 * @param {string} backend
 * @param {number} threads
 * @returns {{ build: string, threads: number }}
 */
export function buildFor(backend, threads) {
  if (backend === 'cpu' && threads > 1 && threadsPossible()) return { build: 'threads', threads };
  return { build: simdBuild(), threads: 1 };
}

/**
 * The threads each of `lanes` CPU lanes running at once gets: the chosen count shared between
 * them, at least one each.
 * @param {number} threads
 * @param {number} lanes
 */
export const shareThreads = (threads, lanes) =>
  Math.max(1, Math.floor(threads / Math.max(1, lanes)));
