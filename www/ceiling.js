// @ts-check
// This device's memory read bandwidth, for the decode's ceiling (the meter's `bandwidth_ceiling`:
// a token reads every weight once, so decode cannot beat bandwidth over the bytes a token reads).
// Measured once per device, engine build and thread count, in a worker of its own
// (EngineClient.readBandwidth), and kept in localStorage: a device's memory does not change
// between visits, and the probe (128 MiB read four times) need not be paid again. On WebGPU the
// GPU's own (readGpuCeilings): a read kernel's bandwidth and one dispatch's cost, kept per adapter.
import { EngineClient } from './engine-client.js';

const KEY = 'tokenometer-read-gbps';
const GPU_KEY = 'tokenometer-gpu-ceilings';

/** @type {Map<string, Promise<any>>} probes of this visit, by storage key and key */
const probes = new Map();

/**
 * `key`'s figure kept under `storage` in localStorage where `valid` takes it, else measured once
 * this visit by `measure()` and kept; null where it could not be measured (said on the console
 * as `what` could not be measured; the figure is then left out).
 * @template T
 * @param {string} storage
 * @param {string} key
 * @param {(kept: any) => boolean} valid
 * @param {() => Promise<T>} measure
 * @param {string} what
 * @returns {Promise<T | null>}
 */
function keptOrMeasured(storage, key, valid, measure, what) {
  let kept = null;
  try {
    kept = JSON.parse(localStorage.getItem(storage) ?? '{}')[key] ?? null;
  } catch {
    kept = null;
  }
  if (kept !== null && valid(kept)) return Promise.resolve(kept);
  const id = `${storage} ${key}`;
  if (!probes.has(id)) {
    probes.set(
      id,
      measure().then(
        (measured) => {
          try {
            const all = JSON.parse(localStorage.getItem(storage) ?? '{}');
            localStorage.setItem(storage, JSON.stringify({ ...all, [key]: measured }));
          } catch {
            // Storage refused (a private window): measured again next visit.
          }
          return measured;
        },
        (e) => {
          console.warn(
            `tokenometer: ${what} could not be measured: ${e instanceof Error ? e.message : e}`,
          );
          probes.delete(id);
          return null;
        },
      ),
    );
  }
  return /** @type {Promise<T | null>} */ (probes.get(id));
}

/**
 * The memory's read bandwidth in GB/s at `threads` threads of `build`, kept or measured; null
 * where it could not be measured (said on the console; the ceiling is then left out).
 * @param {string} build
 * @param {number} threads
 * @returns {Promise<number | null>}
 */
export function readBandwidth(build, threads) {
  return keptOrMeasured(
    KEY,
    `${build}:${threads}`,
    (kept) => typeof kept === 'number' && kept > 0,
    () => EngineClient.readBandwidth(build, threads),
    "the memory's read bandwidth",
  );
}

/**
 * The GPU's ceilings (a read kernel's GB/s, one dispatch's us) on the adapter named `adapter`,
 * kept or measured on `engine`'s loaded model's device; null where they could not be measured.
 * @param {EngineClient} engine
 * @param {string} adapter
 * @returns {Promise<{ read_gb_per_s: number, dispatch_us: number } | null>}
 */
export function readGpuCeilings(engine, adapter) {
  return keptOrMeasured(
    GPU_KEY,
    adapter,
    (kept) => kept.read_gb_per_s > 0 && kept.dispatch_us > 0,
    () =>
      engine
        .measureGpu()
        .then(({ read_gb_per_s, dispatch_us }) => ({ read_gb_per_s, dispatch_us })),
    "the GPU's ceilings",
  );
}
