// @ts-check
// Downloading model files, and the cache they are kept in (the Cache API, so a second visit does
// not download a model again). Used by the worker (downloads) and by the page (what is cached, and
// clearing it). A download that ends short of what the server promised is an error and is never
// cached.

export const CACHE_NAME = 'tokenometer-models-v1';

// The largest file the engine can take: wasm32 allocations stop short of 2 GiB (isize::MAX), and a
// tab's whole WebAssembly memory at 4 GiB. Checked before reading, so a huge file is a sentence
// rather than a crash.
const MAX_FILE_BYTES = 2 ** 31 - 1;

/**
 * @param {string} label
 * @param {number} bytes
 */
export function checkSize(label, bytes) {
  if (bytes > MAX_FILE_BYTES) {
    throw new Error(`the ${label} is ${(bytes / 1e9).toFixed(1)} GB, but a browser tab's WebAssembly memory takes at most 2.1 GB in one piece (4.3 GB in all): it cannot run here; pick a smaller or quantized model, or run it with the CLI`);
  }
}

/**
 * Download `url` (or take it from the cache), reporting progress as it comes.
 * @param {string} url
 * @param {string} label  what the file is, for progress and errors ("model", "tokenizer")
 * @param {(p: { label: string, loaded: number, total: number, cached?: boolean, uncached?: string }) => void} progress
 * @returns {Promise<Uint8Array>}
 */
export async function fetchBytes(url, label, progress) {
  const cache = 'caches' in globalThis ? await caches.open(CACHE_NAME) : null;
  const cached = cache && (await cache.match(url));
  if (cached) {
    const bytes = new Uint8Array(await cached.arrayBuffer());
    progress({ label, loaded: bytes.length, total: bytes.length, cached: true });
    return bytes;
  }
  let response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw new Error(`cannot download ${label} from ${url}: ${e instanceof Error ? e.message : e}`);
  }
  if (!response.ok) throw new Error(`cannot download ${label}: ${url} answered ${response.status}`);
  if (!response.body) throw new Error(`cannot download ${label}: ${url} answered with no body`);
  const total = Number(response.headers.get('Content-Length')) || 0;
  checkSize(label, total);
  const reader = response.body.getReader();
  /** @type {Uint8Array[]} */
  const chunks = [];
  let loaded = 0;
  for (;;) {
    let step;
    try {
      step = await reader.read();
    } catch (e) {
      throw new Error(`download of ${label} broke off after ${loaded} bytes: ${e instanceof Error ? e.message : e}`);
    }
    if (step.done) break;
    chunks.push(step.value);
    loaded += step.value.length;
    checkSize(label, loaded);
    progress({ label, loaded, total: Math.max(total, loaded) });
  }
  // Content-Length counts the bytes on the wire: with Content-Encoding (gzip, br) it is the
  // compressed size, and the decompressed body is longer, so it is a floor, never the size. Fewer
  // bytes than it promised is a download that broke off (a compressed stream cut short fails in
  // the browser's decoder, above); more is a compressed one (cross-origin, the encoding is not
  // visible).
  if (total && loaded < total) {
    throw new Error(`download of ${label} is incomplete: ${loaded} of ${total} bytes`);
  }
  const bytes = new Uint8Array(loaded);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.length;
  }
  if (cache) {
    // Keeping a copy is a convenience: a browser that refuses it (its storage quota, a private
    // window, or Chromium's "Unexpected internal error" for a 440 MB file) still runs the model.
    try {
      await cache.put(url, new Response(bytes, { headers: { 'Content-Length': String(loaded) } }));
    } catch (e) {
      progress({ label, loaded, total: loaded, uncached: `not kept in this browser (${e instanceof Error ? e.message : e})` });
    }
  }
  return bytes;
}

/**
 * What the cache holds: every file's URL and size.
 * @returns {Promise<{ url: string, bytes: number }[]>}
 */
export async function cachedFiles() {
  // Only look: opening the cache would create it.
  if (!('caches' in globalThis) || !(await caches.has(CACHE_NAME))) return [];
  const cache = await caches.open(CACHE_NAME);
  const files = [];
  for (const request of await cache.keys()) {
    const response = await cache.match(request);
    const bytes = Number(response?.headers.get('Content-Length')) || (response ? (await response.arrayBuffer()).byteLength : 0);
    files.push({ url: request.url, bytes });
  }
  return files;
}

/** Forget every cached file; the next load downloads again. */
export async function clearCache() {
  if ('caches' in globalThis) await caches.delete(CACHE_NAME);
}
