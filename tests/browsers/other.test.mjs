// The page in the browsers beside Chromium (`make test-browsers`, not in `make test`: CI's time):
// Debian's Firefox ESR, driven over WebDriver BiDi (puppeteer-core), and WebKitGTK's MiniBrowser
// through WebKitWebDriver under Xvfb. Each opens the page `make site` writes (target/e2e/site/) on
// Python's http.server under a subpath, as a static host would serve it: the service worker makes
// it cross-origin isolated, stories260K and SmolLM2 (from its parts) run on the CPU and stream,
// and what differs (relaxed SIMD, threads, WebGPU) is said in the conditions or beside Threads.
// Each browser's facts go to target/browsers.json (docs/browsers.md).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import puppeteer from 'puppeteer-core';
import { root } from '../e2e/harness.mjs';
import { startSession } from './webdriver.mjs';

const site = resolve(root, 'target/e2e/site');
const files = mkdtempSync(join(tmpdir(), 'tokenometer-browsers-'));
const FIREFOX = process.env.FIREFOX || '/usr/bin/firefox-esr';
const MINIBROWSER =
  process.env.MINIBROWSER || '/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser';
let host;
let url;
const facts = {};

before(async () => {
  assert.ok(
    existsSync(resolve(site, 'index.html')),
    `${site} is missing: make test-browsers writes it`,
  );
  mkdirSync(join(files, 'course'));
  symlinkSync(site, join(files, 'course', 'tokenometer'));
  host = spawn(
    'python3',
    [resolve(root, 'tests/e2e/static_host.py'), files, '--exit-after', '900'],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const port = await new Promise((ok, fail) => {
    host.stdout.on('data', (d) => {
      const m = String(d).match(/serving (\d+)/);
      if (m) ok(m[1]);
    });
    host.on('exit', (code) => fail(new Error(`static host exited ${code}`)));
  });
  url = `http://127.0.0.1:${port}/course/tokenometer/`;
});

after(() => {
  host?.kill();
  rmSync(files, { recursive: true, force: true });
  mkdirSync(resolve(root, 'target'), { recursive: true });
  writeFileSync(resolve(root, 'target/browsers.json'), `${JSON.stringify(facts, null, 1)}\n`);
});

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/**
 * The checks, for a browser seen as `goto(url)` and `run(body)` (a function's body run in the page).
 * @param {string} name
 * @param {{ goto: (url: string) => Promise<unknown>, run: (body: string) => Promise<any> }} b
 */
async function checkPage(name, b) {
  const seen = { version: '' };
  // The first visit: the service worker installs and the page reloads once, isolated.
  await b.goto(`${url}?backend=cpu&max=4`);
  const deadline = Date.now() + 30_000;
  let isolated = false;
  while (!isolated && Date.now() < deadline) {
    isolated = await b.run('return self.crossOriginIsolated === true').catch(() => false);
    if (!isolated) await sleep(200);
  }
  seen.isolated = isolated;
  seen.webgpu = await b.run('return "gpu" in navigator');
  /** Run the page at `query` to its end; its figures, and the output's lengths as it streamed. */
  const runOf = async (query) => {
    await b.goto(`${url}?${query}&autorun=1`);
    const lengths = [];
    const end = Date.now() + 180_000;
    for (;;) {
      const now = await b
        .run(
          'const s = document.querySelector("[data-testid=status]"); const o = document.querySelector("#run-view [data-testid=output]"); return s && o ? [s.textContent, o.textContent.length] : ["", 0]',
        )
        .catch(() => ['', 0]);
      if (now[0] === 'done' || now[0] === 'error') break;
      if (now[0] === 'running' && lengths.at(-1) !== now[1]) lengths.push(now[1]);
      assert.ok(Date.now() < end, `${name}: ${query} did not end in 3 minutes (status ${now[0]})`);
      await sleep(20);
    }
    const [conditions, output, error, threadsNote] = await b.run(
      'return [document.querySelector("#run-view [data-testid=conditions]").textContent, document.querySelector("#run-view [data-testid=output]").textContent, document.querySelector("[data-testid=error]").textContent, document.querySelector("[data-testid=threads-note]").textContent]',
    );
    assert.equal(error, '', `${name}: ${query}: ${error}`);
    return { conditions, output, threadsNote, lengths };
  };
  const stories = await runOf('model=stories260K&backend=cpu&quant=f32&max=40&threads=2');
  assert.match(
    stories.output,
    /^Once upon a time, there was a little girl named Lily\./,
    `${name}: ${stories.output}`,
  );
  const smollm2 = await runOf(
    `backend=cpu&chat=0&max=32&prompt=${encodeURIComponent('Once upon a time')}&threads=2`,
  );
  assert.match(
    smollm2.conditions,
    /smollm2-135m/,
    `${name}: the page opens on SmolLM2 (from the site's parts)`,
  );
  assert.match(smollm2.output, /^Once upon a time./);
  assert.ok(
    smollm2.lengths.length >= 3,
    `${name}: the text streamed (lengths seen while running: ${smollm2.lengths.join(' ')})`,
  );
  // What differs is said: the build in the conditions, and why one thread where it is one.
  for (const run of [stories, smollm2]) {
    assert.match(
      run.conditions,
      /\[CPU \(SIMD128(\+relaxed)?\)(, 2 threads)?\]/,
      `${name}: ${run.conditions}`,
    );
    if (!run.conditions.includes('2 threads]'))
      assert.match(run.threadsNote, /^one thread here: /, `${name}: one thread, and why`);
  }
  const auto = await runOf('model=stories260K&backend=auto&max=20');
  // Gemma 3 270M (253 MB in 11 parts, where make test-browsers put it in the site): kept in the
  // browser's Cache API, so that the next visit reads every part from there.
  if (existsSync(resolve(site, 'models/gemma3-270m'))) {
    const gemma = `model=gemma3-270m&backend=cpu&max=8&prompt=${encodeURIComponent('Once upon a time')}`;
    const first = await runOf(gemma);
    assert.match(first.conditions, /gemma3-270m/);
    const again = await runOf(gemma);
    const download = await b.run('return document.querySelector("#download-text").textContent');
    assert.match(
      download,
      /253\.1 MB of 253\.1 MB \(100%\), from cache/,
      `${name}: the second visit reads Gemma from the browser's storage`,
    );
    assert.equal(again.output, first.output);
    seen.gemma_from_cache = download;
  }
  Object.assign(seen, {
    build: smollm2.conditions.match(/\[CPU \(([^)]*)\)/)?.[1],
    threads: smollm2.conditions.includes('2 threads]') ? 2 : 1,
    one_thread_why: smollm2.threadsNote,
    stories260K: stories.conditions,
    smollm2: smollm2.conditions,
    smollm2_text: smollm2.output,
    streamed_lengths: smollm2.lengths,
    auto: auto.conditions,
  });
  return seen;
}

test(
  'Firefox ESR (WebDriver BiDi): the site on a static host, isolated by its service worker, stories260K and SmolLM2 on the CPU, streaming',
  { skip: !existsSync(FIREFOX) && `${FIREFOX} is missing (apt install firefox-esr)` },
  async () => {
    const browser = await puppeteer.launch({
      browser: 'firefox',
      executablePath: FIREFOX,
      headless: true,
    });
    try {
      const page = await browser.newPage();
      const errors = [];
      page.on('pageerror', (e) => errors.push(e.message));
      const seen = await checkPage('Firefox', {
        goto: (to) => page.goto(to),
        run: (body) => page.evaluate(`(() => { ${body} })()`),
      });
      seen.version = await browser.version();
      facts.firefox = seen;
      assert.equal(
        seen.isolated,
        true,
        'Firefox: the service worker made the page cross-origin isolated',
      );
      assert.deepEqual(errors, []);
    } finally {
      await browser.close();
    }
  },
);

test(
  'WebKitGTK MiniBrowser (WebKitWebDriver): the site on a static host, isolated by its service worker, stories260K and SmolLM2 on the CPU, streaming',
  {
    skip:
      (!existsSync(MINIBROWSER) || !process.env.DISPLAY) &&
      'needs WebKitGTK (apt install webkit2gtk-driver) and a display (make test-browsers runs it under xvfb-run)',
  },
  async () => {
    const session = await startSession('WebKitWebDriver', {
      browserName: 'MiniBrowser',
      'webkitgtk:browserOptions': { binary: MINIBROWSER, args: ['--automation'] },
    });
    try {
      const seen = await checkPage('WebKitGTK', session);
      seen.version = `WebKitGTK ${session.version}`;
      facts.webkitgtk = seen;
      assert.equal(
        seen.isolated,
        true,
        'WebKitGTK: the service worker made the page cross-origin isolated',
      );
    } finally {
      await session.close();
    }
  },
);
