// Decode speed in the page itself (www/index.html, its drawing included) at each thread count,
// beside the bench harness's worker alone (tests/bench/peers.html, no page around it), in one
// headless Chromium: does the page keep what its threads gain? (issue 44 item 8)
//   node tests/bench/page_threads.mjs MODEL.gguf
// Environment: RUNS (5), MAX_TOKENS (128), THREADS (1,2), PROMPT (Once upon a time),
// CHROMIUM (/usr/lib/chromium/chromium).
// One tab a thread count, each loaded once and warmed by an untimed run, then runs interleaved
// (1 2 1 2 ...); then the harness, its engines interleaved the same way. The figure is the meter's
// decode tok/s (tokens after the first over the time from the first to the last).
import { mkdtempSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { benchPage } from './bench-page.mjs';

const [model] = process.argv.slice(2);
if (!model) {
  console.error('usage: node tests/bench/page_threads.mjs MODEL.gguf');
  process.exit(2);
}
const runs = Number(process.env.RUNS || 5);
const max = process.env.MAX_TOKENS || '128';
const prompt = process.env.PROMPT || 'Once upon a time';
const counts = (process.env.THREADS || '1,2').split(',').map(Number);
const files = mkdtempSync(join(tmpdir(), 'tokenometer-page-threads-'));
symlinkSync(resolve(model), join(files, 'model.gguf'));
// The harness loads its own model as model.bin (peers.js), here the same file.
symlinkSync(resolve(model), join(files, 'model.bin'));
const { base, server, browser } = await benchPage(files);
const context = await browser.newContext({ viewport: { width: 1600, height: 1000 } });

/** One run in `page`: its meter's decode tok/s. */
async function run(page) {
  await page.getByTestId('run').click();
  // Polled every 250 ms, as the harness polls: playwright's default polls at every animation
  // frame, which asks the page for 60 frames a second that a visitor's tab would not (107 of a
  // 2 s run's 123 frame requests were the poll's, the page's own 16). Measured both ways on
  // SmolLM2 Q4_1 at 2 threads: no difference beyond the runs' spread (71.2 and 74.6 tok/s).
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000, polling: 250 },
  );
  const error = await page.getByTestId('error').textContent();
  if ((await page.getByTestId('status').textContent()) === 'error') throw new Error(error);
  return page.evaluate(() => /** @type {any} */ (globalThis).tokenometer.lastReport);
}

const tabs = [];
for (const threads of counts) {
  const page = await context.newPage();
  const query = new URLSearchParams({
    model: '/files/model.gguf',
    backend: 'cpu',
    quant: 'stored',
    threads: String(threads),
    max,
    prompt,
    chat: '0',
  });
  await page.goto(`${base}/?${query}`);
  await page.waitForFunction(() => document.querySelector('[data-testid=max]').value !== '', null, {
    timeout: 60_000,
  });
  const warm = await run(page);
  console.error(`page, ${threads} thread(s): ${warm.summary}`);
  tabs.push({ threads, page, samples: [] });
}
for (let i = 0; i < runs; i += 1) {
  for (const tab of tabs) {
    await tab.page.bringToFront();
    const report = await run(tab.page);
    tab.samples.push(report.decode_tps);
    console.error(
      `page, ${tab.threads} thread(s), run ${i + 1}: ${report.decode_tps.toFixed(1)} tok/s`,
    );
  }
}
for (const tab of tabs) await tab.page.close();

const harness = await context.newPage();
harness.on('console', (m) => m.type() === 'log' && console.error(m.text()));
await harness.goto(
  `${base}/bench/peers.html?${new URLSearchParams({
    runs: String(runs),
    max,
    configs: 'stored:model.gguf',
    tokenizer: '0',
    prompt,
    threads: counts.join(','),
    wllama: '0',
  })}`,
);
await harness.waitForFunction(() => /** @type {any} */ (window).benchResult, null, {
  timeout: 0,
  polling: 500,
});
const result = await harness.evaluate(() => /** @type {any} */ (window).benchResult);
await browser.close();
server.close();
if (result.error) throw new Error(result.error);

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)];
};
const spread = (xs) =>
  `${median(xs).toFixed(1)} [${Math.min(...xs).toFixed(1)}-${Math.max(...xs).toFixed(1)}]`;
console.log(
  `\n${result.userAgent}\n${model}, prompt "${prompt}", ${max} tokens, greedy, ${runs} runs each after one untimed run, interleaved\n`,
);
console.log(
  "| threads | the page: decode tok/s median [min-max] | the harness's worker alone | page / harness |",
);
console.log('| --- | --- | --- | --- |');
for (const [k, tab] of tabs.entries()) {
  const alone = result.rows[k].samples.map((s) => s.own_tps);
  console.log(
    `| ${tab.threads} | ${spread(tab.samples)} | ${spread(alone)} | ${(median(tab.samples) / median(alone)).toFixed(2)}x |`,
  );
}
for (const tab of tabs.slice(1)) {
  const alone = (k) => median(result.rows[k].samples.map((s) => s.own_tps));
  const k = tabs.indexOf(tab);
  console.log(
    `${tab.threads} threads / ${tabs[0].threads}: the page ${(median(tab.samples) / median(tabs[0].samples)).toFixed(2)}x, the harness ${(alone(k) / alone(0)).toFixed(2)}x`,
  );
}
