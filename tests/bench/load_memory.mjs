// The tab's memory while the page's worker loads a model: the peak resident memory of Chromium's
// renderer processes (VmHWM, Linux), the worker's wasm memory after load, and how long the load
// took from the request to "loaded" (download from loopback, into an empty cache, included).
// Each sample is a fresh headless Chromium, so each peak is one load's. Two page trees may be
// compared, interleaved (A B A B):
//   ROOTS=/work/before,. ROUNDS=3 node tests/bench/load_memory.mjs MODEL.gguf
// ROOTS: the trees whose www/ and pkg/ serve the page (default: this one); CHROMIUM as in
// bench-page.mjs. Linux only (/proc).
import { mkdtempSync, readdirSync, readFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';

const [model] = process.argv.slice(2);
if (!model) {
  console.error('usage: ROOTS=TREE[,TREE] ROUNDS=N node tests/bench/load_memory.mjs MODEL.gguf');
  process.exit(2);
}
const roots = (process.env.ROOTS || '.').split(',').map((r) => resolve(r));
const rounds = Number(process.env.ROUNDS || '3');
const files = mkdtempSync(join(tmpdir(), 'tokenometer-load-'));
symlinkSync(resolve(model), join(files, 'model.gguf'));

/** Renderer processes now: pid -> peak resident bytes. */
function renderers() {
  const out = new Map();
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'latin1');
      if (!cmdline.includes('--type=renderer')) continue;
      const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'latin1'));
      if (hwm) out.set(pid, Number(hwm[1]) * 1024);
    } catch {
      // The process ended while it was read.
    }
  }
  return out;
}

async function sample(root) {
  const { pageMounts, staticServer } = await import(
    pathToFileURL(join(root, 'www/serve.mjs')).href
  );
  const server = staticServer(pageMounts([['/files/', files]]));
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  const base = `http://127.0.0.1:${server.address().port}`;
  const before = new Set(renderers().keys());
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/lib/chromium/chromium',
    args: [
      '--no-sandbox',
      '--disable-dev-shm-usage',
      '--no-first-run',
      '--disable-background-networking',
    ],
  });
  try {
    const page = await browser.newPage();
    await page.goto(`${base}/www/404-is-fine`).catch(() => {});
    const result = await page.evaluate(async () => {
      const worker = new Worker('/worker.js?build=relaxed', { type: 'module' });
      const once = (type) =>
        new Promise((ok, fail) => {
          worker.addEventListener('message', ({ data }) => {
            if (data.type === type) ok(data);
            if (data.type === 'error' || data.type === 'fatal') fail(new Error(data.message));
          });
        });
      await once('ready');
      const start = performance.now();
      worker.postMessage({
        type: 'load',
        id: 1,
        name: 'model',
        model: { url: '/files/model.gguf' },
        tokenizer: null,
        backend: 'cpu',
        quant: 'stored',
        threads: 1,
      });
      const loaded = await once('loaded');
      return {
        ms: performance.now() - start,
        wasm: loaded.wasmMemoryBytes,
        weights: loaded.info.weight_bytes,
      };
    });
    const peak = Math.max(
      ...[...renderers()].filter(([pid]) => !before.has(pid)).map(([, bytes]) => bytes),
    );
    return { ...result, peak };
  } finally {
    await browser.close();
    server.close();
  }
}

const mb = (b) => (b / 1e6).toFixed(1);
const results = roots.map(() => []);
for (let round = 0; round < rounds; round++) {
  for (const [i, root] of roots.entries()) {
    const s = await sample(root);
    results[i].push(s);
    console.error(
      `${root} round ${round + 1}: peak ${mb(s.peak)} MB, wasm after load ${mb(s.wasm)} MB, load ${s.ms.toFixed(0)} ms`,
    );
  }
}
console.log(
  `\n${model}, CPU, stored, 1 thread, ${rounds} rounds interleaved, a fresh Chromium each\n`,
);
console.log(
  '| tree | renderer peak RSS (MB), each round | wasm memory after load (MB) | weights (MB) | load ms, each round |',
);
console.log('| --- | --- | --- | --- | --- |');
for (const [i, root] of roots.entries()) {
  const r = results[i];
  console.log(
    `| ${root} | ${r.map((s) => mb(s.peak)).join(', ')} | ${mb(r[0].wasm)} | ${mb(r[0].weights)} | ${r.map((s) => s.ms.toFixed(0)).join(', ')} |`,
  );
}
