// The cold start as a waterfall (www/cold-start.js, crate/meter/cold.rs): from opening the page to
// its first token, each part timed by its own marks (the page, the wait for Run, reading the
// header, the download with its bytes and where they came from, loading, warm-up, the bandwidth
// probe, then the run's queue, tokenizing, prefill and first token). The parts add to the page's
// "page open to first token" within 5% (what no part covers is said), and a second visit says the
// model came from this browser's cache.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pageSite } from './harness.mjs';

const site = pageSite({ webgpu: false });

/** Open the page in `context`, run SmolLM2 once, and read the waterfall. */
async function coldStart(context, t) {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(
    `${site.base}/?model=smollm2-135m&backend=cpu&threads=1&max=8&autorun=1&prompt=Hi`,
  );
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
  const waterfall = page.locator('#run-view').getByTestId('cold-start');
  await waterfall.waitFor({ state: 'visible' });
  const parts = await waterfall.locator('li').evaluateAll((nodes) =>
    nodes.map((n) => ({
      text: n.textContent,
      ms: Number(n.dataset.ms),
      parallel: n.dataset.parallel === 'true',
    })),
  );
  const sum = waterfall.locator('.cold-sum');
  const total = Number(await sum.getAttribute('data-total-ms'));
  const added = Number(await sum.getAttribute('data-parts-ms'));
  const figure = Number(
    await page.locator('#run-view').getByTestId('metric-open-to-first-token-s').textContent(),
  );
  t.diagnostic(
    `total ${total.toFixed(0)} ms, parts ${added.toFixed(0)} ms: ${parts.map((p) => `${p.text}`).join(' | ')}`,
  );
  assert.deepEqual(errors, []);
  await page.close();
  return { parts, total, added, figure };
}

test('the cold start: its parts add to page-open-to-first-token, the download says its bytes and source', async (t) => {
  const context = await site.browser.newContext({ viewport: { width: 1280, height: 1000 } });
  const first = await coldStart(context, t);
  assert.ok(
    Math.abs(first.total / 1000 - first.figure) < 0.01,
    `the waterfall's total ${first.total} ms is the page's figure ${first.figure} s`,
  );
  assert.ok(
    first.added <= first.total * 1.0001 && first.added >= 0.95 * first.total,
    `the parts add to ${first.added.toFixed(0)} of ${first.total.toFixed(0)} ms`,
  );
  const names = first.parts.map((p) => p.text);
  for (const want of [
    'the page: HTML',
    'until Run',
    "reading the model's header",
    "the model's download",
    'loading',
    'warm-up',
    'tokenizing the prompt',
    'the prefill',
    'the first token, to its event',
  ]) {
    assert.ok(
      names.some((n) => n.startsWith(want)),
      `a part named "${want}…" in ${JSON.stringify(names)}`,
    );
  }
  assert.ok(
    names.some((n) =>
      /^the model's download, parsed and converted as it came, [\d.]+ MB \(from the network\)/.test(
        n,
      ),
    ),
    JSON.stringify(names),
  );
  assert.ok(
    first.parts.some((p) => p.parallel && p.text.startsWith("the engine's download and compile")),
    'the engine compiles beside the download',
  );
  // A second visit: the model comes from this browser's cache.
  const second = await coldStart(context, t);
  assert.ok(
    second.parts.some((p) => /\(from this browser's cache\)/.test(p.text)),
    JSON.stringify(second.parts.map((p) => p.text)),
  );
  assert.ok(
    second.added >= 0.95 * second.total,
    `the parts add to ${second.added.toFixed(0)} of ${second.total.toFixed(0)} ms`,
  );
  await context.close();
});
