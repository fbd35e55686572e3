// The page in front of a room and on a phone: axe-core (npm) finds no serious or critical
// accessibility violation after a run at projector and phone sizes, in the dark and the light
// scheme; nothing scrolls sideways on a phone; the keyboard runs (Enter) and stops (Escape); the
// form's selects show their whole text. Screenshots go to test-results/room-*.png.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pageSite, root, stopAtFirstToken } from './harness.mjs';

const site = pageSite();
const axe = readFileSync(resolve(root, 'node_modules/axe-core/axe.min.js'), 'utf8');

before(async () => {
  mkdirSync(resolve(root, 'test-results'), { recursive: true });
});

const SIZES = [
  [1280, 720],
  [1920, 1080],
  [390, 844],
];

for (const scheme of ['dark', 'light']) {
  test(`after a run, in the ${scheme} scheme at 1280x720, 1920x1080 and 390x844: no serious or critical axe-core violation, nothing scrolls sideways`, async () => {
    for (const [width, height] of SIZES) {
      const page = await site.browser.newPage({
        viewport: { width, height },
        colorScheme: scheme,
        reducedMotion: 'reduce',
      });
      const errors = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(`${site.base}/?model=stories260K&backend=cpu&quant=f32&max=60&autorun=1`);
      await page.waitForFunction(
        () => document.querySelector('[data-testid=status]').textContent === 'done',
        null,
        { timeout: 120_000 },
      );
      await page.addScriptTag({ content: axe });
      const violations = await page.evaluate(async () =>
        (await window.axe.run(document, { resultTypes: ['violations'] })).violations
          .filter((v) => v.impact === 'serious' || v.impact === 'critical')
          .map(
            (v) =>
              `${v.id} (${v.impact}): ${v.nodes
                .slice(0, 3)
                .map((n) => `${n.target.join(' ')}: ${n.any[0]?.message ?? ''}`)
                .join('; ')}`,
          ),
      );
      assert.deepEqual(violations, [], `${width}x${height} ${scheme}`);
      const [scrollWidth, clientWidth] = await page.evaluate(() => [
        document.documentElement.scrollWidth,
        document.documentElement.clientWidth,
      ]);
      assert.ok(
        scrollWidth <= clientWidth,
        `${width}x${height}: the page is ${scrollWidth} px wide in a ${clientWidth} px window`,
      );
      await page.screenshot({
        path: resolve(root, `test-results/room-${width}x${height}-${scheme}.png`),
      });
      assert.deepEqual(errors, []);
      await page.close();
    }
  });
}

test('the keyboard: Enter in the prompt runs, Escape stops, Tab reaches every control; every select of the form shows its whole choice', async () => {
  const page = await site.browser.newPage({ viewport: { width: 1280, height: 720 } });
  await page.goto(`${site.base}/?model=stories260K&backend=cpu&max=2000`);
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'idle',
    null,
    { timeout: 120_000 },
  );
  // Escape from the document the moment the first token shows.
  await stopAtFirstToken(page, 'escape');
  await page.getByTestId('prompt').focus();
  await page.keyboard.press('Enter');
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'done',
    null,
    { timeout: 120_000 },
  );
  assert.equal(
    await page.locator('#run-view').getByTestId('stop-reason').textContent(),
    'cancelled',
  );
  assert.equal(
    await page.getByTestId('prompt').inputValue(),
    'Once upon a time',
    'Enter ran instead of adding a line',
  );
  // Each select is wide enough for its chosen text (plus its arrow).
  const cut = await page.evaluate(() => {
    const ctx = document.createElement('canvas').getContext('2d');
    return [...document.querySelectorAll('.controls select')].flatMap((select) => {
      ctx.font = getComputedStyle(select).font;
      const text = select.selectedOptions[0]?.text ?? '';
      return ctx.measureText(text).width + 30 > select.getBoundingClientRect().width
        ? [`${select.id}: "${text}"`]
        : [];
    });
  });
  assert.deepEqual(cut, []);
  // Tab reaches every control of the form, the replay's and the lab's.
  await page.locator('body').focus();
  const reached = new Set();
  for (let i = 0; i < 80; i++) {
    await page.keyboard.press('Tab');
    reached.add(
      await page.evaluate(
        () =>
          document.activeElement?.getAttribute('data-testid') || document.activeElement?.id || '',
      ),
    );
  }
  for (const id of [
    'prompt',
    'max',
    'run',
    'feel-20',
    'model',
    'backend',
    'quant',
    'share',
    'replay-rate',
  ]) {
    assert.ok(reached.has(id), `Tab never reached ${id}: ${[...reached].join(' ')}`);
  }
  await page.close();
});

test('the first screen at 1280x720 and 1920x1080 holds the prompt, Run and Stop, the live tok/s beside the reader, and the streaming text', async () => {
  for (const [width, height] of SIZES.slice(0, 2)) {
    const page = await site.browser.newPage({ viewport: { width, height } });
    await page.goto(`${site.base}/?model=stories260K&backend=cpu&max=60&autorun=1`);
    await page.waitForFunction(
      () => document.querySelector('[data-testid=status]').textContent === 'done',
      null,
      { timeout: 120_000 },
    );
    const outside = await page.evaluate(() => {
      const view = document.querySelector('#run-view');
      const parts = {
        prompt: document.querySelector('[data-testid=prompt]'),
        run: document.querySelector('[data-testid=run]'),
        stop: document.querySelector('[data-testid=stop]'),
        'live tok/s': view.querySelector('[data-testid=metric-live-tps]'),
        'x a reader': view.querySelector('.versus'),
        'the text': view.querySelector('[data-testid=output]'),
        "the reader's bar": view.querySelector('.output .cursor'),
      };
      return Object.entries(parts).flatMap(([name, node]) => {
        const box = node.getBoundingClientRect();
        return box.top >= 0 &&
          box.bottom <= innerHeight &&
          box.right <= innerWidth &&
          box.height > 0
          ? []
          : [`${name} (${Math.round(box.top)}-${Math.round(box.bottom)})`];
      });
    });
    assert.deepEqual(outside, [], `${width}x${height}: below the fold`);
    assert.match(await page.locator('#run-view .versus').textContent(), /^\d+\.\d × a reader$/);
    await page.close();
  }
});

test('presenter mode (stage=1): big type, the race alone on screen, kept by Share; the section links name their section in the URL', async () => {
  const page = await site.browser.newPage({ viewport: { width: 1280, height: 720 } });
  await page.goto(`${site.base}/?model=stories260K&backend=cpu&max=60&autorun=1`);
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'done',
    null,
    { timeout: 120_000 },
  );
  const normalSize = await page.evaluate(() =>
    parseFloat(getComputedStyle(document.querySelector('#run-view .output')).fontSize),
  );
  await page.getByRole('link', { name: 'Lanes' }).click();
  assert.equal(new URL(page.url()).hash, '#lanes');
  await page.getByTestId('stage-link').click();
  await page.waitForURL(/stage=1/);
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'done',
    null,
    { timeout: 120_000 },
  );
  assert.equal(await page.getByTestId('stage-link').textContent(), 'Leave presenter mode');
  const stageSize = await page.evaluate(() =>
    parseFloat(getComputedStyle(document.querySelector('#run-view .output')).fontSize),
  );
  assert.ok(stageSize >= 1.4 * normalSize, `${stageSize} px against ${normalSize} px`);
  for (const id of ['lanes', 'lab', 'results', 'replay'])
    assert.equal(await page.locator(`#${id}`).isVisible(), false, id);
  assert.equal(await page.getByTestId('backend').isVisible(), false);
  for (const id of ['prompt', 'run', 'stop', 'max'])
    assert.equal(await page.getByTestId(id).isVisible(), true, id);
  await page.screenshot({ path: resolve(root, 'test-results/room-stage-1280x720.png') });
  // However long the conditions line grows (a build's note, the memory, the warm-up), it keeps two
  // lines here and the text stays on the first screen.
  await page.evaluate(() => {
    const line = /** @type {HTMLElement} */ (
      document.querySelector('#run-view [data-testid=conditions]')
    );
    line.textContent += ' · and a condition more'.repeat(20);
  });
  const box = await page.locator('#run-view [data-testid=output]').boundingBox();
  assert.ok(box.y + box.height <= 720, `the text ends at ${box.y + box.height}`);
  await page.getByTestId('share').click();
  assert.equal(
    new URL(await page.getByTestId('share-url').inputValue()).searchParams.get('stage'),
    '1',
  );
  await page.close();
});

test('"Feel a speed" replays the last run at 5, 20 or 200 tok/s in one click, in presenter mode too', async () => {
  const page = await site.browser.newPage({ viewport: { width: 1280, height: 720 } });
  await page.goto(`${site.base}/?model=stories260K&backend=cpu&max=20&stage=1&autorun=1`);
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'done',
    null,
    { timeout: 120_000 },
  );
  assert.equal(await page.locator('#replay').isVisible(), false);
  await page.getByTestId('feel-20').click();
  assert.equal(new URL(page.url()).hash, '#replay');
  await page.waitForFunction(
    () =>
      document
        .querySelector('[data-testid=replay-status]')
        .textContent.startsWith('replaying at 20 tok/s'),
    null,
    { timeout: 10_000 },
  );
  assert.equal(await page.locator('#replay').isVisible(), true, 'the replay shows while it plays');
  await page.waitForFunction(
    () => document.querySelector('[data-testid=replay-status]').textContent.startsWith('done'),
    null,
    { timeout: 30_000 },
  );
  // 20 tokens at 20 tok/s: about a second.
  const seconds = Number(
    (await page.getByTestId('replay-status').textContent()).match(/in ([\d.]+) s/)[1],
  );
  assert.ok(seconds > 0.8 && seconds < 2.5, `${seconds} s`);
  assert.equal(
    await page.locator('#replay').isVisible(),
    false,
    'and hides again in presenter mode',
  );
  await page.close();
});
