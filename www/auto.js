// @ts-check
// `auto` in the page, decided by measurement (docs/page.md): where the browser grants a hardware
// GPU (or the URL says `auto=race`, on any adapter), the model loads on the CPU (on its threads,
// in the threaded build where the page can run it) and on the GPU (checked against the CPU as it
// loads, crate/api/auto.rs), each decodes a few tokens, and the faster is kept; the other's worker
// is closed. A GPU that failed its check is never chosen. The verdict is kept in this browser per
// adapter, model, quantization and threads, so a later visit pays nothing; `auto=race` and the
// "Race again" button race anew. With WebGPU chosen explicitly the GPU is checked the same way,
// and a pass is kept likewise.

const VERDICTS = 'tokenometer-auto-v1';
const CHECKS = 'tokenometer-gpu-check-v1';

/**
 * The GPU adapter the browser grants: its name ("apple metal-3", "google swiftshader") and whether
 * it is a software one; null where there is no WebGPU or no adapter.
 * @returns {Promise<{ name: string, software: boolean } | null>}
 */
export async function gpuAdapter() {
  /** @type {any} */
  const gpu = /** @type {any} */ (globalThis.navigator)?.gpu;
  const adapter = await gpu?.requestAdapter?.().catch(() => null);
  if (!adapter) return null;
  const info = adapter.info ?? {};
  const parts = [info.vendor, info.architecture].filter(Boolean);
  if (info.description) parts.push(`(${info.description})`);
  const name = parts.join(' ') || 'a WebGPU adapter';
  const software =
    Boolean(info.isFallbackAdapter ?? adapter.isFallbackAdapter) ||
    /swiftshader|llvmpipe|lavapipe|softpipe|warp|basic render/i.test(name);
  return { name, software };
}

/** @param {string} store */
function read(store) {
  try {
    return JSON.parse(localStorage.getItem(store) ?? '{}') ?? {};
  } catch {
    return {};
  }
}

/**
 * @param {string} store
 * @param {string} key
 * @param {any} value  null forgets it
 */
function write(store, key, value) {
  const all = read(store);
  if (value === null) delete all[key];
  else all[key] = value;
  try {
    localStorage.setItem(store, JSON.stringify(all));
  } catch {
    // Storage full or off: the next visit races (or checks) again.
  }
}

/** The verdict kept for `key`, or null. @param {string} key */
export const rememberedVerdict = (key) => read(VERDICTS)[key] ?? null;
/** @param {string} key @param {any} verdict */
export const rememberVerdict = (key, verdict) => write(VERDICTS, key, verdict);
/** The GPU check kept for `key` (only passes are kept), or null. @param {string} key */
export const rememberedCheck = (key) => read(CHECKS)[key] ?? null;
/** @param {string} key @param {any} check */
export const rememberCheck = (key, check) =>
  write(CHECKS, key, check?.disagreed === 0 && check.rms <= check.bound ? check : null);

/**
 * The race: `main` loads `cpuSpec` while `rival` (a second engine client) loads `gpuSpec` with its
 * check; each, warm, times a short decode (the GPU's only where its check passed); the verdict
 * comes from the engine. The winner's worker ends in `main`, and its conditions carry the line.
 * @param {import('./engine-client.js').EngineClient} main
 * @param {import('./engine-client.js').EngineClient} rival
 * @param {any} cpuSpec
 * @param {any} gpuSpec
 * @param {string} adapter
 * @param {any} hooks  engine-client.js `load`'s
 * @returns {Promise<{ verdict: any, info: any, warmUpMs: number, ms: number }>}
 */
export async function race(main, rival, cpuSpec, gpuSpec, adapter, hooks) {
  const started = performance.now();
  // One after the other: both at once would share the cores, and the second load reads the file
  // from the browser's cache.
  const cpu = await main.load(cpuSpec, hooks);
  const gpu = await rival.load({ ...gpuSpec, check_gpu: true }, hooks);
  const check = gpu.info.gpu_check ?? null;
  hooks.onStatus?.('auto: timing the CPU');
  const cpuTps = await main.raceDecode();
  let gpuTps = 0;
  if (check && check.disagreed === 0 && check.rms <= check.bound) {
    hooks.onStatus?.('auto: timing the GPU');
    gpuTps = await rival.raceDecode();
  }
  const threads = cpuSpec.threads ?? 1;
  const verdict = await main.raceVerdict(
    { label: `CPU ${threads} thread${threads === 1 ? '' : 's'}`, decode_tps: cpuTps },
    { label: `WebGPU (${adapter})`, decode_tps: gpuTps },
    check,
  );
  const won = verdict.choice === 'wgpu' ? gpu : cpu;
  if (verdict.choice === 'wgpu') main.adopt(rival);
  else rival.terminate();
  const note =
    check && verdict.choice !== 'wgpu' && !(check.disagreed === 0 && check.rms <= check.bound)
      ? `${verdict.line}; ${gpu.info.gpu_check_sentence}`
      : verdict.line;
  const info = await main.setNote(note);
  return { verdict, info, warmUpMs: won.warmUpMs, ms: performance.now() - started };
}
