// What the end-to-end test files share: the page's server (www/serve.mjs on `port`, the models
// folder mounted) and Debian's Chromium driven by playwright-core. Not a test file itself.
import { spawn } from 'node:child_process';
import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { resolve } from 'node:path';
import { chromium } from 'playwright-core';

export const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));
export const models = resolve(root, process.env.MODELS || 'models');

/** The page's server on a free port of 127.0.0.1, once it listens: `{ server, base }`. */
export async function startServer() {
  const server = spawn('node', [resolve(root, 'www/serve.mjs')], {
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', MODELS: models },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const base = await new Promise((ok, fail) => {
    server.stdout.on('data', (d) => {
      const listening = /serving on (http:\/\/127\.0\.0\.1:\d+)\//.exec(String(d));
      if (listening) ok(listening[1]);
    });
    server.on('exit', (code) => fail(new Error(`server exited ${code}`)));
  });
  return { server, base };
}

/**
 * The page's server and a headless Chromium for a test file, started before its tests and
 * stopped after them: `site.base` (the server's origin) and `site.browser` once the tests run.
 * @param {{ webgpu?: boolean }} [options]  WebGPU allowed (the default) or not
 */
export function pageSite({ webgpu = true } = {}) {
  const site = {
    base: '',
    /** @type {import('playwright-core').Browser} */ browser: /** @type {any} */ (null),
    /** @type {import('node:child_process').ChildProcess | null} */ server: null,
  };
  before(async () => {
    ({ server: site.server, base: site.base } = await startServer());
    site.browser = await launchBrowser({ webgpu });
  });
  after(async () => {
    await site.browser?.close();
    site.server?.kill();
  });
  return site;
}

/** Headless Chromium with no background networking, WebGPU allowed unless `webgpu` is false. */
export function launchBrowser({ webgpu = true } = {}) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/lib/chromium/chromium',
    args: [
      '--no-sandbox',
      ...(webgpu ? ['--enable-unsafe-webgpu'] : []),
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
}

/**
 * A new page of `browser` at `url`, 1280x1000, with the errors it throws collected; `prepare(page)`
 * runs before it loads (to route its requests, say); `context`: more of its context's options
 * (`serviceWorkers: 'block'`, as a private window).
 * @param {import('playwright-core').Browser} browser
 * @param {string} url
 * @param {(page: import('playwright-core').Page) => Promise<unknown>} [prepare]
 * @param {import('playwright-core').BrowserContextOptions} [context]
 */
export async function openPage(browser, url, prepare = async () => {}, context = {}) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 }, ...context });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await prepare(page);
  await page.goto(url);
  return { page, errors };
}

/**
 * Stop the main run from inside the page the moment its first token shows (stories260K is too
 * quick to stop from the test's side): by clicking Stop (`how` 'click') or pressing Escape.
 * @param {import('playwright-core').Page} page
 * @param {'click' | 'escape'} how
 */
export function stopAtFirstToken(page, how) {
  return page.evaluate((how) => {
    const output = document.querySelector('#run-view [data-testid=output]');
    const prompt = output.textContent.length;
    new MutationObserver((_, observer) => {
      if (output.textContent.length > prompt) {
        observer.disconnect();
        if (how === 'click') document.querySelector('[data-testid=stop]').click();
        else document.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape', bubbles: true }));
      }
    }).observe(output, { subtree: true, childList: true, characterData: true });
  }, how);
}

/**
 * Wait for the page's run to end, check that it ended without an error, and resolve to its
 * report (the meter's, as the page kept it).
 * @param {import('playwright-core').Page} page
 */
export async function finishedReport(page) {
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(
    await page.getByTestId('error').isHidden(),
    true,
    await page.getByTestId('error').textContent(),
  );
  return page.evaluate(() => /** @type {any} */ (globalThis).tokenometer.lastReport);
}
