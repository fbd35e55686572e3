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
    throw new Error(
      `the ${label} is ${(bytes / 1e9).toFixed(1)} GB, but a browser tab's WebAssembly memory takes at most 2.1 GB in one piece (4.3 GB in all): it cannot run here; pick a smaller or quantized model, or run it with the CLI`,
    );
  }
}

/**
 * @typedef {{ label: string, loaded: number, total: number, cached?: boolean, uncached?: string }} Progress
 */

/**
 * Download `url` (or take it from the cache), giving each piece to `take` as it arrives, so that
 * the file is never held whole: the engine makes a GGUF's weights from the pieces as they pass
 * (issue 43). A copy goes to the cache as it arrives, at the pace of the slower of the two.
 * @param {string} url
 * @param {string} label  what the file is, for progress and errors ("model", "tokenizer")
 * @param {(p: Progress) => void} progress
 * @param {(piece: Uint8Array) => void | Promise<void>} take  may return a promise to wait for (the
 *   next piece is read after it); throws to stop the download (a file the engine refuses)
 * @param {(loaded: number, cached: boolean) => void | Promise<void>} [check]  called once every
 *   piece is taken; throws to refuse the file (a sha-256 that differs), which is then not kept in
 *   the cache (a kept copy it refuses is forgotten)
 * @returns {Promise<number>} the file's length in bytes
 */
export async function fetchPieces(url, label, progress, take, check = () => {}) {
  const cache = 'caches' in globalThis ? await caches.open(CACHE_NAME) : null;
  const cached = cache && (await cache.match(url));
  if (cached?.body) {
    const total = Number(cached.headers.get('Content-Length')) || 0;
    const loaded = await readPieces(cached.body, label, take, (n) =>
      progress({ label, loaded: n, total: Math.max(total, n), cached: true }),
    );
    try {
      await check(loaded, true);
    } catch (e) {
      await cache.delete(url);
      throw e;
    }
    return loaded;
  }
  const abort = new AbortController();
  let response;
  try {
    response = await fetch(url, { signal: abort.signal });
  } catch (e) {
    throw new Error(`cannot download ${label} from ${url}: ${e instanceof Error ? e.message : e}`);
  }
  if (!response.ok) throw new Error(`cannot download ${label}: ${url} answered ${response.status}`);
  if (!response.body) throw new Error(`cannot download ${label}: ${url} answered with no body`);
  const total = Number(response.headers.get('Content-Length')) || 0;
  checkSize(label, total);
  const copy = cache ? cacheCopy(cache, url, total) : null;
  let loaded;
  try {
    loaded = await readPieces(
      response.body,
      label,
      async (piece) => {
        await take(piece);
        await copy?.add(piece);
      },
      (n) => progress({ label, loaded: n, total: Math.max(total, n) }),
    );
    // Content-Length counts the bytes on the wire: with Content-Encoding (gzip, br) it is the
    // compressed size, and the decompressed body is longer, so it is a floor, never the size.
    // Fewer bytes than it promised is a download that broke off (a compressed stream cut short
    // fails in the browser's decoder, above); more is a compressed one (cross-origin, the
    // encoding is not visible).
    if (total && loaded < total) {
      throw new Error(`download of ${label} is incomplete: ${loaded} of ${total} bytes`);
    }
    await check(loaded, false);
  } catch (e) {
    abort.abort();
    copy?.drop(e);
    throw e;
  }
  const refused = copy && (await copy.close(loaded));
  if (refused)
    progress({ label, loaded, total: loaded, uncached: `not kept in this browser (${refused})` });
  return loaded;
}

/**
 * Read `body` (a download, the cached copy or a picked file) to its end, giving each piece to
 * `take` (which may return a promise to wait for) and the bytes so far to `progress`.
 * @param {ReadableStream<Uint8Array>} body
 * @param {string} label
 * @param {(piece: Uint8Array) => void | Promise<void>} take
 * @param {(loaded: number) => void} progress
 * @returns {Promise<number>} the bytes read
 */
export async function readPieces(body, label, take, progress) {
  const reader = body.getReader();
  let loaded = 0;
  try {
    for (;;) {
      let step;
      try {
        step = await reader.read();
      } catch (e) {
        throw new Error(
          `download of ${label} broke off after ${loaded} bytes: ${e instanceof Error ? e.message : e}`,
        );
      }
      if (step.done) return loaded;
      loaded += step.value.length;
      checkSize(label, loaded);
      await take(step.value);
      progress(loaded);
    }
  } finally {
    reader.releaseLock();
  }
}

/**
 * The cache's copy of a download, written as the pieces arrive: `add` waits while the cache is
 * behind (so pieces never pile up in memory), `close` keeps it (or says why the browser did not:
 * its storage quota, a private window), `drop` forgets it.
 * @param {Cache} cache
 * @param {string} url
 * @param {number} total  the promised length: a body of another length (a compressed one) is not kept
 */
function cacheCopy(cache, url, total) {
  /** @type {ReadableStreamDefaultController<Uint8Array>} */
  let controller;
  /** @type {(() => void) | null} */
  let wake = null;
  let open = true;
  const stream = new ReadableStream(
    {
      start(c) {
        controller = c;
      },
      pull() {
        wake?.();
        wake = null;
      },
      cancel() {
        open = false;
        wake?.();
        wake = null;
      },
    },
    { highWaterMark: 4 },
  );
  const headers = total ? { 'Content-Length': String(total) } : undefined;
  /** @type {Promise<string | null>} */
  const put = cache.put(url, new Response(stream, { headers })).then(
    () => null,
    (e) => {
      open = false;
      wake?.();
      wake = null;
      return e instanceof Error ? e.message : String(e);
    },
  );
  return {
    /** @param {Uint8Array} piece */
    async add(piece) {
      if (!open) return;
      controller.enqueue(piece);
      if ((controller.desiredSize ?? 1) <= 0)
        await new Promise((resolve) => {
          wake = () => resolve(undefined);
        });
    },
    /** @param {number} loaded */
    async close(loaded) {
      if (total && loaded !== total) {
        this.drop(new Error('compressed'));
        await put;
        return `the server compressed it, so its length was not known as it arrived`;
      }
      if (open) controller.close();
      return put;
    },
    /** @param {unknown} reason */
    drop(reason) {
      if (open) controller.error(reason);
      open = false;
      // A copy the browser kept before the error reached it is forgotten too.
      put.then(() => cache.delete(url));
    },
  };
}

/**
 * The whole of `url` (or the cached copy), reporting progress as it comes.
 * @param {string} url
 * @param {string} label
 * @param {(p: Progress) => void} progress
 * @returns {Promise<Uint8Array>}
 */
export async function fetchBytes(url, label, progress) {
  /** @type {Uint8Array[]} */
  const pieces = [];
  const length = await fetchPieces(url, label, progress, (piece) => {
    pieces.push(piece);
  });
  return joinPieces(pieces, length);
}

/**
 * @param {Uint8Array[]} pieces
 * @param {number} length  their bytes in all
 */
export function joinPieces(pieces, length) {
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const piece of pieces) {
    bytes.set(piece, at);
    at += piece.length;
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
    const bytes =
      Number(response?.headers.get('Content-Length')) ||
      (response ? (await response.arrayBuffer()).byteLength : 0);
    files.push({ url: request.url, bytes });
  }
  return files;
}

/** Forget every cached file; the next load downloads again. */
export async function clearCache() {
  if ('caches' in globalThis) await caches.delete(CACHE_NAME);
}

/**
 * Bytes `from` to `to` of `url` (fewer where the file is shorter), without downloading the rest:
 * from the browser's kept copy where there is one, else by a range request. A host that ignores
 * ranges answers with the whole file: then `whole` reads on in that same answer (`read(from, to)`)
 * until `cancel()`, so that such a host is asked once. `total` is the file's length where the
 * answer says it (0 where not).
 * @param {string} url
 * @param {number} from
 * @param {number} to
 * @returns {Promise<{ bytes: Uint8Array, total: number, whole?: { read: (from: number, to: number) => Promise<Uint8Array>, cancel: () => Promise<void> } }>}
 */
export async function readRange(url, from, to) {
  // Only look: opening the cache would create it.
  const cache =
    'caches' in globalThis && (await caches.has(CACHE_NAME)) ? await caches.open(CACHE_NAME) : null;
  const kept = cache && (await cache.match(url));
  let response = kept;
  if (!response) {
    try {
      response = await fetch(url, { headers: { Range: `bytes=${from}-${to - 1}` } });
    } catch (e) {
      throw new Error(`cannot read the start of ${url}: ${e instanceof Error ? e.message : e}`);
    }
    if (!response.ok)
      throw new Error(`cannot read the start of ${url}: it answered ${response.status}`);
  }
  const partial = response.status === 206;
  const range = /\/(\d+)\s*$/.exec(response.headers.get('Content-Range') ?? '');
  // A whole file's Content-Length may be its compressed size (a gzip host), so only a range's
  // total or a kept copy's length is taken as the file's.
  const total = range
    ? Number(range[1])
    : kept
      ? Number(response.headers.get('Content-Length')) || 0
      : 0;
  const reader = response.body?.getReader();
  // What has been read of the answer, which starts at `start` of the file.
  const start = partial ? from : 0;
  /** @type {Uint8Array[]} */
  let pieces = [];
  let length = 0;
  const read = async (/** @type {number} */ a, /** @type {number} */ b) => {
    while (reader && start + length < b) {
      const step = await reader.read();
      if (step.done) break;
      pieces.push(step.value);
      length += step.value.length;
    }
    const bytes = joinPieces(pieces, length);
    pieces = [bytes];
    return bytes.slice(Math.min(a - start, length), Math.min(b - start, length));
  };
  const cancel = async () => {
    await reader?.cancel().catch(() => {});
  };
  const bytes = await read(from, to);
  if (partial || !reader) {
    await cancel();
    return { bytes, total };
  }
  return { bytes, total, whole: { read, cancel } };
}
