// The inference worker: a thin shell around the wasm engine. The page sends it requests and it
// answers each by its id, as www/protocol.js defines them: progress, events (each with the meter's
// report), errors. Nothing here computes a figure.
import { checkSize, fetchPieces, joinPieces, readPieces, readRange } from './download.js';
import { relaxedSimd } from './simd.js';

// The engine comes in three builds (www/simd.js, www/threads.js), and this worker runs the one its
// URL's `?build=` names (the page's choice, engine-client.js): `threads` (pkg/threads/: the CPU
// kernels on several threads, relaxed SIMD, no WebGPU; only where the page is cross-origin
// isolated), `relaxed` (pkg/relaxed/, where the browser runs relaxed SIMD) or `baseline` (pkg/).
const build = new URLSearchParams(self.location.search).get('build') ?? 'relaxed';
/** @param {string} url */
const start = async (url) => {
  const m = await import(url);
  return { m, wasm: await m.default() };
};
// A host that serves only pkg/ still works: a build that does not load gives way to the next
// (the conditions line names the build that runs: "CPU (SIMD128+relaxed), 2 threads", "CPU
// (SIMD128+relaxed)" or "CPU (SIMD128)", and says why a threaded build is not running).
const single = () =>
  build !== 'baseline' && relaxedSimd()
    ? start('./pkg/relaxed/tokenometer.js').catch(() => start('./pkg/tokenometer.js'))
    : start('./pkg/tokenometer.js');
/** Why this worker runs one thread when the page asked for more, or null. */
let buildNote = null;
// The engine compiles while the model downloads: init() streams the wasm into the compiler as it
// arrives (WebAssembly.instantiateStreaming), and a load request does not wait for it until the
// model's bytes are in.
const started =
  build !== 'threads'
    ? single()
    : !self.crossOriginIsolated
      ? ((buildNote = 'one thread: this page is not cross-origin isolated'), single())
      : start('./pkg/threads/tokenometer.js').catch((e) => {
          buildNote = `one thread: the threaded build did not load (${e?.message ?? e}; make pkg builds it where nightly Rust is installed)`;
          return single();
        });
const engine = started.then(({ m }) => m);
// The cold start's marks, in ms since the epoch (the page's clock and this worker's agree on it):
// when the worker began and when its engine had downloaded and compiled.
const epochNow = () => performance.timeOrigin + performance.now();
const workerStartedAt = epochNow();
let engineReadyAt = 0;
started.then(
  () => {
    engineReadyAt = epochNow();
  },
  () => {},
);
/** Whether the last piece of the last file read came from the browser's cache. */
let lastFromCache = false;
const ready = started.then(({ wasm }) => wasm);
const threaded = started.then(({ m }) => m.defaults().build.threads);
let session = null;
/** What the session was loaded from: a draft model is the same file at q4 (`draft`). */
let loadedFrom = null;
// What the worker is doing, for the words of a fatal error ("out of memory while loading the model").
let phase = 'starting the engine';

const post = (message) => self.postMessage(message);

// A source is { url } or { file } (a File the user picked), or one a site's catalog names
// (models/catalog.json, www/site.mjs): { parts: [{ url, bytes, sha256 }], bytes } (a file cut in
// parts a static host takes, read in order as one file) or { url, bytes, sha256, host } (a file
// kept on another host). Its pieces go to `take` as they arrive (from the network, the browser's
// cache or the disk), each part or file with a sha-256 checked as it ends; returns the length.
async function readSource(id, source, label, take) {
  const progress = (p) => {
    lastFromCache = Boolean(p.cached);
    post({ type: 'progress', id, ...p });
  };
  if (source.file) {
    checkSize(label, source.file.size);
    return readPieces(source.file.stream(), label, take, (loaded) =>
      progress({ label, loaded, total: source.file.size }),
    );
  }
  if (source.parts) {
    checkSize(label, source.bytes);
    let done = 0;
    let allCached = true;
    for (const [i, part] of source.parts.entries()) {
      const where = `part ${i + 1} of ${source.parts.length} (${part.url})`;
      done += await fetchChecked(
        new URL(part.url, self.location.href).href,
        label,
        where,
        part.sha256,
        (p) => {
          allCached &&= Boolean(p.cached);
          progress({ ...p, loaded: done + p.loaded, total: source.bytes, cached: allCached });
        },
        take,
      );
    }
    return done;
  }
  const url = new URL(source.url, self.location.href).href;
  if (!source.sha256) return fetchPieces(url, label, progress, take);
  return fetchChecked(
    url,
    label,
    `the file from ${source.host ?? new URL(url).host}`,
    source.sha256,
    progress,
    take,
  );
}

/** `fetchPieces`, the bytes hashed as they pass and refused at the end unless their sha-256 is `sha256`. */
async function fetchChecked(url, label, where, sha256, progress, take) {
  const { Sha256 } = await engine;
  const hasher = new Sha256();
  try {
    return await fetchPieces(
      url,
      label,
      progress,
      (piece) => {
        hasher.update(piece);
        return take(piece);
      },
      (_, cached) => {
        const got = hasher.hex();
        if (got === sha256.toLowerCase()) return;
        throw new Error(
          cached
            ? `the copy of the ${label}'s ${where} kept in this browser is not the file the catalog names (sha-256 ${got}, not ${sha256}); it was forgotten: run again to download it`
            : `the ${label}'s ${where} is not the file the catalog names: its sha-256 is ${got}, not ${sha256}; it was refused and not kept (is the catalog out of date, or the download changed on the way?)`,
        );
      },
    );
  } finally {
    hasher.free();
  }
}

// A whole file, or null where there is none.
async function bytesOf(id, source, label) {
  if (!source) return null;
  const pieces = [];
  const length = await readSource(id, source, label, (piece) => {
    pieces.push(piece);
  });
  return joinPieces(pieces, length);
}

const GGUF_MAGIC = [0x47, 0x47, 0x55, 0x46];
// The most of a GGUF's first pieces held while the engine starts.
const HOLD_BYTES = 8 << 20;

/**
 * A model file read as it arrives: a GGUF is pushed into the engine's `ModelStream` piece by
 * piece, which makes each tensor into the weights as its bytes pass and lets them go, so the
 * worker never holds the file (a 1B model's 1.3 GB would otherwise sit beside its weights while
 * they load). The pieces that come before the engine has started wait for it. Any other file (a
 * llama2.c `.bin`, safetensors) is held until it is whole, as before.
 * @returns {Promise<{ stream?: any, bytes?: Uint8Array, heldPeak: number, length: number }>}
 */
async function readModel(id, source, label, gguf) {
  /** @type {Uint8Array[]} */
  const held = [];
  let heldBytes = 0;
  // The most bytes of the file this worker held at once: the pieces waiting for the engine, or
  // the whole file where it is not a GGUF (posted with `loaded`; the page's tests bound it).
  let heldPeak = 0;
  const head = new Uint8Array(4);
  let headLength = 0;
  /** @type {any} */
  let stream = null;
  let engineModule = null;
  engine.then(
    (m) => {
      engineModule = m;
    },
    () => {},
  );
  const isGguf = () => gguf && headLength === 4 && GGUF_MAGIC.every((b, i) => head[i] === b);
  const total = source.file?.size ?? source.bytes;
  // Once: a piece that waits for the engine holds the next one back (readSource awaits `take`).
  const startStream = () => {
    if (stream) return;
    stream = new engineModule.ModelStream(total);
    for (const piece of held) stream.push(piece);
    held.length = 0;
    heldBytes = 0;
  };
  try {
    const length = await readSource(id, source, label, (piece) => {
      if (stream) return stream.push(piece);
      if (headLength < 4) {
        const n = Math.min(4 - headLength, piece.length);
        head.set(piece.subarray(0, n), headLength);
        headLength += n;
      }
      held.push(piece);
      heldBytes += piece.length;
      heldPeak = Math.max(heldPeak, heldBytes);
      if (!isGguf()) return undefined;
      if (engineModule) return startStream();
      // A cached file can arrive faster than the engine compiles: past a few MB it waits.
      if (heldBytes > HOLD_BYTES)
        return engine.then((m) => {
          engineModule = m;
          startStream();
        });
      return undefined;
    });
    if (!stream && isGguf()) {
      engineModule = await engine;
      startStream();
    }
    return stream
      ? { stream, heldPeak, length }
      : { bytes: joinPieces(held, length), heldPeak, length };
  } catch (e) {
    // What was made of the pieces so far goes with the error, not left in the engine's memory.
    stream?.free();
    throw e;
  }
}

// Will it fit: a GGUF's header is read first (256 KiB, then as much again until it is whole: a
// 262k-token vocabulary takes about 7 MB), so that at most twice the header is read, and the
// engine says what the model would take here (crate/api/fit.rs) before its download.
const FIT_FIRST_BYTES = 256 << 10;
const FIT_MOST_BYTES = 64 << 20;

/**
 * Bytes `from` to `to` of a source: a picked file's slice, the first part of a site's parts, or
 * a range of a URL (with `whole` where its host sent the whole file: read on in that answer).
 */
async function rangeOf(source, from, to) {
  if (source.file)
    return {
      bytes: new Uint8Array(await source.file.slice(from, to).arrayBuffer()),
      total: source.file.size,
    };
  if (source.parts) {
    const first = source.parts[0];
    const answer = await readRange(
      new URL(first.url, self.location.href).href,
      from,
      Math.min(to, first.bytes),
    );
    return { ...answer, total: source.bytes };
  }
  const answer = await readRange(new URL(source.url, self.location.href).href, from, to);
  return { ...answer, total: source.bytes ?? answer.total };
}

/**
 * What a GGUF source would take in this browser at `quant` with `positions`; `null` where that
 * cannot be told first (a file that is not a GGUF, a host that breaks off, a header the engine
 * refuses): the download then goes ahead and says what is wrong, as it did before.
 */
async function fitOf(source, request) {
  try {
    return await fitOfHeader(source, request);
  } catch {
    return null;
  }
}

async function fitOfHeader(source, { quant, backend, positions }) {
  const { checkFit } = await engine;
  // WebGPU and deviceMemory are newer than TypeScript's worker types.
  const navigator = /** @type {any} */ (self.navigator);
  const gpu = backend === 'wgpu';
  /** @type {Record<string, number>} */
  const limits = {};
  if (typeof navigator.deviceMemory === 'number') limits.device_memory_gb = navigator.deviceMemory;
  if (gpu && navigator.gpu) {
    const adapter = await navigator.gpu.requestAdapter().catch(() => null);
    if (adapter) {
      limits.max_binding_bytes = adapter.limits.maxStorageBufferBindingSize;
      limits.max_buffer_bytes = adapter.limits.maxBufferSize;
    }
  }
  let header = new Uint8Array(0);
  let total = 0;
  /** @type {any} a host's whole-file answer, read on while the header grows */
  let whole = null;
  try {
    for (let want = FIT_FIRST_BYTES; header.length < FIT_MOST_BYTES; want *= 2) {
      const more = whole
        ? { bytes: await whole.read(header.length, want), total }
        : await rangeOf(source, header.length, want);
      whole ??= more.whole ?? null;
      total ||= more.total;
      header = joinPieces([header, more.bytes], header.length + more.bytes.length);
      if (header.length >= 4 && !GGUF_MAGIC.every((b, i) => header[i] === b)) return null;
      // No positions given: the engine's default max tokens (crate/api/web/fit.rs).
      const answer = checkFit(header, total, {
        quant,
        gpu,
        ...(positions ? { positions } : {}),
        limits,
      });
      if (!answer.more) return answer.fit;
      // The file ended inside its header: the load says what is wrong with it.
      if (header.length < want) return null;
    }
  } finally {
    await whole?.cancel();
  }
  return null;
}

async function load({
  id,
  name,
  model,
  tokenizer,
  config,
  backend,
  quant,
  threads,
  check_gpu: checkGpu,
  positions,
}) {
  session?.free();
  session = null;
  loadedFrom = { name, model, tokenizer, config };
  // The cold start's parts as this worker saw them (app.js passes them with the page's first run).
  /** @type {{ name: string, start_ms: number, end_ms: number, bytes?: number, note?: string, parallel?: boolean }[]} */
  const marks = [];
  const mark = (/** @type {string} */ partName, /** @type {number} */ from, extra = {}) =>
    marks.push({ name: partName, start_ms: from, end_ms: epochNow(), ...extra });
  if (!config) {
    phase = 'checking that the model fits';
    post({ type: 'status', id, status: 'checking that the model fits' });
    const from = epochNow();
    const fit = await fitOf(model, { quant, backend, positions });
    mark("reading the model's header (will it fit)", from);
    if (fit) post({ type: 'fit', id, fit });
    if (fit && !fit.fits) throw new Error(`${name} cannot run in this browser: ${fit.sentence}`);
  }
  phase = 'downloading the model';
  const downloadFrom = epochNow();
  const file = await readModel(id, model, 'model', !config);
  const tokenizerBytes = await bytesOf(id, tokenizer, 'tokenizer');
  const configBytes = await bytesOf(id, config, 'config.json');
  // Streamed, a GGUF's tensors are made as its pieces pass: parsing and converting are inside.
  mark("the model's download, parsed and converted as it came", downloadFrom, {
    bytes: file.length + (tokenizerBytes?.length ?? 0) + (configBytes?.length ?? 0),
    note: lastFromCache ? "from this browser's cache" : 'from the network',
  });
  phase = 'starting the engine';
  const engineFrom = epochNow();
  await ready;
  if (engineReadyAt > engineFrom + 1) mark("waiting for the engine's compile", engineFrom);
  marks.push({
    name: "the engine's download and compile",
    start_ms: workerStartedAt,
    end_ms: engineReadyAt,
    parallel: true,
  });
  const loadFrom = epochNow();
  post({ type: 'status', id, status: 'loading' });
  phase = 'loading the model';
  const { loadSession, loadStreamed } = await engine;
  // Threads start with the session (Web Workers sharing this module's memory), in the threaded build.
  const count = (await threaded) ? (threads ?? 1) : 1;
  if (count > 1) post({ type: 'status', id, status: `starting ${count} threads` });
  // The GPU's check against the CPU (crate/api/auto.rs) loads the model on the CPU for a moment.
  if (checkGpu && backend === 'wgpu')
    post({ type: 'status', id, status: 'checking the GPU against the CPU' });
  session =
    'stream' in file
      ? await loadStreamed(
          name,
          file.stream,
          tokenizerBytes ?? undefined,
          backend,
          quant,
          count,
          Boolean(checkGpu),
        )
      : await loadSession(
          name,
          file.bytes,
          tokenizerBytes ?? undefined,
          backend,
          quant,
          configBytes ?? undefined,
          count,
          Boolean(checkGpu),
        );
  const info = session.info();
  // Why fewer threads run than were asked for, for the conditions line (app.js).
  if (buildNote && (threads ?? 1) > 1) info.build_note = buildNote;
  // The wasm instance's memory after loading: what the tab holds for the engine and its weights
  // (a GGUF's tensors are made as it downloads, and its bytes never held whole; every thread
  // shares it).
  mark(
    backend === 'wgpu'
      ? 'loading: the last tensors, threads, the GPU upload'
      : 'loading: the last tensors, threads',
    loadFrom,
  );
  post({
    type: 'loaded',
    id,
    info,
    wasmMemoryBytes: (await ready).memory.buffer.byteLength,
    fileHeldBytes: file.heldPeak,
  });
  // A GPU that failed its check is not warmed up: what it computes is wrong, and a warm-up's
  // greedy tokens from it may be out of the vocabulary (an error before the page could say why).
  const check = info.gpu_check;
  if (check && !(check.disagreed === 0 && check.rms <= check.bound)) {
    post({ type: 'warmed', id, ms: 0, marks });
    phase = 'idle';
    return;
  }
  post({ type: 'status', id, status: 'warming up' });
  phase = 'warming up';
  const warmFrom = epochNow();
  const warmUpMs = await session.warmUp();
  mark(backend === 'wgpu' ? 'warm-up (compiling shaders)' : 'warm-up', warmFrom);
  post({ type: 'warmed', id, ms: warmUpMs, marks });
  phase = 'idle';
}

// Speculative decoding's draft model: the loaded model's own file again, at q4, on the same
// backend (the bytes come from the browser's cache, or the file picked), warmed up apart.
async function draft({ id }) {
  if (!session) throw new Error('no model is loaded');
  if (!session.hasDraft()) {
    if (loadedFrom.config)
      throw new Error('a draft model needs a single-file model (GGUF or llama2.c .bin)');
    phase = 'loading the draft model';
    post({ type: 'status', id, status: 'loading the draft model (q4)' });
    const file = await readModel(id, loadedFrom.model, 'draft model', true);
    const tokenizerBytes = await bytesOf(id, loadedFrom.tokenizer, 'tokenizer');
    if ('stream' in file)
      session.loadDraftStreamed(loadedFrom.name, file.stream, tokenizerBytes ?? undefined, 'q4');
    else session.loadDraft(loadedFrom.name, file.bytes, tokenizerBytes ?? undefined, 'q4');
    phase = 'warming up the draft model';
    post({ type: 'status', id, status: 'warming up the draft model' });
    await session.warmUpDraft();
  }
  phase = 'idle';
  post({ type: 'draft-loaded', id });
}

// Runs and labs that the page asked to stop, by request id: a pump loop checks between pumps, so a
// stop works the same on every backend, and a stop meant for one run never ends the next.
const cancelled = new Set();
// How long one pump runs before its events go to the page: about a frame.
const PUMP_MS = 16;
// Yield to the event loop without setTimeout's 4 ms clamp (which would show up as inter-token gaps).
const yieldNow = () =>
  new Promise((resolve) => {
    const channel = new MessageChannel();
    channel.port1.onmessage = () => resolve();
    channel.port2.postMessage(0);
  });

// Pump `job` (a run or a lab) until it is done, posting what each pump returns as `message(pumped)`;
// a stop for `id` is heard between pumps. Returns when the job has ended.
async function pumpUntilDone(id, job, budgetMs, message) {
  for (;;) {
    if (cancelled.delete(id)) job.cancel();
    const pumped = await job.pump(budgetMs);
    post(message(pumped));
    if (pumped.done) return;
    // A lab whose next user arrives later waits for it; otherwise go on at once.
    if (pumped.wait_ms > 0) await new Promise((resolve) => setTimeout(resolve, pumped.wait_ms));
    else await yieldNow();
  }
}

async function run({ id, prompt, options, pump_ms: pumpMs }) {
  if (!session) throw new Error('no model is loaded');
  phase = 'generating';
  const run = session.start(prompt, options);
  // A cancelled run's done event comes with the next pump's events.
  let stopped = null;
  const job = {
    pump: (ms) => run.pump(ms),
    cancel: () => {
      stopped = run.cancel();
    },
  };
  try {
    await pumpUntilDone(id, job, pumpMs ?? PUMP_MS, (pumped) => {
      const events = stopped ? [...pumped.events, stopped] : pumped.events;
      stopped = null;
      return {
        type: 'events',
        id,
        events,
        points: pumped.points,
        report: pumped.report,
        word_ends: pumped.word_ends,
      };
    });
    post({ type: 'finished', id, report: run.report() });
  } finally {
    run.free();
    cancelled.delete(id);
    phase = 'idle';
  }
}

// OpenAI's chat.completions.create over the loaded model (crate/api/web/chat.rs): the request in
// the server's shape, its chunks posted as each pump makes them.
async function chat({ id, request }) {
  if (!session) throw new Error('no model is loaded');
  phase = 'answering a chat completion';
  const answer = session.chatCompletion(JSON.stringify(request));
  const job = { pump: (ms) => answer.pump(ms), cancel: () => answer.cancel() };
  try {
    await pumpUntilDone(id, job, PUMP_MS, (pumped) => ({
      type: 'chat-chunks',
      id,
      chunks: pumped.chunks,
      done: pumped.done,
    }));
  } finally {
    answer.free();
    cancelled.delete(id);
    phase = 'idle';
  }
}

// The concurrency lab: many simulated users in one batch, pumped the same way.
async function lab({ id, options }) {
  if (!session) throw new Error('no model is loaded');
  phase = 'running the concurrency lab';
  // The objectives go apart from the options (crate/api/web/options.rs `lab_slo`).
  const { slo_ttft_ms: ttft, slo_tpot_ms: tpot, ...rest } = options;
  const lab = session.startLab(rest, ttft ?? undefined, tpot ?? undefined);
  let stopped = [];
  const job = {
    pump: (ms) => lab.pump(ms),
    cancel: () => {
      stopped = lab.cancelAll();
    },
  };
  try {
    await pumpUntilDone(id, job, PUMP_MS, (pumped) => {
      const events = [...stopped, ...pumped.events];
      stopped = [];
      return { type: 'lab-events', id, events, users: pumped.users, report: pumped.report };
    });
    post({ type: 'lab-finished', id, report: lab.report() });
  } finally {
    lab.free();
    cancelled.delete(id);
    phase = 'idle';
  }
}

// ---- an OpenAI-compatible endpoint: fetched here, read and metered by the engine --------------

// Endpoint requests in flight, by request id: a stop aborts the fetch at once (a read may be
// waiting for bytes that come seconds apart).
const aborts = new Map();
/** @param {string | undefined} key */
const authorization = (key) => (key ? { Authorization: `Bearer ${key}` } : {});
/**
 * A fetch that got no HTTP answer: the browser does not say whether nothing listened or CORS
 * blocked it, so the sentence names both, and how each server allows this page's origin.
 * @param {string} url
 */
const unreachable = (url) =>
  `the browser could not reach ${url}: nothing answers there, or the server does not let pages from ${self.location.origin} read it (CORS). A server allows it by sending Access-Control-Allow-Origin: tokenometer serve --cors ${self.location.origin}; vLLM --allowed-origins '["${self.location.origin}"]'; Ollama OLLAMA_ORIGINS=${self.location.origin}; llama.cpp's llama-server sends it by default`;

// The limits the command line's client keeps (crate/api/endpoint/client.rs), kept here too: an
// error or a non-stream answer is read 64 KiB at most (a model listing 4 MiB), each within the
// endpoint's timeout; a stream that sends nothing but keep-alive comments for that long has
// stalled; a whole request may take `request_s`. The page's URL sets both
// (`endpoint_timeout=S`, `request_timeout=S`, as `--endpoint-timeout` and `--request-timeout`).
const MAX_ERROR_BYTES = 64 << 10;
const MAX_LISTING_BYTES = 4 << 20;
const DEFAULT_STALL_S = 60;
const DEFAULT_REQUEST_S = 600;
// The per-chunk counting fields a strict server may refuse (crate/api/endpoint/request.rs).
const COUNTING_FIELDS = ['timings_per_token', 'continuous_usage_stats', 'stream_options'];

/**
 * At most `most` bytes of `response`'s body, read within `ms` (a body that never ends, or never
 * stops, is cut there), as text.
 * @param {Response} response
 * @param {number} most
 * @param {number} ms
 */
async function readCapped(response, most, ms) {
  const reader = response.body?.getReader();
  if (!reader) return '';
  const chunks = [];
  let length = 0;
  const deadline = performance.now() + ms;
  try {
    while (length < most) {
      const left = deadline - performance.now();
      if (left <= 0) break;
      let timer;
      const read = await Promise.race([
        reader.read(),
        new Promise((resolve) => {
          timer = setTimeout(() => resolve(null), left);
        }),
      ]).finally(() => clearTimeout(timer));
      if (!read || read.done) break;
      chunks.push(read.value);
      length += read.value.length;
    }
  } catch {
    // What came before the body broke is what there is.
  } finally {
    reader.cancel().catch(() => {});
  }
  const bytes = new Uint8Array(Math.min(length, most));
  let at = 0;
  for (const chunk of chunks) {
    const part = chunk.subarray(0, bytes.length - at);
    bytes.set(part, at);
    at += part.length;
    if (at === bytes.length) break;
  }
  return new TextDecoder().decode(bytes);
}

/**
 * `fetch(url, init)` that gives up after `ms` without an answer's head, or when `signal` stops it;
 * `timedOut` says which.
 * @param {string} url
 * @param {RequestInit} init
 * @param {number} ms
 * @param {AbortSignal} [signal]
 */
async function fetchWithin(url, init, ms, signal) {
  const abort = new AbortController();
  const stop = () => abort.abort();
  signal?.addEventListener('abort', stop, { once: true });
  if (signal?.aborted) abort.abort();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    abort.abort();
  }, ms);
  try {
    return { response: await fetch(url, { ...init, signal: abort.signal }), timedOut: false };
  } catch (e) {
    return { response: null, timedOut, error: e };
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', stop);
  }
}

async function connect({
  id,
  url,
  model,
  key,
  stall_s: stallS = DEFAULT_STALL_S,
  request_s: requestS = DEFAULT_REQUEST_S,
}) {
  await ready;
  const { baseUrl, httpFailure } = await engine;
  const base = baseUrl(url);
  const listing = `${base}/models`;
  const stallMs = stallS * 1000;
  const { response, timedOut } = await fetchWithin(
    listing,
    { headers: authorization(key) },
    stallMs,
  );
  if (timedOut)
    throw new Error(
      `${listing} did not answer within ${stallS} s; is it the right address, and is the server up?`,
    );
  if (!response) throw new Error(unreachable(listing));
  let name = model || null;
  if (response.ok) {
    let listed = null;
    try {
      listed = JSON.parse(await readCapped(response, MAX_LISTING_BYTES, stallMs));
    } catch {
      // Not a listing: a model must be named.
    }
    name = name || listed?.data?.[0]?.id || null;
    if (!name) throw new Error(`${listing} lists no model; name one`);
  } else if (!(response.status === 404 && name)) {
    // Some servers have no /models; a named model does without it.
    throw new Error(
      httpFailure(listing, response.status, await readCapped(response, MAX_ERROR_BYTES, stallMs)),
    );
  } else {
    response.body?.cancel().catch(() => {});
  }
  // How the browser reached it (where the browser says): over HTTP/2 or 3 one connection carries
  // many streams, over HTTP/1.1 a browser opens at most 6 to one server (the lab's cap).
  const protocol =
    /** @type {PerformanceResourceTiming | undefined} */ (
      performance.getEntriesByName(listing).pop()
    )?.nextHopProtocol || null;
  post({
    type: 'connected',
    id,
    endpoint: {
      base,
      model: name,
      server: response.headers.get('server'),
      protocol,
      stall_s: stallS,
      request_s: requestS,
    },
  });
}

/**
 * POST a streamed request to `url`, first asking for each chunk's count, then, from a server that
 * refuses one of those fields by name (400 or 422), without; a refusal that `refusedLogprobs`
 * takes (it names the logprobs field of a request that asked for them, which `body` then leaves
 * out) is asked again too. Resolves to the answer, or null once `signal` stopped it; an HTTP
 * failure, a server out of reach or one that does not answer within the endpoint's timeout
 * throws its sentence.
 * @param {string} url
 * @param {(counts: boolean) => string} body
 * @param {import('./protocol.js').Endpoint} endpoint
 * @param {AbortSignal} signal
 * @param {(status: number, text: string) => boolean} [refusedLogprobs]
 */
async function openStream(url, body, endpoint, signal, refusedLogprobs = () => false) {
  const { httpFailure } = await engine;
  const stallS = endpoint.stall_s ?? DEFAULT_STALL_S;
  const stallMs = stallS * 1000;
  let counts = true;
  // At most three tries: with everything, without the counting fields, without logprobs.
  for (let attempt = 0; attempt < 3; attempt++) {
    if (signal.aborted) return null;
    const { response, timedOut } = await fetchWithin(
      url,
      {
        method: 'POST',
        body: body(counts),
        headers: { 'Content-Type': 'application/json', ...authorization(endpoint.key) },
      },
      stallMs,
      signal,
    );
    if (signal.aborted) return null;
    if (timedOut) throw new Error(`${url} did not start answering within ${stallS} s`);
    if (!response) throw new Error(unreachable(url));
    const kind = (response.headers.get('content-type') ?? '').toLowerCase();
    if (response.ok && kind.startsWith('text/event-stream')) return response;
    const text = await readCapped(response, MAX_ERROR_BYTES, stallMs);
    if (response.ok) {
      // A 200 that is not the stream asked for (a whole JSON answer, a login page) is said as
      // such, never read as a run of 0 tokens.
      throw new Error(
        `${url} answered 200 with ${kind || 'no content type'} where an event stream was asked for (it began ${JSON.stringify(text.trim().slice(0, 120))}); is it an OpenAI-compatible server that streams?`,
      );
    }
    const refusesCounting =
      (response.status === 400 || response.status === 422) &&
      COUNTING_FIELDS.some((f) => text.includes(f));
    if (counts && refusesCounting) counts = false;
    else if (!refusedLogprobs(response.status, text))
      throw new Error(httpFailure(url, response.status, text));
  }
  return null;
}

/**
 * Hand each read of `response`'s stream to `take` with when its bytes arrived (`since()`, taken
 * before they are read), and `null` when the stream closes, until `take` says the stream has
 * ended. `take` returns whether the stream ended and whether the read held anything but
 * keep-alive comments: a stream with nothing else for the endpoint's timeout has stalled, and
 * one not finished within its request time has failed (each throws its sentence). Resolves to
 * whether it ended (false: stopped by `signal`).
 * @param {Response | null} response
 * @param {string} url
 * @param {import('./protocol.js').Endpoint} endpoint
 * @param {AbortSignal} signal
 * @param {() => number} since
 * @param {(bytes: Uint8Array | null, t: number) => { done: boolean, news: boolean }} take
 */
async function readStream(response, url, endpoint, signal, since, take) {
  const reader = response?.body?.getReader();
  const stallS = endpoint.stall_s ?? DEFAULT_STALL_S;
  const requestS = endpoint.request_s ?? DEFAULT_REQUEST_S;
  let lastNews = since();
  try {
    while (reader && !signal.aborted) {
      const stallLeft = lastNews + stallS * 1000 - since();
      const requestLeft = requestS * 1000 - since();
      let timer;
      let read;
      try {
        read = await Promise.race([
          reader.read(),
          new Promise((resolve) => {
            timer = setTimeout(() => resolve(null), Math.max(0, Math.min(stallLeft, requestLeft)));
          }),
        ]).finally(() => clearTimeout(timer));
      } catch (e) {
        if (signal.aborted) break;
        throw new Error(`the stream from ${url} broke: ${e?.message ?? e}`);
      }
      if (read === null) {
        if (signal.aborted) break;
        if (requestLeft <= stallLeft)
          throw new Error(
            `${url} did not finish the request within ${requestS} s (the page's request_timeout)`,
          );
        throw new Error(
          `${url} stalled: nothing but keep-alive comments for ${stallS} s (the page's endpoint_timeout)`,
        );
      }
      const t = since();
      const { done, news } = take(read.done ? null : read.value, t);
      if (news) lastNews = t;
      if (done || read.done) return true;
    }
    return false;
  } finally {
    reader?.cancel().catch(() => {});
  }
}

/** An AbortController for request `id`, which a stop for it aborts. */
function abortFor(id) {
  const abort = new AbortController();
  aborts.set(id, abort);
  if (cancelled.delete(id)) abort.abort();
  return abort;
}

async function endpointRun({ id, endpoint, prompt, options }) {
  await ready;
  const { EndpointRun } = await engine;
  phase = 'streaming from the endpoint';
  const run = new EndpointRun(
    endpoint.base,
    endpoint.model,
    endpoint.server ?? undefined,
    prompt,
    options,
  );
  const abort = abortFor(id);
  // Times are from sending the request, taken as each read's bytes arrive (before they are read).
  const start = performance.now();
  const since = () => performance.now() - start;
  try {
    const url = run.url();
    // The final report comes with the last read's events.
    let report = null;
    // A server that refuses the logprobs field (asked while the token inspector is shown) by
    // name is asked again without it, and the inspector says so (the run's token_note).
    const response = await openStream(
      url,
      (counts) => run.body(counts),
      endpoint,
      abort.signal,
      (status, text) => run.refusedLogprobs(status, text),
    );
    const ended = await readStream(response, url, endpoint, abort.signal, since, (bytes, t) => {
      const pumped = bytes ? run.feed(bytes, t) : run.finish(t, false);
      post({ type: 'events', id, ...pumped });
      report = pumped.report;
      return { done: pumped.done, news: pumped.events.length > 0 };
    });
    if (!ended) {
      const stopped = run.finish(since(), true);
      post({ type: 'events', id, ...stopped });
      report = stopped.report;
    }
    post({ type: 'finished', id, report });
  } finally {
    aborts.delete(id);
    cancelled.delete(id);
    run.free();
    phase = 'idle';
  }
}

/** Resolves after `ms`, or at once when `signal` stops. */
const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, Math.max(0, ms));
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve(undefined);
      },
      { once: true },
    );
  });

// The concurrency lab against an endpoint: every user a real stream from this browser, each read
// and metered by the engine (crate/api/web/endpoint_lab.rs); the lab's view is sent ten times a
// second, whatever the streams' pace.
async function endpointLab({ id, endpoint, options }) {
  await ready;
  const { EndpointLab } = await engine;
  phase = 'running the concurrency lab against the endpoint';
  const { slo_ttft_ms: ttft, slo_tpot_ms: tpot, ...rest } = options;
  const lab = new EndpointLab(
    endpoint.base,
    endpoint.model,
    endpoint.server ?? undefined,
    rest,
    ttft ?? undefined,
    tpot ?? undefined,
  );
  const abort = abortFor(id);
  const url = lab.url();
  const start = performance.now();
  let events = [];
  const flush = () => {
    post({ type: 'lab-events', id, events, ...lab.snapshot() });
    events = [];
  };
  const timer = setInterval(flush, 100);
  /** User `seq`: its request at `at` ms, its stream read to the end (or the stop). */
  const user = async (seq, at) => {
    await sleep(start + at - performance.now(), abort.signal);
    if (abort.signal.aborted) return;
    const made = performance.now();
    lab.arrive(seq, made - start);
    const since = () => performance.now() - made;
    try {
      const response = await openStream(
        url,
        (counts) => lab.body(seq, counts),
        endpoint,
        abort.signal,
      );
      const ended = await readStream(response, url, endpoint, abort.signal, since, (bytes, t) => {
        const read = bytes ? lab.feed(seq, bytes, t) : lab.finish(seq, t, false);
        events.push(...read.events);
        return { done: read.done, news: read.events.length > 0 };
      });
      if (!ended) events.push(...lab.finish(seq, since(), true).events);
    } catch (e) {
      // One user's failure is in the report; the others go on.
      lab.fail(seq, e?.message ?? String(e));
    }
  };
  try {
    await Promise.all(Array.from(lab.arrivals(), (at, seq) => user(seq, at)));
    clearInterval(timer);
    flush();
    post({ type: 'lab-finished', id, report: lab.report() });
  } finally {
    clearInterval(timer);
    aborts.delete(id);
    cancelled.delete(id);
    lab.free();
    phase = 'idle';
  }
}

// A Rust panic or a failed allocation traps the wasm instance, and a lost GPU device stays lost for
// it: all are fatal, and the page starts a fresh worker. The engine leaves the cause of a trap in
// `tokenometerFatalKind` / `tokenometerFatal` before it happens (the trap itself only says
// "unreachable").
function fatalCause() {
  // Set by the engine's Rust (crate/api/web/), not a property the worker's types know.
  const scope = /** @type {any} */ (self);
  const detail = scope.tokenometerFatal;
  if (scope.tokenometerFatalKind === 'oom') return `out of memory while ${phase}: ${detail}`;
  if (scope.tokenometerFatalKind === 'panic') return `the engine crashed while ${phase}: ${detail}`;
  return null;
}

function failure(e) {
  if (e instanceof WebAssembly.RuntimeError) {
    return {
      type: 'fatal',
      message: fatalCause() ?? `the engine crashed while ${phase}: ${e.message}`,
    };
  }
  if (e?.name === 'DeviceLostError') return { type: 'fatal', message: e.message };
  return { type: 'error', message: e?.message ?? String(e) };
}

// A trap inside an async engine call happens in a microtask, outside any try/catch here: it reaches
// the worker's global error handler (and its promise never settles). Report it as fatal instead of
// letting the page see an anonymous "Uncaught RuntimeError".
self.addEventListener('error', (event) => {
  event.preventDefault();
  post(failure(event.error ?? new Error(event.message)));
});
self.addEventListener('unhandledrejection', (event) => {
  event.preventDefault();
  post(failure(event.reason));
});

self.onmessage = async ({ data }) => {
  try {
    if (data.type === 'load') await load(data);
    else if (data.type === 'run') await run(data);
    else if (data.type === 'lab') await lab(data);
    else if (data.type === 'chat') await chat(data);
    else if (data.type === 'draft') await draft(data);
    else if (data.type === 'connect') await connect(data);
    else if (data.type === 'endpoint-run') await endpointRun(data);
    else if (data.type === 'endpoint-lab') await endpointLab(data);
    else if (data.type === 'spread') {
      await ready;
      const { spread } = await engine;
      post({ type: 'spread', id: data.id, spread: spread(Float64Array.from(data.values)) });
    } else if (data.type === 'versus') {
      await ready;
      const { versus } = await engine;
      post({ type: 'versus', id: data.id, ratios: versus(Float64Array.from(data.pairs)) });
    } else if (data.type === 'probe') {
      await ready;
      const { measureReadBandwidth } = await engine;
      phase = "measuring the memory's read bandwidth";
      post({
        type: 'probed',
        id: data.id,
        read_gb_per_s: await measureReadBandwidth(data.threads),
      });
      phase = 'idle';
    } else if (data.type === 'measure-gpu') {
      if (!session) throw new Error('no model is loaded');
      phase = "measuring the GPU's ceilings";
      post({ type: 'gpu-measured', id: data.id, ceilings: await session.measureGpu() });
      phase = 'idle';
    } else if (data.type === 'race-decode') {
      if (!session) throw new Error('no model is loaded');
      phase = 'timing a short decode for auto';
      post({ type: 'raced', id: data.id, decode_tps: await session.raceDecode() });
      phase = 'idle';
    } else if (data.type === 'note') {
      if (!session) throw new Error('no model is loaded');
      session.setBackendNote(data.note);
      post({ type: 'noted', id: data.id, info: session.info() });
    } else if (data.type === 'race-verdict') {
      await ready;
      const { raceVerdict } = await engine;
      post({
        type: 'verdict',
        id: data.id,
        verdict: raceVerdict(data.cpu, data.gpu, data.check ?? null),
      });
    } else if (data.type === 'cancel') {
      cancelled.add(data.id);
      aborts.get(data.id)?.abort();
    }
  } catch (e) {
    post({ ...failure(e), id: data.id });
  }
};
// The worker takes requests at once; the engine's compile failing is reported when it happens.
post({ type: 'ready', webgpu: Boolean(/** @type {any} */ (self.navigator).gpu) });
ready.then(
  async () => post({ type: 'defaults', defaults: (await engine).defaults() }),
  (e) => post(failure(e)),
);
