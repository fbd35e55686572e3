// End-to-end: the CPU engine on several threads in the page (the threaded build, pkg/threads/:
// Web Workers sharing the module's memory, in a cross-origin isolated page). threads=2 gives the
// text of one thread, says so in the conditions and in Share; lanes at once divide the threads;
// a page that cannot share memory, or a host without the threaded build, runs one thread and says
// why. Needs `make pkg` with nightly Rust (skipped, with a line, without pkg/threads/, except where
// REQUIRE_THREADS is set, as CI sets it).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { openPage, pageSite, root } from './harness.mjs';

const site = pageSite({ webgpu: false });
const threaded = existsSync(resolve(root, 'pkg/threads/tokenometer.js'));

const open = (query, prepare, context) =>
  openPage(site.browser, `${site.base}/?${query}`, prepare, context);

// CI sets REQUIRE_THREADS (.ci/run): there a missing threaded build fails instead of skipping.
test(
  'the threaded build is here where REQUIRE_THREADS asks for it',
  { skip: !process.env.REQUIRE_THREADS && 'REQUIRE_THREADS is not set' },
  () => {
    assert.ok(
      threaded,
      'REQUIRE_THREADS is set (CI), but pkg/threads/ is missing: make pkg needs nightly Rust with rust-src',
    );
  },
);

const text = (page, id) => page.locator('#run-view').getByTestId(id).textContent();
const finished = (page) =>
  page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );

test(
  "threads=2 runs the threaded build on two threads and gives one thread's text",
  { skip: !threaded && 'no pkg/threads/ (make pkg without nightly Rust)' },
  async () => {
    const prompt = encodeURIComponent('Once upon a time');
    const { page, errors } = await open(
      `model=stories260K&backend=cpu&quant=q8&max=80&threads=2&prompt=${prompt}&autorun=1`,
    );
    assert.equal(await page.evaluate(() => crossOriginIsolated), true);
    await finished(page);
    assert.equal(
      await page.getByTestId('error').isHidden(),
      true,
      await page.getByTestId('error').textContent(),
    );
    assert.equal(await page.getByTestId('threads').inputValue(), '2');
    assert.match(await text(page, 'conditions'), /on cpu \[CPU \(SIMD128\+relaxed\), 2 threads\]/);
    const two = await text(page, 'output');
    assert.match(two, /^Once upon a time, there was a little girl named Lily\./);
    const outputTokens = (await text(page, 'conditions')).match(/output \d+ tok/)[0];
    // Share keeps the threads.
    await page.getByTestId('share').click();
    assert.equal(
      new URL(await page.getByTestId('share-url').inputValue()).searchParams.get('threads'),
      '2',
    );
    // One thread: another build (relaxed, one thread), the same text.
    await page.getByTestId('threads').selectOption('1');
    await page.getByTestId('run').click();
    // The one-thread run is over when its conditions name its build and all its tokens and the
    // status says done (the status alone could still be the last run's; seen once on a loaded run).
    await page.waitForFunction(
      (tokens) => {
        const conditions = document.querySelector('#run-view [data-testid=conditions]').textContent;
        return (
          /\[CPU \(SIMD128\+relaxed\)\]/.test(conditions) &&
          conditions.includes(tokens) &&
          document.querySelector('[data-testid=status]').textContent === 'done'
        );
      },
      outputTokens,
      { timeout: 120_000 },
    );
    assert.equal(await text(page, 'output'), two);

    // The threaded build's kernels against the scalar ones, in this browser.
    const check = await page.evaluate(async () => {
      const engine = await import('/pkg/threads/tokenometer.js');
      await engine.default();
      return engine.kernelCheckForTests();
    });
    assert.equal(check.isa, 'SIMD128+relaxed');
    assert.ok(check.worst_relative_error < 1e-5, JSON.stringify(check));
    assert.deepEqual(errors, []);
    await page.close();
  },
);

test(
  "SmolLM2 as stored on two threads: llama.cpp's first words, and the concurrency lab on the same threads",
  { skip: !threaded && 'no pkg/threads/' },
  async () => {
    const { page, errors } = await open('backend=cpu&max=8&threads=2&autorun=1');
    await finished(page);
    assert.equal(
      await page.getByTestId('error').isHidden(),
      true,
      await page.getByTestId('error').textContent(),
    );
    const conditions = await text(page, 'conditions');
    assert.ok(conditions.includes('smollm2-135m (llama 134.5M params, stored'), conditions);
    assert.ok(conditions.includes('[CPU (SIMD128+relaxed), 2 threads]'), conditions);
    assert.match(
      await text(page, 'output'),
      /^What is a token, in one sentence\?A token is a small,/,
    );
    // The lab runs on the loaded engine: its threads, its ceiling measured on them.
    await page.getByTestId('lab-users').fill('2');
    await page.getByTestId('lab-max').fill('8');
    await page.getByTestId('lab-start').click();
    await page.waitForFunction(
      () =>
        ['done', 'error'].includes(document.querySelector('[data-testid=lab-status]').textContent),
      null,
      { timeout: 300_000 },
    );
    assert.equal(
      await page.getByTestId('lab-error').isHidden(),
      true,
      await page.getByTestId('lab-error').textContent(),
    );
    assert.match(
      await page.getByTestId('lab-conditions').textContent(),
      /\[CPU \(SIMD128\+relaxed\), 2 threads\], 2 users/,
    );
    assert.match(await page.getByTestId('lab-ceiling-tps').textContent(), /^\d+$/);
    assert.deepEqual(errors, []);
    await page.close();
  },
);

test(
  'with the engine on every core the run view draws its text ten times a second and its figures twice, at fewer threads every frame with news',
  { skip: !threaded && 'no pkg/threads/' },
  async () => {
    /**
     * The gaps (ms) between the run view's drawings of its text, and of its figures (the conditions
     * line, which counts the output's tokens), in a run of SmolLM2 at `threads`, the final drawing
     * (at the run's end, whatever the pace) left out.
     */
    const gaps = async (threads) => {
      const { page, errors } = await open(
        `backend=cpu&max=160&chat=0&prompt=${encodeURIComponent('Once upon a time')}&threads=${threads}`,
        (p) =>
          p.addInitScript(() => {
            /** @type {number[]} */
            const drawn = [];
            /** @type {number[]} */
            const figures = [];
            // When each drawing began (the view paces its drawings' beginnings): the start of the
            // animation frame callback whose writes the observer sees right after it. The observer's
            // own time would add the drawing's length, which varies on a loaded machine (seen: two
            // gaps of 90 and 94 ms at a pace of 100).
            let began = 0;
            const frame = globalThis.requestAnimationFrame.bind(globalThis);
            globalThis.requestAnimationFrame = (callback) =>
              frame((t) => {
                began = performance.now();
                callback(t);
              });
            Object.assign(globalThis, { drawn, figures });
            document.addEventListener('DOMContentLoaded', () => {
              // The text read and the text ahead of the reader: written by the view's drawings alone.
              const observer = new MutationObserver(() => drawn.push(began));
              for (const ref of ['read', 'ahead']) {
                observer.observe(document.querySelector(`#run-view [data-ref=${ref}]`), {
                  childList: true,
                  subtree: true,
                  characterData: true,
                });
              }
              new MutationObserver(() => figures.push(began)).observe(
                document.querySelector('[data-testid=conditions]'),
                { childList: true, subtree: true, characterData: true },
              );
            });
          }),
      );
      await page.waitForFunction(
        () => document.querySelector('[data-testid=max]').value !== '',
        null,
        { timeout: 60_000 },
      );
      // The first run loads the model; the second is the one watched.
      for (const watched of [false, true]) {
        await page.evaluate(() => {
          /** @type {any} */ (globalThis).drawn.length = 0;
          /** @type {any} */ (globalThis).figures.length = 0;
        });
        await page.getByTestId('run').click();
        await finished(page);
        // The drawings of the run, taken at once. The run's end draws outside a frame, so that
        // drawing carries the frame time of the one before it; the reading cursor goes on drawing
        // after the run. Each list is cut before the end's drawing (the first time repeated), so
        // neither counts (once a cursor's drawing was taken here too, the end's was not last, and
        // the two read as 0 ms apart: CI, 2026-12-07).
        const times = await page.evaluate(() => ({
          drawn: [.../** @type {any} */ (globalThis).drawn],
          figures: [.../** @type {any} */ (globalThis).figures],
        }));
        assert.equal(
          await page.getByTestId('error').isHidden(),
          true,
          await page.getByTestId('error').textContent(),
        );
        if (!watched) continue;
        assert.match(await text(page, 'output'), /^Once upon a time/);
        assert.match(
          await text(page, 'conditions'),
          threads > 1 ? new RegExp(`${threads} threads\\]`) : /\[CPU \(SIMD128\+relaxed\)\]/,
        );
        // The text drawn a piece at a time (the reader's part and the part ahead, each of many text
        // nodes) is the run's tokens in order, as the token inspector draws them after the run.
        const drawnText = await page.evaluate(() =>
          ['read', 'ahead']
            .map((ref) => document.querySelector(`#run-view [data-ref=${ref}]`)?.textContent)
            .join(''),
        );
        await page.locator('#run-view').getByTestId('show-tokens').check();
        await page.waitForFunction(
          () => document.querySelector('#run-view .output-tokens [data-token-id]'),
          null,
          { timeout: 10_000 },
        );
        const tokens = await page.evaluate(() =>
          [...document.querySelectorAll('#run-view .output-tokens [data-token-id]')]
            .map((span) => span.textContent)
            .join(''),
        );
        assert.ok(
          tokens.length > 100 &&
            drawnText.startsWith(tokens) &&
            drawnText.length - tokens.length <= 2,
          `drawn ${JSON.stringify(drawnText)}, tokens ${JSON.stringify(tokens)}`,
        );
        const between = (/** @type {number[]} */ all) => {
          const end = all.findIndex((t, i) => i > 0 && t === all[i - 1]);
          const times = end < 0 ? all.slice(0, -1) : all.slice(0, end);
          return times.slice(1).map((t, i) => t - times[i]);
        };
        const drawn = between(times.drawn);
        const figures = between(times.figures);
        assert.deepEqual(errors, []);
        await page.close();
        assert.ok(
          drawn.length >= 3 && figures.length >= 1,
          `gaps between drawings in the run: ${drawn.length} of the text, ${figures.length} of the figures`,
        );
        return { text: drawn, figures };
      }
      return { text: [], figures: [] };
    };
    const show = (/** @type {number[]} */ gaps) => gaps.map((g) => g.toFixed(0)).join(' ');
    const cores = await (async () => {
      const { page } = await open('model=stories260K');
      const n = await page.evaluate(() => navigator.hardwareConcurrency);
      await page.close();
      return n;
    })();
    const every = await gaps(cores);
    assert.ok(
      Math.min(...every.text) >= 95,
      `on ${cores} threads of ${cores} cores, gaps between drawings of the text (ms): ${show(every.text)}`,
    );
    assert.ok(
      Math.min(...every.figures) >= 495,
      `on ${cores} threads of ${cores} cores, gaps between drawings of the figures (ms): ${show(every.figures)}`,
    );
    if (cores > 1) {
      const fewer = await gaps(1);
      assert.ok(
        Math.min(...fewer.text) < 50,
        `on 1 thread of ${cores} cores, gaps between drawings of the text (ms): ${show(fewer.text)}`,
      );
      assert.ok(
        Math.min(...fewer.figures) < 50,
        `on 1 thread of ${cores} cores, gaps between drawings of the figures (ms): ${show(fewer.figures)}`,
      );
    }
  },
);

test(
  'lanes at once divide the chosen threads between the CPU lanes, and say so',
  { skip: !threaded && 'no pkg/threads/' },
  async () => {
    const { page, errors } = await open(
      'model=stories260K&threads=2&max=40&lanes=cpu:q8,cpu:f32&autorun=1',
    );
    await page.waitForFunction(
      () =>
        ['done', 'error'].includes(
          document.querySelector('[data-testid=lanes-status]').textContent,
        ),
      null,
      { timeout: 300_000 },
    );
    assert.equal(await page.getByTestId('lanes-status').textContent(), 'done');
    assert.equal(
      await page.getByTestId('lanes-threads').textContent(),
      'At once: the 2 CPU threads chosen are divided between 2 CPU lanes, 1 each (at least one).',
    );
    const lanes = page.getByTestId('lane');
    for (const i of [0, 1])
      assert.match(
        await lanes.nth(i).getByTestId('conditions').textContent(),
        /\[CPU \(SIMD128\+relaxed\)\]/,
      );
    // One after another, each lane has both threads.
    await page.getByTestId('lanes-mode').selectOption('sequential');
    await page.getByTestId('run-lanes').click();
    await page.waitForFunction(
      () =>
        document.querySelectorAll('[data-testid=lane] [data-testid=lane-status]')[1]
          ?.textContent === 'done',
      null,
      { timeout: 300_000 },
    );
    assert.equal(await page.getByTestId('lanes-threads').isHidden(), true);
    for (const i of [0, 1]) {
      assert.match(await lanes.nth(i).locator('h3').textContent(), /\(2 threads\)/);
      assert.match(
        await lanes.nth(i).getByTestId('conditions').textContent(),
        /\[CPU \(SIMD128\+relaxed\), 2 threads\]/,
      );
    }
    assert.deepEqual(errors, []);
    await page.close();
  },
);

test('one thread, and why: a page that is not cross-origin isolated, a host without the threaded build, a bad threads=', async () => {
  // The same page without COOP/COEP, in a window without service workers (as a private one; with
  // them the site's sw.js adds the headers, tests/e2e/site.test.mjs): no shared memory, so one
  // thread, said beside the control.
  const plain = await open(
    'model=stories260K&backend=cpu&quant=q8&max=20&threads=2&autorun=1',
    (p) =>
      p.route(`${site.base}/?*`, async (route) => {
        const response = await route.fetch();
        const headers = { ...response.headers() };
        delete headers['cross-origin-opener-policy'];
        delete headers['cross-origin-embedder-policy'];
        await route.fulfill({ response, headers });
      }),
    { serviceWorkers: 'block' },
  );
  assert.equal(await plain.page.evaluate(() => crossOriginIsolated), false);
  await finished(plain.page);
  assert.equal(
    await plain.page.getByTestId('error').isHidden(),
    true,
    await plain.page.getByTestId('error').textContent(),
  );
  assert.match(
    await plain.page.getByTestId('threads-note').textContent(),
    /one thread here: the page is not cross-origin isolated \(its host sends no COOP\/COEP headers.*service worker/,
  );
  assert.match(await text(plain.page, 'conditions'), /\[CPU \(SIMD128\+relaxed\)\]/);
  await plain.page.close();
  // A host that does not serve pkg/threads/: the worker falls back and the conditions say why.
  const partial = await open(
    'model=stories260K&backend=cpu&quant=q8&max=20&threads=2&autorun=1',
    (p) =>
      p.route('**/pkg/threads/**', (route) => route.fulfill({ status: 404, body: 'not here' })),
  );
  await finished(partial.page);
  assert.equal(
    await partial.page.getByTestId('error').isHidden(),
    true,
    await partial.page.getByTestId('error').textContent(),
  );
  assert.match(
    await text(partial.page, 'conditions'),
    /\[CPU \(SIMD128\+relaxed\)\],.*one thread: the threaded build did not load/,
  );
  await partial.page.close();
  const bad = await open('model=stories260K&threads=0&autorun=1');
  const cores = await bad.page.evaluate(() => navigator.hardwareConcurrency);
  assert.match(
    await bad.page.getByTestId('error').textContent(),
    new RegExp(`threads=0 is not a choice \\(1 to ${cores}, this browser's logical cores\\)`),
  );
  await bad.page.close();
});
