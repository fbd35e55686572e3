// The inference worker: a thin shell around the wasm engine. The page sends it requests; it answers
// with progress, events (each with the meter's report) and errors. Nothing here computes a figure.
import init, { loadSession, lastPanic } from '../pkg/tokenometer.js';

const ready = init();
let session = null;
let stopFlag = null; // Int32Array over a SharedArrayBuffer from the page, when cross-origin isolated

const post = (message) => self.postMessage(message);

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
    post({ type: 'progress', label, loaded, total });
  }
  if (total && loaded !== total) {
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
    const bytes = new Uint8Array(await source.file.arrayBuffer());
    post({ type: 'progress', label, loaded: bytes.length, total: bytes.length });
    return bytes;
  }
  return fetchBytes(new URL(source.url, self.location.href).href, label);
}

async function load({ name, model, tokenizer, config, backend, quant }) {
  await ready;
  session?.free();
  session = null;
  const modelBytes = await bytesOf(model, 'model');
  const tokenizerBytes = await bytesOf(tokenizer, 'tokenizer');
  const configBytes = await bytesOf(config, 'config.json');
  post({ type: 'status', status: 'loading' });
  session = await loadSession(name, modelBytes, tokenizerBytes, backend, quant, configBytes ?? undefined);
  post({ type: 'loaded', info: session.info() });
  post({ type: 'status', status: 'warming up' });
  const warmUpMs = await session.warmUp();
  post({ type: 'warmed', ms: warmUpMs });
}

async function run({ prompt, options }) {
  if (!session) throw new Error('no model is loaded');
  if (stopFlag) Atomics.store(stopFlag, 0, 0);
  const report = await session.generate(prompt, options, (events, report) => {
    post({ type: 'events', events, report });
    return !(stopFlag && Atomics.load(stopFlag, 0) === 1);
  });
  post({ type: 'finished', report });
}

// A Rust panic traps the wasm instance, and a lost GPU device stays lost for it: both are fatal,
// and the page starts a fresh worker.
function failure(e) {
  const panic = lastPanic?.();
  if (panic) return { type: 'fatal', message: `the engine crashed: ${panic}` };
  if (e?.name === 'DeviceLostError') return { type: 'fatal', message: e.message };
  return { type: 'error', message: e?.message ?? String(e) };
}

self.onmessage = async ({ data }) => {
  try {
    if (data.type === 'stop-flag') stopFlag = new Int32Array(data.buffer);
    else if (data.type === 'load') await load(data);
    else if (data.type === 'run') await run(data);
    else if (data.type === 'cancel') session?.cancel();
  } catch (e) {
    post(failure(e));
  }
};
ready.then(() => post({ type: 'ready', webgpu: Boolean(self.navigator.gpu) }), (e) => post(failure(e)));
