// The page served by `tokenometer serve` (target/debug/tokenometer, built by `cargo test`) from
// the folder `make site` writes (target/e2e/site/, by make test-e2e: one layout for every host): it
// loads with the headers its threads need, and in presenter's mode its Room view shows what the
// server's own counters say (GET /room) while three users stream from it, then after they leave.
// Served by www/serve.mjs (no /room) the Room view stays hidden (page.test.mjs's pages).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { launchBrowser, models, openPage, root } from './harness.mjs';

const binary = resolve(root, 'target/debug/tokenometer');
const smollm2 = resolve(models, 'cache/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf');
const site = resolve(root, 'target/e2e/site');
let server;
let base;
let browser;

before(async () => {
  assert.ok(existsSync(binary), `${binary} is missing: cargo test (or cargo build) makes it`);
  assert.ok(existsSync(smollm2), `${smollm2} is missing: run make models`);
  assert.ok(
    existsSync(resolve(site, 'index.html')),
    `${site} is missing: make test-e2e writes it (node www/site.mjs target/e2e/site)`,
  );
  server = spawn(
    binary,
    [
      'serve',
      '--model',
      smollm2,
      '--page',
      site,
      '--threads',
      '1',
      '--parallel',
      '4',
      '--port',
      '0',
      '--exit-after',
      '600',
    ],
    { env: { ...process.env, MODELS: models }, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  base = await new Promise((ok, fail) => {
    let seen = '';
    server.stdout.on('data', (d) => {
      seen += String(d);
      const found = seen.match(/ on (http:\/\/127\.0\.0\.1:\d+)\//);
      if (found) ok(found[1]);
    });
    server.on('exit', (code) => fail(new Error(`tokenometer serve exited ${code}`)));
  });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  server?.kill();
});

/** A streamed chat request's text (read to its end). */
async function chat(content, maxTokens) {
  const response = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      messages: [{ role: 'user', content }],
      max_tokens: maxTokens,
      ignore_eos: true,
      temperature: 0,
      stream: true,
    }),
  });
  assert.equal(response.status, 200);
  return response.text();
}

test("served by tokenometer serve, presenter mode shows the room from the server's own counters", async () => {
  const { page, errors } = await openPage(
    browser,
    `${base}/?stage=1&model=stories260K&backend=cpu&quant=f32`,
  );
  const isolated = await page.evaluate(() => globalThis.crossOriginIsolated);
  assert.equal(isolated, true, 'the page is cross-origin isolated (COOP/COEP from serve)');
  const room = page.getByTestId('room');
  await room.waitFor({ state: 'visible', timeout: 30_000 });
  // Three users streaming 160 tokens each: the room counts them while they run.
  const users = Promise.all(
    ['Tell me a story.', 'Describe the sea.', 'Explain rain.'].map((q) => chat(q, 160)),
  );
  await page.waitForFunction(
    () => document.querySelector('[data-testid=room-users]').textContent === '3',
    null,
    { timeout: 60_000 },
  );
  await page.waitForFunction(
    () =>
      Number.parseFloat(document.querySelector('[data-testid=room-aggregate_tps]').textContent) > 0,
    null,
    { timeout: 30_000 },
  );
  const live = await (await fetch(`${base}/room`)).json();
  assert.ok(live.room.users <= 3 && live.room.aggregate_tps > 0, JSON.stringify(live));
  const bodies = await users;
  for (const body of bodies) assert.ok(body.trim().endsWith('data: [DONE]'), body.slice(-200));
  // After they leave: no users, and the three answered.
  await page.waitForFunction(
    () => document.querySelector('[data-testid=room-users]').textContent === '0',
    null,
    { timeout: 30_000 },
  );
  await page.waitForFunction(
    () => /\b3 answered\b/.test(document.querySelector('#room h2 small').textContent),
    null,
    { timeout: 30_000 },
  );
  const done = await (await fetch(`${base}/room`)).json();
  assert.equal(done.room.served, 3);
  assert.equal(await page.getByTestId('room-waiting').textContent(), String(done.room.waiting));
  assert.deepEqual(errors, []);
  await page.close();
});

test("served by tokenometer serve, the page runs on this server over HTTP with this browser's own figures", async () => {
  const prompt = 'What is a token?';
  const { page, errors } = await openPage(
    browser,
    `${base}/?prompt=${encodeURIComponent(prompt)}&max=24`,
  );
  // The server is offered, and chosen: a phone in the room need not load a model.
  await page.waitForFunction(
    () => document.querySelector('[data-testid=model]').value === 'server',
    null,
    { timeout: 60_000 },
  );
  await page.waitForFunction(() => document.querySelector('[data-testid=max]').value !== '', null, {
    timeout: 60_000,
  });
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 120_000 },
  );
  assert.equal(
    await page.getByTestId('error').isHidden(),
    true,
    await page.getByTestId('error').textContent(),
  );
  const view = page.locator('#run-view');
  // The text is the API's own greedy answer to the same message.
  const direct = await (
    await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        messages: [{ role: 'user', content: prompt }],
        max_tokens: 24,
        temperature: 0,
      }),
    })
  ).json();
  const answer = direct.choices[0].message.content;
  assert.ok(answer.length > 10, answer);
  assert.equal(await view.getByTestId('output').textContent(), `${prompt}${answer}`);
  const conditions = await view.getByTestId('conditions').textContent();
  for (const part of [
    `at ${base}/v1 (tokenometer/`,
    'tokens counted by the server, chunk by chunk',
    'output 24 tok',
  ]) {
    assert.ok(conditions.includes(part), `conditions show ${part}: ${conditions}`);
  }
  for (const id of ['metric-ttft-ms', 'metric-decode-tps']) {
    const value = Number((await view.getByTestId(id).textContent()).trim());
    assert.ok(value > 0, `${id}: ${value}`);
  }
  // Share names the endpoint and its model, never a key.
  await page.getByTestId('model').selectOption('endpoint');
  await page.getByTestId('endpoint-url').fill(`${base}/v1`);
  await page.getByTestId('endpoint-key').fill('sekret-key');
  await page.getByTestId('share').click();
  const shared = new URL(await page.getByTestId('share-url').inputValue());
  assert.equal(shared.searchParams.get('endpoint'), `${base}/v1`);
  assert.ok(!shared.href.includes('sekret'), shared.href);
  assert.deepEqual(errors, []);
  await page.close();
});

test("an endpoint the browser cannot reach is one sentence that names CORS and each server's switch", async () => {
  const { page } = await openPage(
    browser,
    `${base}/?endpoint=${encodeURIComponent('http://127.0.0.1:9/v1')}&autorun=1`,
  );
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'error',
    null,
    { timeout: 60_000 },
  );
  const error = await page.getByTestId('error').textContent();
  for (const part of [
    'could not reach http://127.0.0.1:9/v1/models',
    'CORS',
    'tokenometer serve --cors',
    'OLLAMA_ORIGINS',
  ]) {
    assert.ok(error.includes(part), `${part}: ${error}`);
  }
  await page.close();
});

test('lanes put a model in this tab beside an endpoint, with the verdict', async () => {
  const params = new URLSearchParams({
    endpoint: `${base}/v1`,
    lanes: 'cpu:f32:stories260K,cpu:stored',
    prompt: 'Once upon a time',
    max: '16',
    chat: '0',
    autorun: '1',
  });
  const { page, errors } = await openPage(browser, `${base}/?${params}`);
  await page.waitForFunction(
    () =>
      ['done', 'error'].includes(document.querySelector('[data-testid=lanes-status]').textContent),
    null,
    { timeout: 120_000 },
  );
  assert.equal(
    await page.getByTestId('lanes-status').textContent(),
    'done',
    await page.getByTestId('lanes-error').textContent(),
  );
  const lanes = page.getByTestId('lane');
  assert.equal(await lanes.count(), 2);
  const local = await lanes.nth(0).getByTestId('conditions').textContent();
  const remote = await lanes.nth(1).getByTestId('conditions').textContent();
  assert.ok(local.includes('stories260K') && local.includes('f32'), local);
  assert.ok(
    remote.includes(`at ${base}/v1 (tokenometer/`) && remote.includes('output 16 tok'),
    remote,
  );
  const verdict = await page.getByTestId('lane-verdict').textContent();
  assert.match(
    verdict,
    /^the endpoint http:\/\/127\.0\.0\.1:\d+\/v1 \(lane 2\): \d+(\.\d+)?x the decode tok\/s of f32 on cpu, stories260K \(lane 1\)/,
  );
  assert.deepEqual(errors, []);
  await page.close();
});

/** A counter from the server's /metrics (its Prometheus text), by name. */
async function counter(name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const found = text.match(new RegExp(`^tokenometer:${name}(?:\\{[^}]*\\})? (\\d+)`, 'm'));
  assert.ok(found, `${name} in /metrics: ${text.slice(0, 400)}`);
  return Number(found[1]);
}

test("the concurrency lab drives 4 real streams against the server, with goodput, its counts the server's own", async () => {
  const { page, errors } = await openPage(browser, `${base}/`);
  await page.waitForFunction(
    () => document.querySelector('[data-testid=model]').value === 'server',
    null,
    { timeout: 60_000 },
  );
  await page.waitForFunction(
    () => document.querySelector('[data-testid=lab-users]').value !== '',
    null,
    { timeout: 60_000 },
  );
  const labDone = async () => {
    await page.waitForFunction(
      () =>
        ['done', 'error', 'stopped'].includes(
          document.querySelector('[data-testid=lab-status]').textContent,
        ),
      null,
      { timeout: 120_000 },
    );
    return page.getByTestId('lab-status').textContent();
  };
  // Over HTTP/1.1 a browser opens at most 6 connections to one server: 8 users are refused, saying why.
  await page.getByTestId('lab-users').fill('8');
  await page.getByTestId('lab-start').click();
  assert.equal(await labDone(), 'error');
  const refused = await page.getByTestId('lab-error').textContent();
  assert.match(refused, /^8 users: against this endpoint the lab runs at most 6 at once/);
  const cap = await page.getByTestId('lab-cap').textContent();
  assert.ok(
    cap.includes(
      `Against ${base}/v1: every user is a real stream from this browser, at most 6 at once`,
    ),
    cap,
  );

  const before = {
    served: await counter('generation_tokens_total'),
    prompt: await counter('prompt_tokens_total'),
  };
  await page.getByTestId('lab-users').fill('4');
  await page.getByTestId('lab-max').fill('16');
  await page.getByTestId('lab-slo-ttft').fill('600000');
  await page.getByTestId('lab-start').click();
  assert.equal(await labDone(), 'done', await page.getByTestId('lab-error').textContent());
  const text = (id) => page.getByTestId(id).textContent();
  assert.equal(await text('lab-completed'), '4 of 4');
  const conditions = await text('lab-conditions');
  for (const part of [
    `at ${base}/v1 (tokenometer/`,
    '4 users',
    'burst arrival',
    'up to 16 tokens each',
    'tokens counted by the server, chunk by chunk',
  ]) {
    assert.ok(conditions.includes(part), `lab conditions show ${part}: ${conditions}`);
  }
  // Each user's lane streamed its own text, and every figure is there.
  const lanes = page.getByTestId('lab-lane');
  assert.equal(await lanes.count(), 4);
  for (let i = 0; i < 4; i += 1) {
    assert.ok(
      (await lanes.nth(i).locator('.lane-text').textContent()).length > 10,
      `lane ${i + 1} has text`,
    );
    assert.match(await lanes.nth(i).locator('.lane-state').textContent(), /^(max tokens|eos)$/);
  }
  for (const id of ['lab-aggregate-tps', 'lab-per-user-tps', 'lab-ttft-p99-ms', 'lab-goodput']) {
    const value = Number(await text(id));
    assert.ok(value > 0, `${id}: ${value}`);
  }
  assert.equal(await text('lab-good-share'), '100');
  // No ceiling is measured for an endpoint: its products run on the server.
  assert.equal(await text('lab-ceiling-tps'), '–');
  assert.equal(await page.getByTestId('lab-failures').isHidden(), true, await text('lab-failures'));
  // The tokens the lab counted are the ones the server says it generated for these four requests.
  const row = page.getByTestId('lab-level');
  assert.equal(await row.count(), 1);
  const after = {
    served: await counter('generation_tokens_total'),
    prompt: await counter('prompt_tokens_total'),
  };
  const report = await page.evaluate(
    () => /** @type {any} */ (globalThis).tokenometer.lastLabReport,
  );
  assert.ok(report, "the lab's reports are readable");
  assert.equal(report.output_tokens, after.served - before.served);
  assert.equal(report.prompt_tokens, after.prompt - before.prompt);
  assert.equal(report.requests, 4);
  assert.deepEqual(errors, []);
  await page.close();
});
