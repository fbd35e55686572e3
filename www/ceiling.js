// @ts-check
// This device's memory read bandwidth, for the decode's ceiling (the meter's `bandwidth_ceiling`:
// a token reads every weight once, so decode cannot beat bandwidth over the bytes a token reads).
// Measured once per device, engine build and thread count, in a worker of its own
// (EngineClient.readBandwidth), and kept in localStorage: a device's memory does not change
// between visits, and the probe (128 MiB read four times) need not be paid again.
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
