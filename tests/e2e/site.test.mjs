// End-to-end: the page as `make site` writes it (target/e2e/site/, written by make test-e2e) on a
// plain static host, Python's http.server (tests/e2e/static_host.py: no COOP/COEP, nothing
// special), under a subpath. The page loads, its service worker makes it cross-origin isolated
// after one reload, it opens on SmolLM2 read from its 25 MB parts, and 2 threads give the text of
// 1. A model kept on a second origin (standing in for Hugging Face: CORS, as it sends) is said with
// its host and size before anything is fetched, downloads with progress, is checked by sha-256 and
// refused when a byte differs; the next visit, without the network, runs it and the shipped
// stories260K from the browser's storage.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { launchBrowser, root } from './harness.mjs';

const site = resolve(root, 'target/e2e/site');
const fixture = resolve(root, 'target/e2e/smollm2-135m-2layers-q8_0.gguf');
const files = mkdtempSync(join(tmpdir(), 'tokenometer-site-'));
/** @type {import('node:child_process').ChildProcess[]} */
const hosts = [];
let browser;
let base;
let other;
/** @type {string[]} the paths the second origin was asked for */
const otherGets = [];

/** Python's http.server over `folder` (CORS with `cors`); its origin once it listens. */
function staticHost(folder, { cors = false, gets = [] } = {}) {
  const host = spawn(
    'python3',
    [
      resolve(root, 'tests/e2e/static_host.py'),
      folder,
      ...(cors ? ['--cors'] : []),
      '--exit-after',
      '900',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  hosts.push(host);
  return new Promise((ok, fail) => {
    let seen = '';
    host.stdout.on('data', (d) => {
      seen += String(d);
      const lines = seen.split('\n');
      seen = lines.pop() ?? '';
      for (const line of lines) {
        const port = line.match(/^serving (\d+)$/);
        if (port) ok({ origin: `http://127.0.0.1:${port[1]}`, host });
        else if (line.startsWith('GET ')) gets.push(line.slice(4));
      }
    });
    host.on('exit', (code) => fail(new Error(`static host exited ${code}`)));
  });
}

before(async () => {
  assert.ok(
    existsSync(resolve(site, 'index.html')),
    `${site} is missing: make test-e2e writes it (node www/site.mjs target/e2e/site)`,
  );
  assert.ok(existsSync(fixture), `${fixture} is missing: make test-e2e writes it`);
  // The second origin: the 2-layer SmolLM2-shaped GGUF, and a copy with its last byte changed.
  const remote = join(files, 'remote');
  mkdirSync(remote);
  const good = readFileSync(fixture);
  writeFileSync(join(remote, 'good.gguf'), good);
  const bad = Buffer.from(good);
  bad[bad.length - 1] ^= 1;
  writeFileSync(join(remote, 'bad.gguf'), bad);
  other = await staticHost(remote, { cors: true, gets: otherGets });
  // A site of stories260K and two models kept on the second origin (make site SITE_EXTRA=...).
  const sha256 = createHash('sha256').update(good).digest('hex');
  const extra = [
    {
      id: 'elsewhere',
      label: 'SmolLM2-shaped 2 layers',
      license: 'Apache-2.0',
      url: `${other.origin}/good.gguf`,
      bytes: good.length,
      sha256,
    },
    {
      id: 'elsewhere-changed',
      label: 'SmolLM2-shaped 2 layers, a byte changed',
      license: 'Apache-2.0',
      url: `${other.origin}/bad.gguf`,
      bytes: good.length,
      sha256,
    },
  ];
  writeFileSync(join(files, 'extra.json'), JSON.stringify(extra));
  mkdirSync(join(files, 'www', 'course'), { recursive: true });
  mkdirSync(join(files, 'www', 'elsewhere'), { recursive: true });
  symlinkSync(site, join(files, 'www', 'course', 'tokenometer'));
  execFileSync(
    'node',
    [resolve(root, 'www/site.mjs'), join(files, 'www', 'elsewhere', 'tokenometer')],
    {
      env: { ...process.env, SITE_MODELS: 'none', SITE_EXTRA: join(files, 'extra.json') },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  base = (await staticHost(join(files, 'www'))).origin;
  browser = await launchBrowser({ webgpu: false });
});

after(async () => {
  await browser?.close();
  for (const host of hosts) host.kill();
  rmSync(files, { recursive: true, force: true });
});

const text = (page, id) => page.locator('#run-view').getByTestId(id).textContent();
const finished = (page) =>
  page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );

/** A page of `context` at `url`, once its service worker has made it cross-origin isolated (one reload at most). */
async function isolatedPage(context, url) {
  const page = await context.newPage({ viewport: { width: 1280, height: 1000 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  // Documents loaded (the first may reload before its load event).
  let loads = 0;
  page.on('framenavigated', (frame) => {
    if (frame === page.mainFrame()) loads += 1;
  });
  await page.goto(url);
  const deadline = Date.now() + 30_000;
  for (;;) {
    const isolated = await page.evaluate(() => crossOriginIsolated).catch(() => false);
    if (isolated) break;
    assert.ok(
      Date.now() < deadline,
      `not cross-origin isolated 30 s after ${loads} load(s) of ${url}`,
    );
    await new Promise((ok) => setTimeout(ok, 200));
  }
  await page.waitForLoadState('load');
  return { page, errors, loads };
}

test("make site on a plain static host under a subpath: isolated by its service worker, SmolLM2 from its parts, 2 threads give 1 thread's text", async () => {
  const parts = readdirSync(join(site, 'models', 'smollm2-135m')).filter((n) =>
    /\.part\d\d$/.test(n),
  );
  assert.ok(parts.length >= 4, `SmolLM2 in parts: ${parts.join(' ')}`);
  for (const name of parts)
    assert.ok(
      statSync(join(site, 'models', 'smollm2-135m', name)).size <= 25_000_000,
      `${name} is over 25 MB`,
    );
  const context = await browser.newContext();
  const url = `${base}/course/tokenometer/`;
  const first = await isolatedPage(
    context,
    `${url}?backend=cpu&chat=0&max=16&prompt=${encodeURIComponent('Once upon a time')}`,
  );
  assert.equal(first.loads, 2, 'the page reloaded once, under its service worker');
  // The page opens on SmolLM2, on this site in parts.
  await first.page.waitForFunction(
    () => document.querySelector('[data-testid=model]').value === 'smollm2-135m',
    null,
    { timeout: 30_000 },
  );
  assert.match(
    await first.page.locator('[data-testid=model] option[value=smollm2-135m]').textContent(),
    /on this site, 98\.4 MB in 4 parts/,
  );
  await first.page.close();
  const outputs = [];
  for (const threads of [1, 2]) {
    const { page, errors, loads } = await isolatedPage(
      context,
      `${url}?backend=cpu&quant=q4&chat=0&max=16&prompt=${encodeURIComponent('Once upon a time')}&threads=${threads}&autorun=1`,
    );
    assert.equal(loads, 1, 'the service worker is installed: no more reloads');
    await finished(page);
    assert.equal(
      await page.getByTestId('error').isHidden(),
      true,
      await page.getByTestId('error').textContent(),
    );
    const conditions = await text(page, 'conditions');
    assert.match(conditions, /smollm2-135m/);
    assert.match(conditions, threads > 1 ? /2 threads\]/ : /\[CPU \(SIMD128\+relaxed\)\]/);
    outputs.push(await text(page, 'output'));
    assert.deepEqual(errors, []);
    await page.close();
  }
  assert.match(outputs[0], /^Once upon a time./);
  assert.equal(outputs[1], outputs[0], "two threads give one thread's text");
  await context.close();
});

test("a model kept on another host: said first, downloaded with progress, checked by sha-256, refused when a byte differs; without the network the next visit runs it and stories260K from this browser's storage", async () => {
  const context = await browser.newContext();
  const url = `${base}/elsewhere/tokenometer/?backend=cpu&quant=q8&chat=0&max=8&prompt=${encodeURIComponent('Once upon a time')}`;
  const { page, errors } = await isolatedPage(context, url);
  const host = new URL(other.origin).host;
  const option = page.locator('[data-testid=model] option[value=elsewhere]');
  // Listed once the page has read the site's catalog, and said with its host once it has read it all.
  await page.waitForFunction(
    () =>
      document
        .querySelector('[data-testid=model] option[value=elsewhere]')
        ?.textContent.includes('(from '),
    null,
    { timeout: 30_000 },
  );
  assert.match(
    await option.textContent(),
    new RegExp(`from ${host.replace('.', '\\.')}, \\d+\\.\\d MB`),
  );
  await page.getByTestId('model').selectOption('elsewhere');
  assert.match(
    await page.getByTestId('model-host').textContent(),
    new RegExp(`downloads \\d+\\.\\d MB from ${host.replace('.', '\\.')}`),
  );
  assert.deepEqual(otherGets, [], 'nothing is fetched from the other host before a run');
  await page.getByTestId('run').click();
  await finished(page);
  assert.equal(
    await page.getByTestId('error').isHidden(),
    true,
    await page.getByTestId('error').textContent(),
  );
  assert.match(
    await page.locator('#download-text').textContent(),
    /model: \d+\.\d MB of \d+\.\d MB \(100%\)/,
  );
  assert.match(await text(page, 'output'), /^Once upon a time/);
  // First its header, for "will it fit" (this host ignores ranges and sends the whole file, which
  // the page reads only until the header is whole), then the download.
  assert.deepEqual(otherGets, ['/good.gguf bytes=0-262143', '/good.gguf']);
  // The copy with a byte changed: refused in a sentence, and not kept.
  await page.getByTestId('model').selectOption('elsewhere-changed');
  await page.getByTestId('run').click();
  await finished(page);
  assert.match(
    await page.getByTestId('error').textContent(),
    /is not the file the catalog names: its sha-256 is [0-9a-f]{64}, not [0-9a-f]{64}; it was refused and not kept/,
  );
  const kept = await page.evaluate(async () =>
    (await (await caches.open('tokenometer-models-v1')).keys()).map((r) => r.url),
  );
  assert.ok(
    kept.some((u) => u.endsWith('/good.gguf')) && !kept.some((u) => u.endsWith('/bad.gguf')),
    kept.join(' '),
  );
  assert.deepEqual(errors, []);
  await page.close();
  // The next visit without the network (both hosts gone): the page comes from its service
  // worker's copy, the model from this browser's storage, and stories260K (never run before) too.
  for (const gone of hosts) {
    gone.kill();
    if (gone.exitCode === null) await new Promise((ok) => gone.once('exit', ok));
  }
  const next = await isolatedPage(context, `${url}&model=elsewhere&autorun=1`);
  await finished(next.page);
  assert.equal(
    await next.page.getByTestId('error').isHidden(),
    true,
    await next.page.getByTestId('error').textContent(),
  );
  assert.match(await next.page.locator('#download-text').textContent(), /from cache/);
  assert.match(await text(next.page, 'output'), /^Once upon a time/);
  await next.page.getByTestId('model').selectOption('stories260K');
  await next.page.getByTestId('run').click();
  await next.page.waitForFunction(
    () => document.querySelector('[data-testid=conditions]').textContent.includes('stories260K'),
    null,
    { timeout: 60_000 },
  );
  await finished(next.page);
  assert.equal(
    await next.page.getByTestId('error').isHidden(),
    true,
    await next.page.getByTestId('error').textContent(),
  );
  assert.match(await text(next.page, 'output'), /^Once upon a time/);
  assert.deepEqual(next.errors, []);
  await context.close();
});

test('make site (and make serve) with MODELS= a folder that lacks what the site needs says what is missing in one line, not a stack trace', () => {
  const empty = join(files, 'models-empty');
  mkdirSync(join(empty, 'stories260K'), { recursive: true });
  const broken = join(files, 'models-broken');
  mkdirSync(join(broken, 'stories260K'), { recursive: true });
  for (const name of readdirSync(resolve(root, 'models', 'stories260K')))
    writeFileSync(
      join(broken, 'stories260K', name),
      readFileSync(resolve(root, 'models', 'stories260K', name)),
    );
  writeFileSync(join(broken, 'catalog.json'), '{"models": [');
  const cases = [
    [
      join(files, 'no-such-folder'),
      /is not a folder: give a folder laid out as models\/ is, or leave MODELS out/,
    ],
    [
      empty,
      /lacks stories260K\/stories260K\.bin, stories260K\/tok512\.bin, stories260K\/stories260K-q8_0\.gguf, stories260K\/README\.md, catalog\.json: the site needs/,
    ],
    [
      broken,
      /catalog\.json is not JSON \(.*\): restore it from the checkout's models\/catalog\.json/,
    ],
  ];
  for (const [models, says] of cases) {
    const run = spawnSync('node', [resolve(root, 'www/site.mjs'), join(files, 'site-refused')], {
      env: { ...process.env, MODELS: models },
      encoding: 'utf8',
    });
    assert.equal(run.status, 1, run.stderr);
    const lines = run.stderr.trim().split('\n');
    assert.equal(lines.length, 1, run.stderr);
    assert.match(lines[0], /^make site: /);
    assert.match(lines[0], says);
  }
});
