// What the browser benchmarks share: the page's folders, the model files in `files` under /files/,
// the bench pages under /bench/ and wllama under /wllama/, served on loopback, and a headless
// Chromium (CHROMIUM, default /usr/lib/chromium/chromium).
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { pageMounts, staticServer } from '../../www/serve.mjs';

const root = resolve(fileURLToPath(new URL('../..', import.meta.url)));

/**
 * Serve the page and `files`, and launch Chromium: `{ base, server, browser }`.
 * @param {string} files
 */
export async function benchPage(files) {
  const server = staticServer(
    pageMounts([
      ['/files/', files],
      ['/bench/', resolve(root, 'tests/bench')],
      ['/wllama/', resolve(root, 'node_modules/@wllama/wllama/esm')],
    ]),
  );
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
  return { base, server, browser };
}
