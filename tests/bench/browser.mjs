// Decode and prefill speed in headless Chromium: tokenometer's page worker (CPU backend) beside llama.cpp
// compiled to wasm (@wllama/wllama, one thread), on the same model, in the same tab, interleaved.
// `make bench-browser` prepares the files; by hand:
//   node tests/bench/browser.mjs MODEL.bin TOKENIZER.bin F32.gguf Q8_0.gguf [Q4_0.gguf]
// MODEL may be a GGUF itself, with `-` for TOKENIZER (its own inside), so that both engines load
// the very same file (QUANTS=q8 node tests/bench/browser.mjs model-q8_0.gguf - model-q8_0.gguf).
// Environment: RUNS (5), MAX_TOKENS (128), QUANTS (f32,q8,q4: the GGUFs' precisions, in order),
// PROMPT (Once upon a time), THREADS (1; e.g. 1,2: both engines at each count, interleaved),
// SPECULATE (off; e.g. off,lookup,draft: ours once per choice; lookup/4 drafts up to 4 as measured costs
// favour, lookup/1! 1 every step), WLLAMA (1; 0 leaves it out),
// CHAT (0; 1 wraps the prompt in the model's chat template, ours only),
// CHROMIUM (/usr/lib/chromium/chromium).
import { mkdtempSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { benchPage } from './bench-page.mjs';

const [model, tokenizer, ...ggufs] = process.argv.slice(2);
if (!model || !tokenizer || ggufs.length < 1) {
  console.error(
    'usage: node tests/bench/browser.mjs MODEL.bin TOKENIZER.bin F32.gguf [Q8_0.gguf [Q4_0.gguf]]',
  );
  process.exit(2);
}
const files = mkdtempSync(join(tmpdir(), 'tokenometer-bench-'));
symlinkSync(resolve(model), join(files, 'model.bin'));
if (tokenizer !== '-') symlinkSync(resolve(tokenizer), join(files, 'tokenizer.bin'));
const quants = (process.env.QUANTS || 'f32,q8,q4').split(',');
const configs = ggufs.map((g, i) => {
  symlinkSync(resolve(g), join(files, basename(g)));
  return `${quants[i]}:${basename(g)}`;
});

const { base, server, browser } = await benchPage(files);
const page = await browser.newPage();
page.on('console', (m) => m.type() === 'log' && console.error(m.text()));
const query = new URLSearchParams({
  runs: process.env.RUNS || '5',
  max: process.env.MAX_TOKENS || '128',
  configs: configs.join(','),
  tokenizer: tokenizer === '-' ? '0' : '1',
  prompt: process.env.PROMPT || 'Once upon a time',
  threads: process.env.THREADS || '1',
  speculate: process.env.SPECULATE || 'off',
  wllama: process.env.WLLAMA ?? '1',
  chat: process.env.CHAT || '0',
});
await page.goto(`${base}/bench/peers.html?${query}`);
await page.waitForFunction(() => window.benchResult, null, { timeout: 0, polling: 500 });
const result = await page.evaluate(() => window.benchResult);
await browser.close();
server.close();
if (result.error) {
  console.error(`bench failed: ${result.error}`);
  process.exit(1);
}

const median = (xs) => {
  const s = xs.filter((x) => x != null).sort((a, b) => a - b);
  return s.length ? s[Math.floor((s.length - 1) / 2)] : null;
};
const fmt = (x) => (x == null ? '-' : x.toFixed(1));
console.log(
  `\n${result.userAgent}\nprompt "${result.prompt}", ${result.maxTokens} tokens, greedy, ${result.runs} runs each after one untimed run, interleaved\n`,
);
console.log(
  '| engine | adapter | tokens | decode tok/s median [min-max] | its own figure (median) | prefill tok/s, its own (median [min-max]) |',
);
console.log('| --- | --- | --- | --- | --- | --- |');
const byQuant = {};
for (const row of result.rows) {
  const tps = row.samples.map((s) => s.decode_tps);
  const m = median(tps);
  ((byQuant[row.quant] ??= {})[row.threads] ??= []).push(m);
  const acceptance = median(row.samples.map((s) => s.acceptance));
  const kept = acceptance == null ? '' : ` (drafts kept ${(acceptance * 100).toFixed(0)}%)`;
  const pp = row.samples.map((s) => s.prefill_tps).filter((x) => x != null);
  const ppCell = pp.length
    ? `${fmt(median(pp))} [${fmt(Math.min(...pp))}-${fmt(Math.max(...pp))}]`
    : '-';
  console.log(
    `| ${row.engine}${kept} | ${row.adapter} | ${row.samples[0].tokens} | ${fmt(m)} [${fmt(Math.min(...tps))}-${fmt(Math.max(...tps))}] | ${fmt(median(row.samples.map((s) => s.own_tps)))} | ${ppCell} |`,
  );
}
console.log('');
for (const row of result.rows) if (row.memory) console.log(`${row.engine}: ${row.memory}`);
console.log('');
// Ratios within each precision and thread count: every engine against the first (ours without
// speculation), then each thread count against the first for the same engine.
const names = {};
for (const row of result.rows) ((names[row.quant] ??= {})[row.threads] ??= []).push(row.engine);
for (const [quant, byThreads] of Object.entries(byQuant)) {
  for (const [threads, medians] of Object.entries(byThreads)) {
    const labels = names[quant][threads];
    for (const [i, m] of medians.entries()) {
      if (i > 0)
        console.log(
          `${quant}, ${threads} thread(s): ${labels[i]} / ${labels[0]} = ${(m / medians[0]).toFixed(2)}x`,
        );
    }
  }
  const counts = Object.keys(byThreads);
  for (const t of counts.slice(1)) {
    const ratios = byThreads[t].map(
      (m, i) => `${names[quant][t][i]} ${(m / byThreads[counts[0]][i]).toFixed(2)}x`,
    );
    console.log(`${quant}: ${t} threads / ${counts[0]}: ${ratios.join(', ')}`);
  }
}
