// README's picture of the page explaining its speed: a run of SmolLM2 on the CPU with the token
// inspector on and the bandwidth ceiling's gauge beside the needle, in headless Chromium at
// 1280 wide. Not a test; run by hand after `make pkg` and `make models`:
//   node tests/bench/screenshot_explain.mjs [OUT.png]  (THREADS=2, QUANT=q8)
import { resolve } from 'node:path';
import { chromium } from 'playwright-core';
import { pageMounts, staticServer } from '../../www/serve.mjs';

const out = resolve(process.argv[2] || 'docs/screenshots/explain-1280.png');
const server = staticServer(pageMounts());
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const base = `http://127.0.0.1:${server.address().port}`;
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
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.addInitScript(() => localStorage.setItem('tokenometer.showTokens', '1'));
  const query = new URLSearchParams({
    backend: 'cpu',
    quant: process.env.QUANT || 'q8',
    threads: process.env.THREADS || '2',
    chat: '0',
    max: '40',
    prompt: 'The speed of a language model is measured in',
    autorun: '1',
  });
  await page.goto(`${base}/?${query}`);
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 180_000 },
  );
  const error = await page.getByTestId('error').textContent();
  if (error) throw new Error(error);
  // Focus a generated token, so that its alternatives show.
  await page.locator('#run-view [data-logprob]').nth(6).focus();
  await page.locator('#run-view .meter').evaluate((el) => el.scrollIntoView());
  const view = await page.locator('#run-view').boundingBox();
  await page.screenshot({
    path: out,
    clip: { x: 0, y: view.y, width: 1280, height: Math.min(820, view.height) },
  });
  console.log(
    `wrote ${out}: ${await page.locator('#run-view [data-testid=ceiling-sentence]').textContent()}`,
  );
} finally {
  await browser.close();
  server.close();
}
