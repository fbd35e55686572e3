// The inference worker: a thin shell around the wasm engine. The page sends it requests; it answers
// with progress, events (each with the meter's report) and errors. Nothing here computes a figure.
import init, { loadSession } from '../pkg/tokenometer.js';

// The engine compiles while the model downloads: init() streams the wasm into the compiler as it
// arrives (WebAssembly.instantiateStreaming), and a load request does not wait for it until the
// model's bytes are in.
const ready = init();
let session = null;
// What the worker is doing, for the words of a fatal error ("out of memory while loading the model").
let phase = 'starting the engine';

const post = (message) => self.postMessage(message);

// The largest file the engine can take: wasm32 allocations stop short of 2 GiB (isize::MAX), and a
// tab's whole WebAssembly memory at 4 GiB. Checked before reading, so a huge file is a sentence
// rather than a crash.
const MAX_FILE_BYTES = 2 ** 31 - 1;
function checkSize(label, bytes) {
  if (bytes > MAX_FILE_BYTES) {
    throw new Error(`the ${label} is ${(bytes / 1e9).toFixed(1)} GB, but a browser tab's WebAssembly memory takes at most 2.1 GB in one piece (4.3 GB in all): it cannot run here; pick a smaller or quantized model, or run it with the CLI`);
  }
}

// Downloads go through the Cache API; an incomplete download is an error and is never cached.
async function fetchBytes(url, label) {
  const cache = 'caches' in self ? await caches.open('tokenometer-models-v1') : null;
  const cached = cache && (await cache.match(url));
  if (cached) {
    const bytes = new Uint8Array(await cached.arrayBuffer());
    post({ type: 'progress', label, loaded: bytes.length, total: bytes.length, cached: true });
    return bytes;
  }
  let response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw new Error(`cannot download ${label} from ${url}: ${e.message}`);
  }
  if (!response.ok) throw new Error(`cannot download ${label}: ${url} answered ${response.status}`);
  const total = Number(response.headers.get('Content-Length')) || 0;
  checkSize(label, total);
  const reader = response.body.getReader();
  const chunks = [];
  let loaded = 0;
  for (;;) {
    let step;
    try {
      step = await reader.read();
    } catch (e) {
      throw new Error(`download of ${label} broke off after ${loaded} bytes: ${e.message}`);
    }
    if (step.done) break;
    chunks.push(step.value);
    loaded += step.value.length;
    checkSize(label, loaded);
    post({ type: 'progress', label, loaded, total: Math.max(total, loaded) });
  }
  // Content-Length counts the bytes on the wire: with Content-Encoding (gzip, br) it is the
  // compressed size, and the decompressed body is longer. Fewer bytes than it promised is a
  // download that broke off; more is a compressed one (cross-origin, the encoding is not visible).
  if (total && loaded < total) {
    throw new Error(`download of ${label} is incomplete: ${loaded} of ${total} bytes`);
  }
  const bytes = new Uint8Array(loaded);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.length;
  }
  if (cache) await cache.put(url, new Response(bytes, { headers: { 'Content-Length': String(loaded) } }));
  return bytes;
}

// A source is { url } or { file } (a File the user picked).
async function bytesOf(source, label) {
  if (!source) return null;
  if (source.file) {
    checkSize(label, source.file.size);
    const bytes = new Uint8Array(await source.file.arrayBuffer());
    post({ type: 'progress', label, loaded: bytes.length, total: bytes.length });
    return bytes;
  }
  return fetchBytes(new URL(source.url, self.location.href).href, label);
}

async function load({ name, model, tokenizer, config, backend, quant }) {
  session?.free();
  session = null;
  phase = 'downloading the model';
  const modelBytes = await bytesOf(model, 'model');
  const tokenizerBytes = await bytesOf(tokenizer, 'tokenizer');
  const configBytes = await bytesOf(config, 'config.json');
  phase = 'starting the engine';
  await ready;
  post({ type: 'status', status: 'loading' });
  phase = 'loading the model';
  session = await loadSession(name, modelBytes, tokenizerBytes ?? undefined, backend, quant, configBytes ?? undefined);
  // The wasm instance's memory after loading: what the tab holds for the engine and its weights
  // (the file's bytes given to the engine are used in place, not copied again).
  post({ type: 'loaded', info: session.info(), wasmMemoryBytes: (await ready).memory.buffer.byteLength });
  post({ type: 'status', status: 'warming up' });
  phase = 'warming up';
  const warmUpMs = await session.warmUp();
  post({ type: 'warmed', ms: warmUpMs });
  phase = 'idle';
}

// Runs and labs that the page asked to stop, by request id: a pump loop checks between pumps, so a
// stop works the same on every backend, and a stop meant for one run never ends the next.
const cancelled = new Set();
// How long one pump runs before its events go to the page: about a frame.
const PUMP_MS = 16;
// Yield to the event loop without setTimeout's 4 ms clamp (which would show up as inter-token gaps).
const yieldNow = () => new Promise((resolve) => {
  const channel = new MessageChannel();
  channel.port1.onmessage = () => resolve();
  channel.port2.postMessage(0);
});

async function run({ id, prompt, options }) {
  if (!session) throw new Error('no model is loaded');
  phase = 'generating';
  const run = session.start(prompt, options);
  try {
    for (;;) {
      if (cancelled.delete(id)) {
        const done = run.cancel();
        if (done) post({ type: 'events', id, events: [done], report: run.report() });
      }
      const pumped = await run.pump(PUMP_MS);
      post({ type: 'events', id, events: pumped.events, report: pumped.report });
      if (pumped.done) break;
      await yieldNow();
    }
    post({ type: 'finished', id, report: run.report() });
  } finally {
    run.free();
    cancelled.delete(id);
    phase = 'idle';
  }
}

// The concurrency lab: many simulated users in one batch, pumped the same way. Every reply names the
// lab's request id.

async function lab({ id, options }) {
  if (!session) throw new Error('no model is loaded');
  phase = 'running the concurrency lab';
  const lab = session.startLab(options);
  try {
    for (;;) {
      if (cancelled.delete(id)) {
        post({ type: 'lab-events', id, events: lab.cancelAll(), users: null, report: lab.report() });
      }
      const pumped = await lab.pump(40);
      post({ type: 'lab-events', id, events: pumped.events, users: pumped.users, report: pumped.report });
      if (pumped.done) break;
      if (pumped.wait_ms > 0) await new Promise((resolve) => setTimeout(resolve, pumped.wait_ms));
      else await yieldNow();
    }
    post({ type: 'lab-finished', id, report: lab.report() });
  } finally {
    lab.free();
    cancelled.delete(id);
    phase = 'idle';
  }
}

// A Rust panic or a failed allocation traps the wasm instance, and a lost GPU device stays lost for
// it: all are fatal, and the page starts a fresh worker. The engine leaves the cause of a trap in
// `tokenometerFatalKind` / `tokenometerFatal` before it happens (the trap itself only says
// "unreachable").
function fatalCause() {
  const detail = self.tokenometerFatal;
  if (self.tokenometerFatalKind === 'oom') return `out of memory while ${phase}: ${detail}`;
  if (self.tokenometerFatalKind === 'panic') return `the engine crashed while ${phase}: ${detail}`;
  return null;
}

function failure(e) {
  if (e instanceof WebAssembly.RuntimeError) {
    return { type: 'fatal', message: fatalCause() ?? `the engine crashed while ${phase}: ${e.message}` };
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
    else if (data.type === 'cancel') cancelled.add(data.id);
  } catch (e) {
    post({ ...failure(e), id: data.id });
  }
};
// The worker takes requests at once; the engine's compile failing is reported when it happens.
post({ type: 'ready', webgpu: Boolean(self.navigator.gpu) });
ready.catch((e) => post(failure(e)));
