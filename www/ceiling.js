// @ts-check
// This device's memory read bandwidth, for the decode's ceiling (the meter's `bandwidth_ceiling`:
// a token reads every weight once, so decode cannot beat bandwidth over the bytes a token reads).
// Measured once per device, engine build and thread count, in a worker of its own
// (EngineClient.readBandwidth), and kept in localStorage: a device's memory does not change
// between visits, and the probe (128 MiB read four times) need not be paid again. On WebGPU the
// GPU's own (readGpuCeilings): a read kernel's bandwidth and one dispatch's cost, kept per adapter.
import { EngineClient } from './engine-client.js';

const KEY = 'tokenometer-read-gbps';

/** @type {Map<string, Promise<number | null>>} probes of this visit */
const probes = new Map();

/**
 * The memory's read bandwidth in GB/s at `threads` threads of `build`, kept or measured; null
 * where it could not be measured (said on the console; the ceiling is then left out).
 * @param {string} build
 * @param {number} threads
 * @returns {Promise<number | null>}
 */
export function readBandwidth(build, threads) {
  const key = `${build}:${threads}`;
  let kept = null;
  try {
    kept = JSON.parse(localStorage.getItem(KEY) ?? '{}')[key] ?? null;
  } catch {
    kept = null;
  }
  if (typeof kept === 'number' && kept > 0) return Promise.resolve(kept);
  if (!probes.has(key)) {
    probes.set(key, EngineClient.readBandwidth(build, threads).then((gbps) => {
      try {
        const all = JSON.parse(localStorage.getItem(KEY) ?? '{}');
        localStorage.setItem(KEY, JSON.stringify({ ...all, [key]: gbps }));
      } catch {
        // Storage refused (a private window): measured again next visit.
      }
      return gbps;
    }, (e) => {
      console.warn(`tokenometer: the memory's read bandwidth could not be measured: ${e instanceof Error ? e.message : e}`);
      probes.delete(key);
      return null;
    }));
  }
  return /** @type {Promise<number | null>} */ (probes.get(key));
}

const GPU_KEY = 'tokenometer-gpu-ceilings';

/** @type {Map<string, Promise<{ read_gb_per_s: number, dispatch_us: number } | null>>} */
const gpuProbes = new Map();

/**
 * The GPU's ceilings (a read kernel's GB/s, one dispatch's us) on the adapter named `adapter`,
 * kept or measured on `engine`'s loaded model's device; null where they could not be measured.
 * @param {EngineClient} engine
 * @param {string} adapter
 * @returns {Promise<{ read_gb_per_s: number, dispatch_us: number } | null>}
 */
export function readGpuCeilings(engine, adapter) {
  let kept = null;
  try {
    kept = JSON.parse(localStorage.getItem(GPU_KEY) ?? '{}')[adapter] ?? null;
  } catch {
    kept = null;
  }
  if (kept && kept.read_gb_per_s > 0 && kept.dispatch_us > 0) return Promise.resolve(kept);
  if (!gpuProbes.has(adapter)) {
    gpuProbes.set(adapter, engine.measureGpu().then(({ read_gb_per_s, dispatch_us }) => {
      const measured = { read_gb_per_s, dispatch_us };
      try {
        const all = JSON.parse(localStorage.getItem(GPU_KEY) ?? '{}');
        localStorage.setItem(GPU_KEY, JSON.stringify({ ...all, [adapter]: measured }));
      } catch {
        // Storage refused (a private window): measured again next visit.
      }
      return measured;
    }, (e) => {
      console.warn(`tokenometer: the GPU's ceilings could not be measured: ${e instanceof Error ? e.message : e}`);
      gpuProbes.delete(adapter);
      return null;
    }));
  }
  return /** @type {Promise<{ read_gb_per_s: number, dispatch_us: number } | null>} */ (gpuProbes.get(adapter));
}
