// The concurrency lab in headless Chromium: the page's worker (CPU backend, wasm) runs N users in
// one batch, for N = 1 and 8 (or LEVELS), per quantization, levels interleaved round by round, and
// prints aggregate and per-user tok/s with their conditions. `make bench-lab` prepares the model;
// by hand:
//   node tests/bench/lab.mjs MODEL.bin TOKENIZER.bin   (TOKENIZER `-`: a GGUF's own)
// Environment: ROUNDS (3), LEVELS (1,8), QUANTS (f32,q8,q4), MAX_TOKENS (128),
// CHROMIUM (/usr/lib/chromium/chromium), BUILDS=name=PKG_DIR[:WWW_DIR][?WORKER_QUERY],... to compare wasm builds
// (each a `pkg/` folder, with its own page folder if its worker differs), interleaved round by
// round (default: this checkout's pkg/), BACKEND (cpu; wgpu for WebGPU), and MODE=run to time single runs through the page's
// ordinary Run path instead (decode tok/s and inter-token p50/p99/max: the worker's stalls).
// CHROMIUM_ARGS adds browser switches, e.g. "--js-flags=--prof" to profile the worker (README,
// "Profiling the page's worker").
import { mkdtempSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { pageMounts, staticServer } from '../../www/serve.mjs';

const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const [model, tokenizer] = process.argv.slice(2);
if (!model || !tokenizer) {
  console.error('usage: node tests/bench/lab.mjs MODEL.bin TOKENIZER.bin');
  process.exit(2);
}
const rounds = Number(process.env.ROUNDS || 3);
const levels = (process.env.LEVELS || '1,8').split(',').map(Number);
const quants = (process.env.QUANTS || 'f32,q8,q4').split(',');
const maxTokens = Number(process.env.MAX_TOKENS || 128);
const files = mkdtempSync(join(tmpdir(), 'tokenometer-lab-'));
symlinkSync(resolve(model), join(files, 'model.bin'));
if (tokenizer !== '-') symlinkSync(resolve(tokenizer), join(files, 'tokenizer.bin'));

// Each build's worker is served at /builds/NAME/www/worker.js, so that its `./pkg/` is that build's.
// A build may end in `?QUERY` for its worker's URL, e.g. `baseline=pkg?simd=baseline`.
const builds = (process.env.BUILDS || `this=${resolve(root, 'pkg')}`).split(',').map((b) => {
  const at = b.indexOf('=');
  const [name, spec] = [b.slice(0, at), b.slice(at + 1)];
  const [dirs, query] = spec.split('?');
  const [dir, www] = dirs.split(':');
  return {
    name,
    dir: resolve(dir),
    www: resolve(www || resolve(root, 'www')),
    query: query ? `?${query}` : '',
  };
});
const mode = process.env.MODE || 'lab';
// BACKEND=wgpu measures WebGPU (in headless Chromium here: SwiftShader, a software GPU).
const backend = process.env.BACKEND || 'cpu';
const server = staticServer(
  pageMounts([
    ['/files/', files],
    ['/bench/', resolve(root, 'tests/bench')],
    // (and at /builds/NAME/pkg/ for a worker from before, which imported `../pkg/`).
    ...builds.flatMap((b) => [
      [`/builds/${b.name}/www/pkg/`, b.dir],
      [`/builds/${b.name}/pkg/`, b.dir],
      [`/builds/${b.name}/www/`, b.www],
    ]),
  ]),
);
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const base = `http://127.0.0.1:${server.address().port}`;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/lib/chromium/chromium',
  args: [
    '--no-sandbox',
    '--enable-unsafe-webgpu',
    '--disable-dev-shm-usage',
    '--no-first-run',
    '--disable-background-networking',
    ...(process.env.CHROMIUM_ARGS || '').split(' ').filter(Boolean),
  ],
});
const page = await browser.newPage();
await page.goto(`${base}/bench/lab.html`);
const results = await page.evaluate(
  async ({ quants, levels, rounds, maxTokens, builds, mode, backend, modelName, ownTokenizer }) => {
    const once = (worker, wanted, id) =>
      new Promise((resolve, reject) => {
        const listener = ({ data }) => {
          if (data.type === 'error' || data.type === 'fatal') reject(new Error(data.message));
          else if (data.type === wanted && (id === undefined || data.id === id)) {
            worker.removeEventListener('message', listener);
            resolve(data);
          }
        };
        worker.addEventListener('message', listener);
      });
    const out = [];
    for (const quant of quants) {
      const workers = [];
      for (const build of builds) {
        const worker = new Worker(`/builds/${build.name}/www/worker.js${build.query}`, {
          type: 'module',
        });
        await once(worker, 'ready');
        worker.postMessage({
          type: 'load',
          name: modelName,
          model: { url: '/files/model.bin' },
          tokenizer: ownTokenizer ? null : { url: '/files/tokenizer.bin' },
          backend,
          quant,
        });
        await once(worker, 'warmed');
        workers.push({ build, worker });
      }
      let id = 1;
      for (let round = 0; round <= rounds; round++) {
        for (const { build, worker } of workers) {
          if (mode === 'run') {
            const request = id++;
            worker.postMessage({
              type: 'run',
              id: request,
              prompt: 'Once upon a time',
              options: { max_tokens: maxTokens, temperature: 0 },
            });
            const { report } = await once(worker, 'finished');
            if (round > 0) out.push({ build: build.name, quant, users: 1, report });
            continue;
          }
          for (const users of levels) {
            const request = id++;
            worker.postMessage({
              type: 'lab',
              id: request,
              options: { users, max_tokens: maxTokens },
            });
            const { report } = await once(worker, 'lab-finished', request);
            // Round 0 is untimed: it settles the JIT and the allocator.
            if (round > 0) out.push({ build: build.name, quant, users, report });
          }
        }
      }
      for (const { worker } of workers) worker.terminate();
    }
    return { out, userAgent: navigator.userAgent };
  },
  {
    quants,
    levels,
    rounds,
    maxTokens,
    builds: builds.map(({ name, query }) => ({ name, query })),
    mode,
    backend,
    modelName: basename(model).replace(/\.[a-z]+$/, ''),
    ownTokenizer: tokenizer === '-',
  },
);
await browser.close();
server.close();

if (mode === 'run') {
  const first = results.out[0].report;
  console.log(
    `\n${results.userAgent}\n${first.conditions.model} on ${first.conditions.adapter}, the page's Run path, greedy, prompt ${first.conditions.prompt_tokens} tokens, ${maxTokens} tokens; ${rounds} runs per build and quant after one untimed, interleaved\n`,
  );
  console.log(
    '| build | quant | decode tok/s median [min-max] | inter-token p50 ms | p99 ms | max ms |',
  );
  console.log('| --- | --- | --- | --- | --- | --- |');
  const med = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.floor((s.length - 1) / 2)];
  };
  for (const quant of quants) {
    for (const { name } of builds) {
      const rs = results.out
        .filter((r) => r.build === name && r.quant === quant)
        .map((r) => r.report);
      const tps = rs.map((r) => r.decode_tps);
      const itl = (k) => med(rs.map((r) => r.inter_token_ms[k])).toFixed(2);
      console.log(
        `| ${name} | ${quant} | ${med(tps).toFixed(1)} [${Math.min(...tps).toFixed(1)}-${Math.max(...tps).toFixed(1)}] | ${itl('p50')} | ${itl('p99')} | ${itl('max')} |`,
      );
    }
  }
  process.exit(0);
}
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)];
};
const fmt = (x, d = 1) => (x == null ? '-' : x.toFixed(d));
console.log(
  `\n${results.userAgent}\n${results.out[0].report.conditions.model} on ${results.out[0].report.conditions.adapter}, greedy, ${maxTokens} tokens a user, burst arrival, batch limit = users; median of ${rounds} rounds, levels interleaved\n`,
);
console.log(
  '| build | quant | users | aggregate tok/s | per-user tok/s p50 | TTFT p99 ms | ITL p99 ms | aggregate / 1 user | ceiling tok/s | products GB/s | products GMAC/s | ceiling / 1 user |',
);
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
// The ceiling: the level's matrix products alone, timed in the worker once the level had ended
// (the report's `products_alone`; none on WebGPU).
for (const quant of quants) {
  for (const { name } of builds) {
    const at = (users, pick) => {
      const values = results.out
        .filter((r) => r.build === name && r.quant === quant && r.users === users)
        .map((r) => pick(r.report));
      return values.some((v) => v == null) ? null : median(values);
    };
    const key = (k) => (r) => r[k];
    const products = (k) => (r) => r.products_alone?.[k];
    for (const users of levels) {
      const aggregate = at(users, key('aggregate_tps'));
      const ceiling = at(users, products('tps'));
      const first = at(levels[0], products('tps'));
      console.log(
        `| ${name} | ${quant} | ${users} | ${fmt(aggregate)} | ${fmt(at(users, key('per_user_tps_p50')))} | ${fmt(at(users, key('ttft_ms_p99')))} | ${fmt(at(users, key('itl_ms_p99')), 2)} | ${fmt(aggregate / at(levels[0], key('aggregate_tps')), 2)}x | ${fmt(ceiling)} | ${fmt(at(users, products('gb_per_s')))} | ${fmt(at(users, products('gmac_per_s')), 2)} | ${ceiling == null || first == null ? '-' : `${fmt(ceiling / first, 2)}x`} |`,
      );
    }
  }
}
